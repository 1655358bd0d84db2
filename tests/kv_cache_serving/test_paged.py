"""Section 6: the paged store (block pool, block tables, copy-on-write), the batch store and the serving loop,
called with block sizes, chunkings, forks and schedules the notebook does not use."""

from __future__ import annotations

import math

import pytest
import torch


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_any_block_size_is_exact(nb, block_size):
    pool = nb["BlockPool"](nb["cfg"], 96, block_size, seed=block_size)
    paged, contiguous_cache = nb["PagedCache"](pool), nb["ContiguousCache"](nb["cfg"])
    out = nb["generate_seqs"](nb["model"], paged, nb["PROMPTS"])
    contiguous = nb["generate_seqs"](nb["model"], contiguous_cache, nb["PROMPTS"])
    assert nb["compare"](out["logits"], contiguous["logits"])["bit_exact"]
    assert nb["same_kv"](paged, contiguous_cache, range(len(nb["PROMPTS"])))
    assert [len(paged.tables[s]) for s in range(3)] == [math.ceil(paged.length(s) / block_size) for s in range(3)]


def test_block_boundary_sweep_covers_every_case(nb):
    """The sweep of the notebook: a chunk shorter than a block, one block long across a boundary and aligned with
    one, and longer than two blocks (issue 15)."""
    chunks, size = nb["BOUNDARY_CHUNKS"], nb["BLOCK_SIZE"]
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    assert min(chunks) < size and max(chunks) > 2 * size
    assert {start % size for n, start in zip(chunks, starts) if n == size} >= {0} and any(
        start % size != 0 for n, start in zip(chunks, starts) if n == size)


@pytest.mark.parametrize("chunks", [[1] * 10, [10], [4, 4, 2], [5, 5], [2, 7, 1]])
def test_other_chunkings_are_exact(nb, chunks):
    ids = torch.randint(0, nb["cfg"].vocab, (1, sum(chunks)), generator=torch.Generator().manual_seed(11))
    paged, contiguous = nb["PagedCache"](nb["BlockPool"](nb["cfg"], 8, 4)), nb["ContiguousCache"](nb["cfg"])
    assert torch.equal(nb["feed_in_chunks"](paged, ids, chunks), nb["feed_in_chunks"](contiguous, ids, chunks))
    assert nb["same_kv"](paged, contiguous, ["s"])


def test_block_tables_are_not_consecutive(nb):
    pool = nb["BlockPool"](nb["cfg"], 32, 4)
    paged = nb["PagedCache"](pool)
    nb["generate_seqs"](nb["model"], paged, nb["PROMPTS"], steps=2)
    assert any(t != list(range(t[0], t[0] + len(t))) for t in paged.tables.values())


def test_pool_exhaustion_is_an_error(nb):
    pool = nb["BlockPool"](nb["cfg"], 1, 4)
    pool.allocate()
    with pytest.raises(RuntimeError, match=r"free == \[\]"):
        pool.allocate()


def test_freeing_a_shared_block_keeps_it_for_the_other_holder(nb):
    pool = nb["BlockPool"](nb["cfg"], 4, 4)
    cache = nb["PagedCache"](pool)
    cache.add("a")
    cache.reserve("a", 4)
    cache.fork("a", "b")
    cache.free("a")
    assert pool.used() == 1 and pool.refs[cache.tables["b"][0]] == 1
    cache.free("b")
    assert pool.used() == 0 and pool.fill == [0] * 4


def test_copy_on_write_with_two_children_of_a_full_and_a_partial_block(nb):
    cache = nb["PagedCache"](nb["BlockPool"](nb["cfg"], 8, 4))
    cache.add("p")
    cache.reserve("p", 6)
    full, partial = cache.tables["p"]
    for child in ("c1", "c2"):
        cache.fork("p", child)
    cache.reserve("c1", 3)                       # copies the partial block, then runs into a new block
    cache.reserve("p", 1)                        # p still shares it with c2: copies too
    cache.reserve("c2", 1)                       # c2 is now the only holder: writes in place
    assert [t[0] for t in cache.tables.values()] == [full] * 3 and cache.pool.refs[full] == 3
    assert cache.tables["c2"][1] == partial and partial not in cache.tables["p"] + cache.tables["c1"]
    assert [cache.length(s) for s in ("p", "c1", "c2")] == [7, 9, 7] and cache.pool.used() == 5


def test_copy_on_write_copies_the_values(nb):
    pool = nb["BlockPool"](nb["cfg"], 4, 4)
    cache = nb["PagedCache"](pool)
    cache.add("a")
    addresses = cache.reserve("a", 2)
    k = torch.randn(nb["cfg"].heads, 2, nb["cfg"].head_dim)
    for layer in range(nb["cfg"].layers):
        cache.write(layer, "a", addresses, k, -k)
    cache.fork("a", "b")
    cache.reserve("b", 1)
    for layer in range(nb["cfg"].layers):
        got_k, got_v = cache.read(layer, "b")
        assert torch.equal(got_k[:, :2], k) and torch.equal(got_v[:, :2], -k)


def fake_requests(nb, arrivals, admitted):
    requests = [nb["Request"](rid, torch.zeros(4, dtype=torch.long), 2, arrival) for rid, arrival in enumerate(arrivals)]
    for request, iteration in zip(requests, admitted):
        request.admitted = iteration
    return requests


def trace_of(requests, running, reserved=0):
    return [{"iteration": i, "admitted": [r.rid for r in requests if r.admitted == i], "running": list(range(n)),
             "blocks_reserved": reserved} for i, n in enumerate(running)]


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
    assert schedule["kept"] == (case == "kept"), schedule


def test_serve_pauses_at_the_peak_before_finished_requests_leave(nb):
    requests = nb["make_requests"]([(5, 3, 0), (3, 1, 0), (6, 4, 1)], 21)
    paged = nb["PagedCache"](nb["BlockPool"](nb["cfg"], 12, 4))
    trace = nb["watch"](paged, nb["serve"](nb["model"], paged, requests, 12, 4, 2), requests, 4)
    for r in requests:
        assert r.rid in trace[r.finished]["running"]           # still holding its blocks at its last peak
        assert r.rid not in [rid for t in trace[r.finished + 1:] for rid in t["running"]]
    assert all(t["within_reservation"] and t["blocks_used"] <= t["blocks_reserved"] for t in trace)
    assert paged.pool.used() == 0 and [r.tokens == nb["alone"](r)["tokens"] for r in requests] == [True] * 3


def test_one_request_at_a_time_makes_one_token_per_step(nb):
    requests = nb["make_requests"](nb["STREAM_SPECS"][:5], nb["SEED"] + 6)
    paged = nb["PagedCache"](nb["BlockPool"](nb["cfg"], nb["STREAM_BLOCKS"], nb["STREAM_BLOCK_SIZE"]))
    trace = list(nb["serve"](nb["model"], paged, requests, nb["STREAM_BLOCKS"], nb["STREAM_BLOCK_SIZE"], 1))
    assert all(len(t["decoded"]) <= 1 and len(t["running"]) <= 1 for t in trace)
    assert all(r.tokens == nb["alone"](r)["tokens"] for r in requests)
    assert sum(len(t["decoded"]) for t in trace) + len(requests) == sum(r.max_new for r in requests)


def test_blocks_needed_counts_the_last_token_out(nb):
    request = nb["Request"](0, torch.zeros(8, dtype=torch.long), 9)
    assert nb["blocks_needed"](request, 8) == math.ceil(16 / 8) == 2
    assert nb["blocks_needed"](nb["Request"](1, torch.zeros(8, dtype=torch.long), 10), 8) == 3


def test_the_paged_store_section_stands_alone():
    """04_paged_store.py is meant to be included by other notebooks: it has no heading (it continues the section
    before it), names no section number, and needs only torch, random, SEED and a config with layers, heads, head_dim
    (the notebooks that include it import torch and random in their setup)."""
    from types import SimpleNamespace

    from notebook_code import exec_sections

    from .notebook import NOTEBOOK, assert_includable

    assert_includable("04_paged_store.py")
    import random

    namespace = exec_sections({"SEED": 3, "torch": torch, "random": random}, NOTEBOOK, "04_paged_store.py")
    config = SimpleNamespace(layers=1, heads=2, head_dim=3)
    cache = namespace["PagedCache"](namespace["BlockPool"](config, 4, 2))
    cache.add("x")
    addresses = cache.reserve("x", 3)
    values = torch.arange(2 * 3 * 3, dtype=torch.float32).view(2, 3, 3)          # [H, n, Dh]
    cache.write(0, "x", addresses, values, -values)
    keys, vals = cache.read(0, "x")
    assert torch.equal(keys, values) and torch.equal(vals, -values) and len(cache.tables["x"]) == 2


def test_the_requests_section_stands_alone():
    """04_paged_requests.py is included by the reuse notebook too: it needs nothing from the notebook but the
    imports of its setup (math, dataclass, field, torch)."""
    from notebook_code import exec_sections

    from .notebook import NOTEBOOK, assert_includable

    assert_includable("04_paged_requests.py")
    from dataclasses import dataclass, field

    namespace = exec_sections({"math": math, "dataclass": dataclass, "field": field, "torch": torch}, NOTEBOOK,
                              "04_paged_requests.py")
    request = namespace["Request"](7, torch.zeros(5, dtype=torch.long), 4, arrival=2)
    assert (request.tokens, request.logits, request.admitted, request.finished) == ([], [], -1, -1)
    assert namespace["blocks_needed"](request, 4) == 2                     # 5 + 4 - 1 = 8 positions


def test_add_starts_a_table_with_shared_blocks_and_free_releases_the_last_block_first(nb):
    pool = nb["BlockPool"](nb["cfg"], 6, 2, seed=4)
    cache = nb["PagedCache"](pool)
    cache.add("a")
    cache.reserve("a", 5)                                                  # 3 blocks, the last one half full
    shared = cache.tables["a"][:2]
    cache.add("b", shared)
    assert [pool.refs[b] for b in cache.tables["a"]] == [2, 2, 1] and cache.length("b") == 4
    released = []
    pool.reclaim = released.append                                         # record instead of freeing
    cache.free("a")
    assert released == [pool.allocations[2]]                              # the shared blocks are still held
    cache.free("b")
    assert released == [pool.allocations[2], shared[1], shared[0]]

