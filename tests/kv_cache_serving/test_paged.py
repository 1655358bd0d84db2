"""Section 6: the paged cache is indexing (bit-exact), recycles blocks, shares prefixes; three controls caught."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_paged_equals_contiguous_bit_for_bit(nb, dtype):
    run = nb["PAGED"][dtype]
    assert run["bit_exact_vs_cat"] and run["bit_exact_vs_contiguous"] and run["tokens_identical"]


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_any_block_size_is_exact(nb, block_size):
    pool = nb["BlockPool"](nb["cfg"], 96, block_size, seed=block_size)
    out = nb["generate_seqs"](nb["model"], nb["PagedCache"](pool), nb["PROMPTS"])
    assert all(torch.equal(a, b) for a, b in zip(out["logits"], nb["cat_run"]["logits"]))


def test_block_tables_are_random(nb):
    tables = nb["PAGED"]["fp32"]["tables"]
    assert any(t != list(range(t[0], t[0] + len(t))) for t in tables)


def test_finished_sequences_return_blocks_and_new_ones_reuse_them(nb):
    reuse = nb["REUSE"]
    assert reuse["bit_exact_vs_contiguous"] and reuse["tokens_as_alone"] and reuse["close_to_alone"]
    assert reuse["reused_blocks"] > 0 and reuse["all_returned"]


def test_prefix_sharing_and_copy_on_write(nb):
    shared = nb["SHARED"]
    assert shared["bit_exact_vs_contiguous"] and shared["close_to_full"] and shared["tokens_as_full"]
    assert shared["shared_blocks"] == shared["full_prompt_blocks"] and shared["partial_block_copied"]


def test_pool_exhaustion_is_an_error(nb):
    pool = nb["BlockPool"](nb["cfg"], 1, 4)
    pool.allocate()
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.allocate()


@pytest.mark.parametrize("control", ["off_by_one_block_offset", "reused_block_not_cleared", "shared_block_written_in_place"])
def test_each_control_is_caught(nb, control):
    assert nb["PAGED_CONTROLS"][control]["detected"]


def test_freeing_a_shared_block_keeps_it_for_the_other_holder(nb):
    pool = nb["BlockPool"](nb["cfg"], 4, 4)
    cache = nb["PagedCache"](pool)
    cache.add("a")
    cache.reserve("a", 4)
    cache.fork("a", "b")
    cache.free("a")
    assert pool.used() == 1 and pool.refs[cache.tables["b"][0]] == 1
    cache.free("b")
    assert pool.used() == 0
