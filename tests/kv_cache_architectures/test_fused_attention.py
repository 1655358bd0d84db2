"""Section 8: SDPA in the decoder, the is_causal control, and the timing record (never asserted on)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("name", ["sdpa_bool_mask", "sdpa_lower_right"])
def test_sdpa_equals_explicit_softmax(nb, name):
    rows = nb["SDPA_GRIDS"][name]
    assert len(rows) == 12 and all(r["passed"] for r in rows)


def test_sdpa_bool_mask_also_serves_the_band(nb):
    build = lambda: nb["build_window"](attend=nb["sdpa_bool_mask"])
    assert nb["check_cached"](build, nb["STREAM"], 2, 5, reference=lambda: nb["build_window"](ring=False))["passed"]


def test_is_causal_is_hidden_by_one_token_steps_and_caught_by_chunks(nb):
    one, two, five = nb["IS_CAUSAL_CONTROL"]
    assert one["passed"] and not two["passed"] and not five["passed"]


def test_plain_is_causal_true_is_wrong_even_for_one_query(nb):
    q, k, v = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    upper_left = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(upper_left, v[:, :, :1])                      # reads key 0 only


def test_timing_keeps_raw_samples(nb):
    timing = nb["FUSED_TIMING"]
    assert set(timing) == {f"{a}_{b}" for a in ("explicit", "sdpa") for b in ("prefill", "decode")}
    assert all(len(t["samples_ms"]) == nb["REPEATS"] and t["p50_ms"] > 0 for t in timing.values())
