"""Sections 7 and 8: the memory accounting by hand, and continuous batching against alone runs."""

from __future__ import annotations

import math

import numpy as np
import pytest


def test_memory_table_by_hand(nb):
    # one request: prompt 3, output 2 -> stored lengths 3 then 4; limit 8; blocks of 4
    table = nb["memory_table"](np.array([3]), np.array([2]), 8, (4,))
    used = 3 + 4
    assert table["contiguous_max"]["waste_pct"] == pytest.approx(100 * (1 - used / 16))
    assert table["contiguous_final"]["waste_pct"] == pytest.approx(100 * (1 - used / 8))
    assert table["paged_4"]["waste_pct"] == pytest.approx(100 * (1 - used / 8))


def test_workload_is_seeded_and_documented(nb):
    assert len(nb["WORK_PROMPTS"]) == len(nb["WORK_OUTPUTS"]) == 1000
    rng = np.random.default_rng(nb["SEED"])
    assert np.array_equal(nb["log_uniform"](rng, 16, 1024, 1000), nb["WORK_PROMPTS"])


def test_paging_waste_grows_with_block_size(nb):
    waste = {name: m["waste_pct"] for name, m in nb["MEMORY"].items()}
    assert waste["paged_8"] < waste["paged_16"] < waste["paged_32"] < waste["contiguous_final"] < waste["contiguous_max"]


def test_continuous_batching_equals_alone(nb):
    summary = nb["CONTINUOUS"]
    assert summary["tokens_as_alone"] and summary["close_to_alone"] and summary["alone_equals_full_recomputation"]
    assert summary["used_within_reserved"] and summary["all_returned"]


def test_one_request_at_a_time_makes_one_token_per_step(nb):
    requests = nb["make_requests"](nb["STREAM_SPECS"][:5], nb["SEED"] + 6)
    pool = nb["BlockPool"](nb["cfg"], nb["STREAM_BLOCKS"], nb["STREAM_BLOCK_SIZE"])
    trace = nb["serve"](nb["model"], nb["PagedCache"](pool), requests, nb["STREAM_BLOCKS"], nb["STREAM_BLOCK_SIZE"], 1)
    assert all(t["decoded"] <= 1 for t in trace)
    assert all(r.tokens == nb["alone"](r)["tokens"] for r in requests)


def test_blocks_needed_counts_the_last_token_out(nb):
    request = nb["Request"](0, __import__("torch").zeros(8, dtype=__import__("torch").long), 9)
    assert nb["blocks_needed"](request, 8) == math.ceil(16 / 8) == 2
