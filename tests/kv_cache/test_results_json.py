"""A quick run writes results.json with the documented schema (docs/kv-cache-results-schema.md)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from .test_generation_and_cost import CACHED_STEP_MACS

TIMED = ("prefill_ms", "full_ms", "cached_ms")


@pytest.fixture(scope="module")
def results(nb, quick_dir):
    return json.loads((quick_dir / "results.json").read_text(encoding="utf-8"))


def test_top_level_keys_in_order(results):
    assert list(results) == ["schema_version", "notebook", "created_at", "quick", "environment", "config",
                             "equivalence", "generation", "negative_controls", "cost_model", "timing", "profile",
                             "generation_timing", "figures"]
    assert results["schema_version"] == 3 and results["notebook"] == "infra-benchmark/kv-cache"
    assert results["quick"] is True
    assert datetime.fromisoformat(results["created_at"]).tzinfo is not None


def test_environment_and_config(results):
    env = results["environment"]
    assert set(env) == {"python", "torch", "numpy", "platform", "cpu", "threads"}
    assert all(isinstance(env[k], str) and env[k] for k in ("python", "torch", "numpy", "platform", "cpu"))
    assert env["threads"] == 1
    assert results["config"] == {"vocab": 97, "width": 64, "heads": 4, "head_dim": 16, "layers": 2, "mlp": 256,
                                 "max_positions": 512, "params": 145_280, "seed": 0}


def test_equivalence(results):
    eq = results["equivalence"]
    growth = eq["cache_growth"]
    assert growth["calls"] == [[12, 7, 31, 4], [9, 18], [55], [23]]
    assert growth["cache_lengths"] == [[4, 4], [6, 6], [7, 7], [8, 8]]
    assert len(growth["max_abs_logit_err"]) == 4 and all(e <= 1e-5 for e in growth["max_abs_logit_err"])
    configs = eq["configs"]
    assert len(configs) == 12
    assert {(c["batch"], c["chunk"], c["dtype"]) for c in configs} == {
        (b, c, d) for b in (1, 2) for c in (1, 2, 5) for d in ("fp32", "fp64")}
    for c in configs:
        assert list(c) == ["batch", "chunk", "dtype", "max_abs_logit_err", "max_abs_kv_err", "passed"]
        assert isinstance(c["max_abs_logit_err"], float) and isinstance(c["max_abs_kv_err"], float)
        assert c["passed"] is True
        assert c["max_abs_logit_err"] <= (1e-5 if c["dtype"] == "fp32" else 1e-10)
    assert eq["causality_ok"] is True and eq["cache_unchanged_ok"] is True
    assert eq["tolerances"] == {"fp32": 1e-5, "fp64": 1e-10}


def test_negative_controls(results):
    controls = results["negative_controls"]
    assert set(controls) == {"restart_positions", "local_triangle_mask", "no_mask_with_cache", "swapped_layer_caches"}
    for control in controls.values():
        assert isinstance(control["max_abs_logit_err"], float) and control["detected"] is True
        assert all({"scenario", "chunk", "max_abs_logit_err", "max_abs_kv_err", "passed"} <= set(s)
                   for s in control["scenarios"])


def test_timing(results):
    protocol = results["timing"]["protocol"]
    assert protocol["threads"] == 1 and protocol["warmups"] == 1 and protocol["repeats"] == 3
    assert protocol["continuation_tokens"] == 16 and protocol["order_rotation"] is True
    rows = results["timing"]["rows"]
    assert [r["prompt_tokens"] for r in rows] == [16, 256]
    for r in rows:
        for key in TIMED:   # recorded, never compared with a threshold
            assert set(r[key]) == {"min", "p50", "p95", "max", "samples"}
            assert abs(r[key]["min"] - min(r[key]["samples"])) < 1e-5 and abs(r[key]["max"] - max(r[key]["samples"])) < 1e-5
            assert len(r[key]["samples"]) == protocol["repeats"]
            assert all(isinstance(x, float) and x > 0 for x in r[key]["samples"])
        p, g = r["prompt_tokens"], protocol["continuation_tokens"]
        assert r["projected_positions"] == {"full": g * p + g * (g + 1) // 2, "cached": g}
        for path in ("prefill", "full", "cached"):
            rounds = r[f"{path}_faults_rounds"]
            assert rounds is None or (len(rounds) == protocol["repeats"] and all(f >= 0 for f in rounds))
        assert r["kv_bytes"] == 2 * 1 * (p + g) * 2 * 4 * 16 * 4
    headline = results["timing"]["headline"]
    assert headline["prompt_tokens"] == 256 and headline["positions_fed"] == {"full": 4232, "cached": 16}
    assert isinstance(headline["speedup_p50"], float)
    assert isinstance(headline["speedup_cpu_p50"], float) and headline["speedup_cpu_p50"] > 1   # the notebook's own claim
    assert isinstance(headline["speedup_cpu_min"], float) and headline["speedup_cpu_min"] > 1   # the headline, fastest rounds
    assert isinstance(headline["speedup_min"], float)
    assert 200 < headline["macs_ratio"] < 300


def test_profile_and_generation_timing(results):
    profile = results["profile"]
    assert profile["repeats"] == 10 and profile["sessions"] == 5 and profile["unit"] == "us" and list(profile["calls"]) == ["cached_step", "prefill_16", "full_step"]
    for run in profile["calls"].values():
        assert isinstance(run["top_level"], int) and run["top_level"] > 0
        assert all(set(op) == {"calls", "self_us"} for op in run["ops"].values())
    timing = results["generation_timing"]
    assert (timing["prompt_tokens"], timing["new_tokens"]) == (256, 32)
    for calls in timing["calls_ms"].values():
        assert len(calls) == 32 and all(len(call) == 2 and call[0] < call[1] for call in calls)
    assert all(len(cpu) == 32 and all(ms >= 0 for ms in cpu) for cpu in timing["cpu_ms"].values())
    assert all(len(f) == 32 and all(x is None or x >= 0 for x in f) for f in timing["faults"].values())


def test_figures_written(results, quick_dir):
    assert results["figures"] == ["masks.png", "cache_growth.png", "timing.png", "generation.png"]
    for name in results["figures"]:
        assert (quick_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_generation(results):
    gen = results["generation"]
    assert (gen["prompt_tokens"], gen["new_tokens"], gen["batch"]) == (8, 40, 2)
    assert len(gen["prompts"]) == len(gen["tokens"]) == 2
    assert all(len(p) == 8 for p in gen["prompts"]) and all(len(t) == 40 for t in gen["tokens"])
    assert gen["tokens_equal"] is True and gen["logits_close"] is True
    assert gen["max_abs_logit_err"] <= gen["tolerance"] == 1e-5
    assert gen["min_top2_margin"] > 100 * gen["max_abs_logit_err"]
    control = gen["negative_control"]
    assert control["mask_fn"] == "local_triangle_mask" and control["logits_close"] is False


def test_cost_model(results):
    cost = results["cost_model"]
    assert list(cost) == ["unit", "steps", "hidden_state_cache", "kv_fp16", "per_step", "summary"]
    parts = ["projections", "attention", "mlp", "vocab", "total"]
    assert [s["T"] for s in cost["steps"]] == [16, 64, 128, 256]
    for step in cost["steps"]:
        for path in ("full", "cached"):
            assert list(step[path]) == parts
            assert step[path]["total"] == sum(step[path][p] for p in parts[:-1])
        assert step["full"]["total"] == step["T"] * step["cached"]["total"]
        assert step["kv_read_bytes"] == 2 * step["T"] * 2 * 4 * 16 * 4 and step["fresh_storage"] is True
    assert cost["steps"][-1]["full"]["total"] == 256 * CACHED_STEP_MACS and cost["steps"][-1]["cached"]["total"] == CACHED_STEP_MACS
    hidden = cost["hidden_state_cache"]
    assert hidden["hidden_state_step_macs"] == hidden["kv_step_macs"] + hidden["extra_macs"]
    assert [row["name"] for row in cost["kv_fp16"]][1:] == ["GPT-2 (124M)", "Llama 2 7B", "Llama 3.1 8B"]
    for row in cost["kv_fp16"]:
        per_token = 2 * row["layers"] * row["kv_heads"] * row["head_dim"] * 2
        assert row["fp16_bytes_per_token"] == per_token
        assert row["fp16_bytes_per_context"] == {"4096": 4096 * per_token, "32768": 32768 * per_token}
        assert row["source"]
    assert [r["prompt_tokens"] for r in cost["per_step"]] == [16, 256]
    summary = cost["summary"]
    assert (summary["p_min"], summary["p_max"]) == (16, 256) and 0 < summary["cached16_extra_macs"] < 0.05
    assert all(isinstance(v, (int, float)) for v in summary.values())
