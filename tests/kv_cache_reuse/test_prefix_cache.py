"""Sections 4 and 5: the block pool with its content index, and serving with a prefix cache.

Property tests of the pool's helpers (the hash chain, lookup, reference counts, LRU eviction, write/gather),
the serving loop's bookkeeping after a run, and the notebook's own criterion and controls as recorded."""

from __future__ import annotations

import hashlib
import random

import pytest
import torch


def test_block_hashes_are_a_chain_over_full_blocks(nb):
    hashes = nb["chained_block_hashes"]
    tokens = list(range(10))
    assert len(hashes(tokens, 4)) == 2 and len(hashes(tokens[:3], 4)) == 0 and len(hashes(tokens[:8], 4)) == 2
    first = hashlib.sha256(f"|{[0, 1, 2, 3]}".encode()).hexdigest()
    assert hashes(tokens, 4)[0] == first
    assert hashes(tokens, 4)[1] == hashlib.sha256(f"{first}|{[4, 5, 6, 7]}".encode()).hexdigest()
    # A block's hash depends on every token before it, and on nothing after it.
    for position in range(8):
        changed = list(tokens)
        changed[position] += 100
        differs = [a != b for a, b in zip(hashes(tokens, 4), hashes(changed, 4))]
        assert differs == [position < 4, True]
    assert hashes(tokens + [99], 4) == hashes(tokens, 4)


def test_lookup_finds_the_longest_cached_run_of_full_blocks_and_keeps_the_last_token(nb):
    pool = nb["PrefixCache"](nb["cfg"], num_blocks=8, block_size=4)
    prompt = list(range(12))
    for block_hash in pool.block_hashes(prompt):
        pool.publish(pool.allocate(), block_hash)
    assert pool.lookup(prompt) == ([0, 1], 8)                         # 12 tokens: the last one is computed
    assert pool.lookup(prompt + [50]) == ([0, 1, 2], 12)
    assert pool.lookup([99] + prompt[1:] + [50]) == ([], 0)           # a miss in the first block stops the walk
    assert pool.lookup(prompt[:4] + [77] + prompt[5:] + [50]) == ([0], 4)


def test_reference_counts_and_lru_eviction(nb):
    pool = nb["PrefixCache"](nb["cfg"], num_blocks=4, block_size=2)
    a = [pool.allocate() for _ in range(2)]
    for block, block_hash in zip(a, pool.block_hashes([1, 2, 3, 4])):
        pool.publish(block, block_hash)
    for block in reversed(a):
        pool.release(block)
    assert list(pool.evictable) == [a[1], a[0]] and pool.available() == 4
    pool.acquire(a[0])                                                 # held again: no longer evictable
    assert list(pool.evictable) == [a[1]] and pool.refs[a[0]] == 1
    fresh = [pool.allocate() for _ in range(3)]                        # 2 free, then evict a[1]
    assert pool.evictions == 1 and a[1] in fresh and a[0] not in fresh
    assert pool.lookup([1, 2, 3, 4, 5]) == ([a[0]], 2)
    assert all(torch.isnan(t[a[1]]).all() for t in pool.k + pool.v)  # cleared when evicted
    with pytest.raises(nb["PoolFull"]) as raised:
        pool.allocate()
    assert raised.value.args == ({"blocks": 4, "held": 4},)


def test_write_then_gather_is_pure_data_movement(nb):
    cfg = nb["cfg"]
    pool = nb["PrefixCache"](cfg, num_blocks=8, block_size=4)
    table = [5, 2, 7]
    cache = [(torch.randn(1, cfg.heads, 11, cfg.head_dim), torch.randn(1, cfg.heads, 11, cfg.head_dim)) for _ in range(cfg.layers)]
    pool.write(table, 0, cache)
    gathered = pool.gather(table, 11)
    assert all(torch.equal(k, gk) and torch.equal(v, gv) for (k, v), (gk, gv) in zip(cache, gathered))
    assert torch.isnan(pool.k[0][0]).all()                             # untouched blocks keep their NaN


def test_after_a_stream_every_block_is_free_or_evictable_and_the_index_is_consistent(nb):
    pool = nb["PrefixCache"](nb["cfg"], num_blocks=24)
    requests = [nb["Request"](rid, p, m, a) for rid, (p, m, a) in enumerate(nb["STREAM"][:12])]
    nb["serve"](nb["model"], pool, requests)
    assert not any(pool.refs)
    assert sorted(pool.free + list(pool.evictable)) == list(range(24))
    assert set(pool.evictable) == set(pool.hash_of) == set(pool.index.values())
    assert all(pool.index[h] == b for b, h in pool.hash_of.items())


def test_serve_refuses_a_pool_too_small_for_a_request(nb):
    request = nb["Request"](0, list(range(30)), 10, 0)
    with pytest.raises(nb["PoolFull"]) as raised:
        nb["serve"](nb["model"], nb["PrefixCache"](nb["cfg"], num_blocks=5), [request])
    assert raised.value.args == ({"blocks": 5, "request": 0, "needs": 10},)


def test_the_criterion_held_on_every_pool_size(nb):
    sweep = nb["SWEEP"]
    assert [r["blocks"] for r in sweep] == list(nb["POOL_SIZES"])
    assert all(r["close"] and r["misses_bit_identical"] and r["whole_blocks"] and r["finite"] for r in sweep)
    assert sweep[0]["evictions"] > 0 and sweep[0]["hit_rate"] < sweep[-1]["hit_rate"]
    assert all(r["prefill_tokens_saved"] == round(r["hit_rate"] * r["prompt_tokens"]) for r in sweep)


def test_every_prefix_control_is_caught_where_the_text_says(nb):
    controls = nb["PREFIX_CONTROLS"]
    assert set(controls) == {"hash_without_prefix", "partial_block_shared", "held_block_evicted"}
    assert [controls[name]["wrong_requests"] for name in ("hash_without_prefix", "partial_block_shared", "held_block_evicted")] == [[2], [3], [1]]
    assert all(c["caught"] for c in controls.values())
    assert controls["held_block_evicted"]["finite"] is False
    assert controls["hash_without_prefix"]["finite"] and controls["partial_block_shared"]["finite"]


def test_the_stream_is_seeded(nb):
    assert nb["make_stream"](8, 5) == nb["make_stream"](8, 5) != nb["make_stream"](8, 6)
    prompts = [p for p, _, _ in nb["make_stream"](40, 1)]
    assert {len(p) for p in prompts} <= set(range(22, 53))
