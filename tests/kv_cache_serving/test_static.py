"""Section 5: the static store, its capacity, reset and timing harness, on inputs the notebook does not use."""

from __future__ import annotations

import pytest
import torch


def test_writing_past_t_max_raises_before_anything_is_written(nb):
    store = nb["StaticStore"](nb["cfg"], 1, 4)
    ones = torch.ones(1, 3, dtype=torch.bool)
    nb["store_forward"](nb["model"], torch.tensor([[1, 2, 3]]), ones, store)
    keys = [k.clone() for k in store.k]
    with pytest.raises(ValueError, match=r"length \+ new_len > T_max: 3 \+ 2 > 4"):
        nb["store_forward"](nb["model"], torch.tensor([[4, 5]]), ones[:, :2], store)
    assert store.length == 3                                    # the failed call stored nothing
    assert all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) for a, b in zip(keys, store.k))
    # exactly one more position still fits
    nb["store_forward"](nb["model"], torch.tensor([[4]]), ones[:, :1], store)
    assert store.length == 4


@pytest.mark.parametrize("lengths, t_max", [((2, 9), 15), ((5,), 11), ((4, 4, 4), 40)])
def test_static_store_agrees_with_torch_cat_on_new_prompts(nb, lengths, t_max):
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, nb["cfg"].vocab, (n,), generator=gen) for n in lengths]
    steps = t_max - max(lengths)
    store = nb["StaticStore"](nb["cfg"], len(prompts), t_max)
    out = nb["generate_with_store"](nb["model"], prompts, store, steps=steps)
    ref = nb["generate_with_store"](nb["model"], prompts, nb["CatStore"](nb["cfg"], len(prompts)), steps=steps)
    assert nb["compare"](out["logits"], ref["logits"])["close"] and out["tokens"] == ref["tokens"]
    assert all(p == out["pointers"][0] for p in out["pointers"]) and store.length == t_max


def test_reset_gives_back_a_fresh_store(nb):
    store = nb["StaticStore"](nb["cfg"], 2, 6)
    nb["generate_with_store"](nb["model"], [torch.tensor([1, 2]), torch.tensor([3])], store, steps=2)
    store.reset()
    assert store.length == store.start == 0 and not store.key_mask.any()
    assert all(t.isnan().all() for t in store.k + store.v)


def test_off_by_one_store_is_caught_in_fp64_too(nb):
    result = nb["check_static"](nb["OffByOneStore"](nb["cfg"], len(nb["PROMPTS"]), nb["T_MAX"], torch.float64))
    assert not result["close"] and not result["finite"]


def test_timing_harness_measures_the_same_step_and_counts_bytes(nb):
    rows = nb["time_steps"]([24, 8])
    assert [r["prefix"] for r in rows] == [24, 8] and all(r["logits_agree"] for r in rows)
    row = rows[0]
    assert all(len(row[f"{name}_ms"]["samples"]) == nb["STEP_REPEATS"] for name in ("cat", "static", "copies"))
    assert all(row[f"{name}_ms"]["p50"] <= row[f"{name}_ms"]["p95"] for name in ("cat", "static", "copies"))
    per_position = nb["kv_bytes_per_token"](nb["cfg"].layers, nb["cfg"].heads, nb["cfg"].head_dim, 4)
    assert row["cat_bytes_written"] == 25 * per_position and row["static_bytes_written"] == per_position == 1024


def test_profile_sees_the_concatenations_of_the_cat_step_only(nb):
    ops = nb["profile_step"](16)
    assert ops["cat"]["aten::cat"] == 2 * nb["cfg"].layers + 1      # K and V per layer, and the mask
    assert "aten::cat" not in ops["static"]
