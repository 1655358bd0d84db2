"""Section 6: sliding-window attention with a ring buffer, and the Hugging Face Mistral cross-check."""

from __future__ import annotations

import importlib.util

import pytest
import torch

W = 8


def test_band_mask_is_the_stated_inequality(nb):
    mask = nb["window_mask"](W)
    for past in range(0, 20, 3):
        for new in (1, 2, 5):
            q, k = past + torch.arange(new), torch.arange(past + new)
            expected = torch.tensor([[past + i - W < j <= past + i for j in range(past + new)] for i in range(new)])
            assert torch.equal(mask(q, k), expected)


def test_cached_with_eviction_equals_full_with_band(nb):
    assert len(nb["WINDOW_GRID"]) == 12 and all(r["passed"] and r["kv_shape_ok"] for r in nb["WINDOW_GRID"])
    assert all(r["max_abs_kv_err"] < (1e-5 if r["dtype"] == "fp32" else 1e-10) for r in nb["WINDOW_GRID"])


def test_chunks_as_long_as_the_ring_and_longer(nb):
    runs = nb["RING_CHUNK_RUNS"]
    assert [(r["chunk"], r["dtype"]) for r in runs] == [(c, d) for c in (7, 10, [16] + [1] * 8) for d in ("fp32", "fp64")]
    assert all(r["passed"] and r["kv_shape_ok"] and r["batch"] == 2 for r in runs)


def test_window_at_least_stream_equals_unwindowed(nb):
    assert all(r["passed"] for r in nb["WINDOW_EQUALS_UNWINDOWED"])


def test_ring_never_holds_more_than_w_minus_1(nb):
    assert nb["RING_MAX_STORED"] == W - 1
    assert all(max(stored) <= W - 1 for _, stored in nb["ring_sizes"])


def test_ring_slots_wrap_out_of_position_order(nb):
    ring = nb["RingKV"](W - 1)
    k = torch.zeros(1, 1, 10, 4)
    ring.update(k, k, torch.arange(10))
    assert ring.positions.tolist() == [7, 8, 9, 3, 4, 5, 6]       # slot p % 7
    _, _, key_pos = ring.update(k[:, :, :1], k[:, :, :1], torch.tensor([10]))
    assert key_pos.tolist() == [3, 4, 5, 6, 7, 8, 9, 10]         # read oldest first


def test_a_chunk_longer_than_the_ring_is_exact(nb):
    build = lambda: nb["build_window"]()
    reference = lambda: nb["build_window"](ring=False)
    assert nb["check_cached"](build, nb["STREAM"], 2, [11, 13], torch.float64, reference=reference)["passed"]


def test_off_by_one_window_is_caught(nb):
    assert not any(r["passed"] for r in nb["OFF_BY_ONE"])


def test_a_too_narrow_window_passes_cached_vs_full_but_not_the_key_count(nb):
    """The prose says: a band of W - 1 keys passes cached = full; the key count and Mistral catch it."""
    narrow = nb["window_mask"](W - 1)
    build = lambda: nb["build_window"](mask=narrow)
    reference = lambda: nb["build_window"](ring=False, mask=narrow)
    assert nb["check_cached"](build, nb["STREAM"], 1, 5, reference=reference)["passed"]
    counts = narrow(torch.arange(24), torch.arange(24)).sum(-1).tolist()
    assert counts != [min(W, p + 1) for p in range(24)]


def test_crop_is_caught_and_the_receptive_field_is_two_windows(nb):
    crop = nb["CROP"]
    assert crop["crop_W_restart"] > 1e-2 and crop["crop_W_true_positions"] > 1e-2
    assert crop["restart_vs_true_positions"] < 1e-10
    assert crop["crop_receptive_field"] < 1e-10 < 1e-6 < crop["crop_receptive_field_minus_1"]


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_mistral_cross_check(nb):
    cross = nb["MISTRAL_CROSS"]
    assert max(cross["hf_precision"].values()) < 1e-10
    assert cross["off_by_one_control"]["full"] > 1e-2
