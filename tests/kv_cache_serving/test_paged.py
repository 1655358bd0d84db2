"""Section 6: the paged cache is indexing (bit-exact against a contiguous cache under the same calls), recycles
blocks, shares prefixes, keeps its scheduler's promises; three controls caught."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_paged_equals_contiguous_bit_for_bit(nb, dtype):
    run = nb["PAGED"][dtype]
    assert run["bit_exact_vs_contiguous"] and run["kv_bit_exact_vs_contiguous"] and run["tokens_identical"]
    assert run["close_vs_cat"]


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_any_block_size_is_exact(nb, block_size):
    pool = nb["BlockPool"](nb["cfg"], 96, block_size, seed=block_size)
    paged, contiguous_cache = nb["PagedCache"](pool), nb["ContiguousCache"](nb["cfg"])
    out = nb["generate_seqs"](nb["model"], paged, nb["PROMPTS"])
    contiguous = nb["generate_seqs"](nb["model"], contiguous_cache, nb["PROMPTS"])
    assert all(torch.equal(a, b) for a, b in zip(out["logits"], contiguous["logits"]))
    assert nb["same_kv"](paged, contiguous_cache, range(len(nb["PROMPTS"])))
    assert all(nb["close"](a, b) for a, b in zip(out["logits"], nb["cat_run"]["logits"]))


def test_block_boundaries(nb):
    boundary = nb["BOUNDARY"]
    assert boundary["bit_exact_vs_contiguous"] and boundary["kv_bit_exact_vs_contiguous"] and boundary["close_to_full"]
    assert boundary["fills"] == [4] * 6 and boundary["addresses_in_order"]


def test_block_tables_are_random(nb):
    tables = nb["PAGED"]["fp32"]["tables"]
    assert any(t != list(range(t[0], t[0] + len(t))) for t in tables)


def test_finished_sequences_return_blocks_and_new_ones_reuse_them(nb):
    reuse = nb["REUSE"]
    assert reuse["bit_exact_vs_contiguous"] and reuse["tokens_as_alone"] and reuse["close_to_alone"]
    assert reuse["reused_blocks"] > 0 and reuse["all_returned"]
    assert nb["schedule_kept"](reuse["schedule"]) and reuse["schedule"]["max_running"] == 3


def fake_requests(nb, arrivals, admitted):
    requests = [nb["Request"](rid, torch.zeros(4, dtype=torch.long), 2, arrival) for rid, arrival in enumerate(arrivals)]
    for request, iteration in zip(requests, admitted):
        request.admitted = iteration
    return requests


def trace_of(requests, running, reserved=0):
    return [{"iteration": i, "admitted": [r.rid for r in requests if r.admitted == i], "running": n, "blocks_reserved": reserved}
            for i, n in enumerate(running)]


@pytest.mark.parametrize("case", ["kept", "over the cap", "out of order", "before arrival", "needless wait"])
def test_check_schedule_sees_each_broken_promise(nb, case):
    """The checker itself, on hand-made traces: max_batch 2, a pool of 8 blocks, each request needing 2 of them."""
    arrivals, admitted, running = {
        "kept": ([0, 0, 0], [0, 0, 1], [2, 1]),
        "over the cap": ([0, 0, 0], [0, 0, 0], [3]),
        "out of order": ([0, 0, 0], [0, 1, 0], [2, 1]),
        "before arrival": ([0, 0, 2], [0, 0, 1], [2, 1]),
        "needless wait": ([0, 0, 0], [0, 1, 1], [1, 2]),
    }[case]
    requests = fake_requests(nb, arrivals, admitted)
    schedule = nb["check_schedule"](requests, trace_of(requests, running), 8, 4, 2)
    assert nb["schedule_kept"](schedule) == (case == "kept"), schedule


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
