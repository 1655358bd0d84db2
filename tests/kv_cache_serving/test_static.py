"""Section 5: the preallocated cache equals torch.cat (within tolerance), never moves, never reads unused slots."""

from __future__ import annotations

import pytest
import torch


def test_store_forward_is_the_shared_decoder(nb):
    assert nb["STORE_FORWARD_BIT_EXACT"]


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_static_equals_cat_within_tolerance(nb, dtype):
    run = nb["STATIC"][dtype]
    assert run["close"] and run["max_abs_logit_err"] <= nb["TOLERANCE"][torch.float32] and run["tokens_identical"]
    assert run["pointers_fixed"] and run["finite"] and run["unused_slots_nan"]
    assert run["length"] == nb["T_MAX"] == 32                  # the buffer is filled to its last slot


def test_writing_past_t_max_raises_a_clear_error(nb):
    store = nb["StaticStore"](nb["cfg"], 1, 4)
    ones = torch.ones(1, 3, dtype=torch.bool)
    nb["store_forward"](nb["model"], torch.tensor([[1, 2, 3]]), ones, store)
    with pytest.raises(ValueError, match="T_max = 4"):
        nb["store_forward"](nb["model"], torch.tensor([[4, 5]]), ones[:, :2], store)
    assert store.length == 3                                    # the failed call stored nothing


@pytest.mark.parametrize("control", ["write_at_offset_plus_one", "reuse_without_reset"])
def test_each_control_is_caught(nb, control):
    assert nb["STATIC_CONTROLS"][control]["detected"]


def test_reset_makes_reuse_exact(nb):
    assert nb["REUSE_WITH_RESET"]["close"] and nb["REUSE_WITH_RESET"]["tokens_identical"]


def test_timing_keeps_raw_samples_and_never_asserts_speed(nb):
    rows = nb["STEP_TIMING"]
    assert [r["prefix"] for r in rows] == nb["STEP_PREFIXES"] and rows[-1]["prefix"] == 480
    for r in rows:
        assert len(r["cat_ms"]["samples"]) == len(r["static_ms"]["samples"]) == nb["STEP_REPEATS"]
        assert r["cat_bytes_written"] == 2 * 2 * 4 * (r["prefix"] + 1) * 16 * 4
