"""Sections 7 and 8: the memory accounting by hand, and the continuous-batching loop on a stream of its own."""

from __future__ import annotations

import numpy as np
import pytest


def test_memory_table_by_hand(nb):
    # one request: prompt 3, output 2 -> stored lengths 3 then 4; limit 8; blocks of 4
    table = nb["memory_table"](np.array([3]), np.array([2]), 8, (4,))
    used = 3 + 4
    assert table["contiguous_max"]["waste_pct"] == pytest.approx(100 * (1 - used / 16))
    assert table["contiguous_final"]["waste_pct"] == pytest.approx(100 * (1 - used / 8))
    assert table["paged_4"]["waste_pct"] == pytest.approx(100 * (1 - used / 8))


@pytest.mark.parametrize("p, o", [(1, 1), (5, 9), (16, 16), (100, 3)])
def test_the_last_token_is_never_stored(nb, p, o):
    """Step j stores p + j positions, j = 0 ... o - 1: the longest step stores p + o - 1, the final length, which is
    what `contiguous_final` reserves at every step, and paging reserves at most one block beyond it."""
    table = nb["memory_table"](np.array([p]), np.array([o]), 4096, (1, 8))
    assert table["contiguous_final"]["used_token_steps"] == sum(p + j for j in range(o))
    assert table["contiguous_final"]["reserved_token_steps"] == (p + o - 1) * o
    assert table["paged_1"]["waste_pct"] == pytest.approx(0.0)
    assert table["paged_8"]["reserved_token_steps"] - table["paged_8"]["used_token_steps"] < 8 * o


def test_workload_is_seeded_and_log_uniform(nb):
    rng = np.random.default_rng(nb["SEED"])
    assert np.array_equal(nb["log_uniform"](rng, 16, 1024, 1000), nb["WORK_PROMPTS"])
    draws = nb["log_uniform"](np.random.default_rng(1), 16, 1024, 20_000)
    assert draws.min() >= 16 and draws.max() <= 1024
    # log-uniform: as many draws in [16, 128) as in [128, 1024), three octaves each
    assert abs(np.mean(draws < 128) - 0.5) < 0.02


def test_a_small_stream_keeps_every_promise(nb):
    specs = [(6, 5, 0), (20, 3, 0), (4, 9, 1), (12, 2, 1), (9, 7, 4), (3, 3, 9)]
    requests = nb["make_requests"](specs, 77)
    paged = nb["PagedCache"](nb["BlockPool"](nb["cfg"], 10, 4))
    trace = nb["watch"](paged, nb["serve"](nb["model"], paged, requests, 10, 4, 3), requests, 4)
    schedule = nb["check_schedule"](requests, trace, 10, 4, 3)
    assert schedule["kept"] and schedule["head_waited_for"]["blocks"] > 0
    assert all(r.tokens == nb["alone"](r)["tokens"] for r in requests)
    assert all(t["within_reservation"] and t["blocks_used"] <= t["blocks_reserved"] <= 10 for t in trace)
    assert sum(len(t["decoded"]) for t in trace) + len(requests) == sum(r.max_new for r in requests)
    assert paged.pool.used() == 0
