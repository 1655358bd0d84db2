"""The `peer` block of results.json has every key of docs/kv-cache-results-schema.md, with its type."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

PEER_KEYS = ["reference", "transformers", "attn_implementation", "dtype", "tolerance", "input", "max_abs_error",
             "agrees", "traps", "gelu_new", "timing"]
TIMING_KEYS = ["window", "prompt_tokens", "continuation_tokens", "dtype", "threads", "warmups", "repeats",
               "order_rotation", "clock", "unit", "ours_ms", "gpt2_ms", "p50_ratio_gpt2_over_ours"]
LOGIT_ERROR_KEYS = {"fp32_correct", "fp32_gelu_new", "fp64_correct", "fp64_gelu_new"}


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_errors(errors: dict, layers: int) -> None:
    assert set(errors) == {"full_logits", "cached_logits", "k", "v"}
    assert isinstance(errors["full_logits"], float) and isinstance(errors["cached_logits"], float)
    for side in ("k", "v"):
        assert len(errors[side]) == layers and all(isinstance(e, float) for e in errors[side])


@pytest.fixture(scope="module")
def peer(nb, base_dir) -> dict:
    """The `peer` block written by the session's run of the appendix (fixture `nb`)."""
    return json.loads((base_dir / "results.json").read_text(encoding="utf-8"))["peer"]


def test_peer_keys_in_order_with_types(peer, nb):
    assert list(peer) == PEER_KEYS
    for key in ("reference", "transformers", "attn_implementation", "dtype"):
        assert isinstance(peer[key], str) and peer[key]
    assert peer["reference"] == "transformers.GPT2LMHeadModel" and peer["dtype"] == "fp64"
    assert isinstance(peer["tolerance"], float) and isinstance(peer["agrees"], bool)

    assert set(peer["input"]) == {"batch", "tokens", "chunks"}
    assert is_int(peer["input"]["batch"]) and is_int(peer["input"]["tokens"])
    assert all(is_int(c) for c in peer["input"]["chunks"]) and sum(peer["input"]["chunks"]) == peer["input"]["tokens"]

    layers = nb["cfg"].layers
    check_errors(peer["max_abs_error"], layers)
    assert set(peer["traps"]) == {"tied_embeddings", "square_without_transpose", "gelu_new"}
    for trap in peer["traps"].values():
        assert set(trap) == {"max_abs_error", "caught"} and isinstance(trap["caught"], bool)
        check_errors(trap["max_abs_error"], layers)


def test_peer_gelu_and_timing_types(peer):
    gelu = peer["gelu_new"]
    assert list(gelu) == ["curve_gap", "median_gap_at_mlp_inputs", "fp32_tolerance", "logit_error"]
    assert all(isinstance(gelu[k], float) for k in ("curve_gap", "median_gap_at_mlp_inputs", "fp32_tolerance"))
    assert set(gelu["logit_error"]) == {"section-5 weights", "MLP inputs x 0.1"}
    for row in gelu["logit_error"].values():
        assert set(row) == LOGIT_ERROR_KEYS and all(isinstance(e, float) for e in row.values())

    timing = peer["timing"]
    assert list(timing) == TIMING_KEYS
    for key in ("window", "dtype", "clock", "unit"):
        assert isinstance(timing[key], str)
    for key in ("prompt_tokens", "continuation_tokens", "threads", "warmups", "repeats"):
        assert is_int(timing[key]), key
    assert timing["order_rotation"] is True and timing["unit"] == "ms"
    for side in ("ours_ms", "gpt2_ms"):
        assert set(timing[side]) == {"p50", "p95", "samples"}
        assert isinstance(timing[side]["p50"], float) and isinstance(timing[side]["p95"], float)
        assert all(isinstance(s, float) for s in timing[side]["samples"])
    assert isinstance(timing["p50_ratio_gpt2_over_ours"], float)
