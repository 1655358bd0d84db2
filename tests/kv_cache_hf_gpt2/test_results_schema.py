"""The companion's results.json matches docs/kv-cache-hf-gpt2-results-schema.md: keys in order, types,
and every key the run wrote is named on that page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

DOC = Path(__file__).resolve().parents[2] / "docs" / "kv-cache-hf-gpt2-results-schema.md"
TOP_KEYS = ["schema_version", "notebook", "created_at", "quick", "environment", "config", "peer"]
PEER_KEYS = ["reference", "transformers", "attn_implementation", "dtype", "tolerance", "input", "max_abs_error",
             "agrees", "traps", "gelu_new", "cache_reuse", "timing"]
TIMING_KEYS = ["window", "prompt_tokens", "continuation_tokens", "dtype", "threads", "warmups", "repeats",
               "order_rotation", "gpt2_cache_per_round", "clock", "unit", "ours_ms", "gpt2_ms",
               "p50_ratio_gpt2_over_ours", "profile"]
LOGIT_ERROR_KEYS = {"fp32_correct", "fp32_gelu_new", "fp64_correct", "fp64_gelu_new"}


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_errors(errors: dict, layers: int) -> None:
    assert set(errors) == {"full_logits", "cached_logits", "k", "v"}
    assert isinstance(errors["full_logits"], float) and isinstance(errors["cached_logits"], float)
    for side in ("k", "v"):
        assert len(errors[side]) == layers and all(isinstance(e, float) for e in errors[side])


def test_top_level(results):
    assert list(results) == TOP_KEYS
    assert results["schema_version"] == 2 and results["notebook"] == "infra-benchmark/kv-cache-hf-gpt2"
    assert results["quick"] is True and results["environment"]["threads"] == 1
    assert results["config"]["params"] == 145_280 and all(is_int(v) for v in results["config"].values())


def test_peer_keys_in_order_with_types(results):
    peer, layers = results["peer"], results["config"]["layers"]
    assert list(peer) == PEER_KEYS
    assert peer["reference"] == "transformers.GPT2LMHeadModel" and peer["dtype"] == "fp64"
    assert peer["attn_implementation"] == "eager" and peer["tolerance"] == 1e-10 and peer["agrees"] is True
    assert peer["input"] == {"batch": 2, "tokens": 512, "chunks": [128, 1, 1, 61, 1, 64, 255, 1]}
    check_errors(peer["max_abs_error"], layers)
    assert set(peer["traps"]) == {"tied_embeddings", "square_without_transpose", "gelu_new"}
    for trap in peer["traps"].values():
        assert set(trap) == {"max_abs_error", "caught"} and trap["caught"] is True
        check_errors(trap["max_abs_error"], layers)


def test_gelu_and_cache_reuse(results):
    gelu = results["peer"]["gelu_new"]
    assert list(gelu) == ["curve_gap", "median_gap_at_mlp_inputs", "fp32_tolerance", "logit_error"]
    assert list(gelu["logit_error"]) == ["model", "mlp_fc_x0.1"]
    for row in gelu["logit_error"].values():
        assert set(row) == LOGIT_ERROR_KEYS and all(isinstance(e, float) for e in row.values())
    assert gelu["logit_error"]["mlp_fc_x0.1"]["fp32_gelu_new"] < gelu["fp32_tolerance"] == 1e-5
    assert gelu["logit_error"]["mlp_fc_x0.1"]["fp64_gelu_new"] > 1e-10

    reuse = results["peer"]["cache_reuse"]
    assert list(reuse) == ["prefix_tokens", "removed_tokens", "max_abs_error", "agrees", "equals_deep_copy",
                           "negative_control_caught"]
    assert (reuse["prefix_tokens"], reuse["removed_tokens"]) == (200, 24)
    assert list(reuse["max_abs_error"]) == ["cropped_kv", "logits_after_crop", "crop_vs_deep_copy",
                                            "logits_without_crop"]
    assert all(isinstance(e, float) for e in reuse["max_abs_error"].values())
    assert reuse["agrees"] is reuse["equals_deep_copy"] is reuse["negative_control_caught"] is True


def test_timing_types(results):
    timing = results["peer"]["timing"]
    assert list(timing) == TIMING_KEYS
    for key in ("window", "dtype", "clock", "unit", "gpt2_cache_per_round"):
        assert isinstance(timing[key], str)
    for key in ("prompt_tokens", "continuation_tokens", "threads", "warmups", "repeats"):
        assert is_int(timing[key]), key
    assert (timing["prompt_tokens"], timing["continuation_tokens"], timing["warmups"], timing["repeats"]) == (
        256, 16, 1, 5)
    for side in ("ours_ms", "gpt2_ms"):
        assert set(timing[side]) == {"p50", "p95", "samples"} and len(timing[side]["samples"]) == 5
        assert isinstance(timing[side]["p50"], float) and all(isinstance(s, float) for s in timing[side]["samples"])
    assert isinstance(timing["p50_ratio_gpt2_over_ours"], float)
    profile = timing["profile"]
    assert list(profile) == ["ours", "gpt2", "ours_no_cache"]
    for entry in profile.values():
        assert list(entry) == ["aten_op_calls", "python_function_calls", "matmul_flops"]
        assert is_int(entry["aten_op_calls"]) and is_int(entry["python_function_calls"]) and is_int(entry["matmul_flops"])
    assert profile["ours"]["matmul_flops"] == profile["gpt2"]["matmul_flops"] < profile["ours_no_cache"]["matmul_flops"]


def key_paths(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{prefix}{key}"
            if key not in ("traps", "logit_error", "environment", "config", "input", "profile") and not key.endswith("_ms"):
                yield from key_paths(item, f"{prefix}{key}.")


def test_the_doc_names_every_key(results):
    doc = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z0-9_.<>]+)`", doc))
    for path in key_paths(results):
        last = path.split(".")[-1]
        assert path.removeprefix("peer.") in named or last in named, path
