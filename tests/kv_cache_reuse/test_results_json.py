"""The record cell's results.json against docs/kv-cache-reuse-results-schema.md, and the figures."""

from __future__ import annotations

import json
import math

TOP_LEVEL = ["schema_version", "notebook", "created_at", "quick", "environment", "config", "tolerances", "prefix_cache",
             "speculative", "split_k", "decode_cost", "roofline", "assisted_generation", "controls", "figures"]
CONTROLS = {"hash_without_prefix": "prefix_cache", "partial_block_shared": "prefix_cache", "held_block_evicted": "prefix_cache",
            "target_cache_not_cropped": "speculative", "merge_without_rescaling": "split_k",
            "keys_without_the_new_token": "decode_cost", "llama_3_1_8b_with_32_kv_heads": "decode_cost",
            "largest_batch_memory_bound": "roofline", "weights_not_amortized": "roofline",
            "referee_rejects_no_rollback": "assisted_generation"}


def load(out_dir):
    text = (out_dir / "results.json").read_text(encoding="utf-8")
    return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name))), text


def test_top_level_keys_in_the_documented_order(quick_run):
    results, _ = load(quick_run[1])
    assert list(results) == TOP_LEVEL
    assert results["schema_version"] == 3 and results["notebook"] == "infra-benchmark/kv-cache-reuse" and results["quick"] is True
    assert results["tolerances"] == {"fp32": 1e-5, "fp64": 1e-10}


def test_every_control_is_recorded_and_caught(quick_run):
    results, _ = load(quick_run[1])
    assert {name: c["section"] for name, c in results["controls"].items()} == CONTROLS
    assert all(c["caught"] is True for c in results["controls"].values())
    prefix = [results["controls"][name] for name in ("hash_without_prefix", "partial_block_shared", "held_block_evicted")]
    assert [c["wrong_requests"] for c in prefix] == [[2], [4], [1]]
    assert all(c["finite"] is True and c["max_abs_logit_err"] > 1e-2 for c in prefix)


def test_sections(quick_run):
    nb, out_dir = quick_run
    results, _ = load(out_dir)
    prefix = results["prefix_cache"]
    assert [r["blocks"] for r in prefix["sweep"]] == list(nb["POOL_SIZES"]) and prefix["block_size"] == 4
    assert all(0 <= r["hit_rate"] <= 1 and r["close"] and r["within_reservation"] and r["all_released"] for r in prefix["sweep"])
    spec = results["speculative"]
    assert [r["k"] for r in spec["runs"]] == list(nb["SPEC_KS"]) and spec["draft"]["layers"] == 1
    assert [r["splits"] for r in results["split_k"]["rows"]] == list(nb["SPLIT_COUNTS"])
    cost = results["decode_cost"]
    assert [p["name"] for p in cost["published"]] == ["GPT-2", "Llama 2 7B", "Llama 3.1 8B", "Llama 3.1 70B", "DeepSeek-V2-Lite"]
    assert all("config.json" in p["source"] and set(p["decode_step"]) == {"1", "64"} for p in cost["published"])
    roof = results["roofline"]
    assert list(roof) == ["protocol", "stream", "matmul", "roof", "weight_sweep", "cache_sweep", "batch_1", "cache_batch_1",
                          "score_product", "value_product", "checks", "gpu_reference"]
    assert set(roof["score_product"]["forms"]) == {"q @ k^T", "k @ q^T"} and set(roof["value_product"]["forms"]) == {"w @ v"} and isinstance(roof["cache_batch_1"]["memory_bound"], bool)
    assert [prefix["scenarios"][name]["hit_tokens"] for name in ("shared_documents", "full_pool")] == [[0, 0, 8, 0, 12], [0, 8, 0]]
    assert roof["roof"]["ridge_flop_per_byte"] == roof["roof"]["flops_per_s"] / roof["roof"]["bandwidth_bytes_per_s"]
    assert roof["roof"]["bandwidth_bytes_per_s"] == max(roof["stream"]["bytes_per_s"].values())
    assert roof["roof"]["flops_per_s"] == max(roof["matmul"]["flops_per_s"], max(r["gflops"] * 1e9 for r in roof["weight_sweep"])) and roof["stream"]["bytes_per_element"] == {"copy": 8, "triad": 12}
    assert roof["protocol"] == {"threads": 1, "dtype": "fp32", "rounds": 3, "statistic": "median", "order": "rotating",
                                "clock": "time.process_time"}
    assert all(roof["checks"].values()) and roof["batch_1"]["bandwidth_share"] >= 1 / 3 >= roof["batch_1"]["peak_share"]
    # No sentences in the file: the criteria are described in docs/kv-cache-reuse-results-schema.md.
    assert all("criterion" not in results[key] for key in ("prefix_cache", "speculative", "split_k", "decode_cost"))
    assert results["assisted_generation"]["skipped"] is False and len(results["assisted_generation"]["runs"]) == len(nb["SPEC_KS"])


def test_strict_json_and_the_figures(quick_run):
    results, text = load(quick_run[1])
    assert "NaN" not in text and "Infinity" not in text

    def walk(value):
        if isinstance(value, float):
            assert math.isfinite(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
    walk(results)
    assert results["figures"] == ["masks.png", "prefix_hit_rate.png", "speculative_calls.png", "roofline.png"]
    assert sorted(p.name for p in quick_run[1].iterdir()) == sorted(results["figures"] + ["results.json"])
