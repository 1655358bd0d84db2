"""Each bug, injected into the notebook's own code, stops the notebook by its own checks.

The bugs edit the text of the notebook's implementation (as a careless edit would), never the negative
controls, which are wrong on purpose. Each must raise an AssertionError from the notebook's assertions, or an
error the notebook raises on purpose (`stops_with`). The harness is `tests/bug_injection.py`: every bug runs
without transformers (the notebook must catch it alone); `only_referee=True` marks a bug that only section 11,
the Hugging Face referee, can see.
"""

from __future__ import annotations

from dataclasses import replace

from bug_injection import bug, bug_tests
from serving_shared_bugs import REQUEST_BUGS, REUSE_NEVER_RUNS, STORE_BUGS

from .notebook import NOTEBOOK

# The record cell (10_saved_results.py) may not assert: tests/kv_cache_reuse/test_results_json.py checks what it writes.
HASH, POOL, SERVE, SPEC, SPLIT, COST, ROOF, ROOF_CRITERIA, HF = (
    "02_prefix_cache.py", "02_prefix_pool.py", "03_prefix_serving_loop.py", "05_speculative.py", "06_split_k.py",
    "07_decode_cost.py", "08_roofline.py", "08_roofline_criteria.py", "09_assisted_generation.py")
# Included from the serving notebook: its paged store and its requests (their bugs: tests/serving_shared_bugs.py).
STORE, REQUESTS = "04_paged_store.py", "04_paged_requests.py"
POOL_FULL, EXHAUSTED = "PoolFull", "RuntimeError: free == []"
# Where a store bug stops this notebook before any assertion can: the pool refuses a block (this notebook's
# PoolFull, or the store's own error), or, for the shifted slot, PyTorch's bounds check: the last slot of the
# pool's last block, shifted by one, lies past the end of the pool (the NaN it would leave is never reached).
STORE_STOPS_WITH = {
    "paged: block offset off by one": "IndexError",
    "paged: freed block not returned": EXHAUSTED,
    "paged: freed block returned twice": POOL_FULL,
    "paged: a new holder not counted": POOL_FULL,
    "paged: reused block's fill count kept": POOL_FULL,
}

BUGS = {
    # Section 4: the hash chain, the pool's content index, and the serving notebook's store under it.
    "hash chain without the parent": bug(HASH, ('hashlib.sha256(f"{parent}|{block}".encode())', 'hashlib.sha256(f"{block}".encode())')),
    "partly filled block hashed": bug(HASH, ("for start in range(0, len(tokens) - block_size + 1, block_size):",
                                             "for start in range(0, len(tokens), block_size):")),
    "evicted block kept in the index": bug(POOL, ("        del self.index[self.hash_of.pop(block)]\n", "        self.hash_of.pop(block)\n")),
    "held block left in the LRU queue": bug(POOL, ("        self.evictable.pop(block, None)\n", "        pass\n")),
    "cached block freed, still in the index": bug(POOL, ("        if block in self.hash_of:\n            self.evictable[block] = None\n"
                                                         "        else:\n            super().reclaim(block)\n",
                                                         "        super().reclaim(block)\n")),
    **{name: replace(found, stops_with=STORE_STOPS_WITH.get(name, found.stops_with))
       for name, found in STORE_BUGS.items() if name not in REUSE_NEVER_RUNS},
    # Section 5: serving with the prefix cache.
    "prefill starts one token late": bug(SERVE, ("run_tokens(model, cache, request, request.prompt[hit_tokens:])",
                                                 "run_tokens(model, cache, request, request.prompt[hit_tokens + 1:])")),
    "new K/V taken from position 0": bug(SERVE, ("cache.write(layer, request.rid, addresses, k[0, :, held:], v[0, :, held:])",
                                                 "cache.write(layer, request.rid, addresses, k[0, :, :len(ids)], v[0, :, :len(ids)])")),
    "decode step feeds the first generated token again": bug(SERVE, ("run_tokens(model, cache, request, torch.tensor(request.tokens[-1:]))",
                                                                     "run_tokens(model, cache, request, torch.tensor(request.tokens[:1]))")),
    "admission counts held hit blocks as available": bug(
        SERVE, ("pool.available() - sum(block in pool.evictable for block in hits) - promised(cache, running)",
                "pool.available() - promised(cache, running)"),
        stops_with=POOL_FULL),
    "admission forgets what running requests may still take": bug(
        SERVE, ("pool.available() - sum(block in pool.evictable for block in hits) - promised(cache, running)",
                "pool.available() - sum(block in pool.evictable for block in hits)"),
        stops_with=POOL_FULL),
    "retired request's blocks not freed": bug(SERVE, ("            cache.free(request.rid)\n", ""), stops_with=POOL_FULL),
    **REQUEST_BUGS,
    # Section 6: speculative decoding.
    "bonus token from the previous position": bug(SPEC, ("return drafts[:n] + [choice[n]], scores[:n + 1]",
                                                         "return drafts[:n] + [choice[max(n - 1, 0)]], scores[:n + 1]")),
    "rollback drops the last confirmed position": bug(SPEC, ("self.rollback(len(tokens) - 1)", "self.rollback(len(tokens) - 2)")),
    "crop keeps the newest positions": bug(SPEC, ("[(k[:, :, :length], v[:, :, :length]) for k, v in cache]",
                                                  "[(k[:, :, -length:], v[:, :, -length:]) for k, v in cache]")),
    # Only slower, not wrong: the draft reads its last confirmed token again next round, and the tokens stay
    # the target's. Only the worked trace's cache lengths show it.
    "draft's cache cropped one position too far": bug(SPEC, ("min(length, cached_length(self.draft_cache)))",
                                                             "min(length, cached_length(self.draft_cache)) - 1)")),
    # Only slower, not wrong: the target still decides. Section 12's perfect draft counts the target calls,
    # and so does the referee of section 11.
    "one draft fewer than k per round": bug(SPEC, ("drafts = self.propose(tokens, min(self.k, ", "drafts = self.propose(tokens, min(self.k - 1, "),
                                            hf=True),
    # Section 7: split-K.
    "merge without rescaling": bug(SPLIT, ("w = l * torch.exp(m - m.amax(dim=0))", "w = l")),
    "fully masked split shifted by -inf": bug(SPLIT, ("p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))",
                                                      "p = torch.exp(scores - m)")),
    "empty split divided by zero": bug(SPLIT, ("return (p @ v) / torch.where(l > 0, l, torch.ones_like(l)), m, l", "return (p @ v) / l, m, l")),
    "split scores not scaled": bug(SPLIT, ('(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))   # [..., 1, n]',
                                           '(q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))   # [..., 1, n]')),
    # Section 8: the decode step's counts and the published configurations.
    "attention counted once per key": bug(COST, ("attention_macs = 2 * s.layers * s.heads * s.head_dim * context",
                                                 "attention_macs = s.layers * s.heads * s.head_dim * context")),
    "GELU MLP counted with three matrices": bug(COST, ("return (3 if s.gated_mlp else 2) * s.width * hidden", "return 3 * s.width * hidden")),
    "LayerNorm biases forgotten": bug(COST, ("per_layer = 2 * s.width * (2 if s.biases else 1) + s.latent", "per_layer = 2 * s.width + s.latent")),
    "Llama 3.1 8B K/V heads mistyped": bug(COST, ("128256, 4096, 32, 32, 8, 128, 14336), 8.03e9)", "128256, 4096, 32, 32, 16, 128, 14336), 8.03e9)")),
    # Section 9: the roofline.
    "time per token not divided by the batch": bug(ROOF, ('"ms_per_token": 1e3 * median(seconds) / batch,', '"ms_per_token": 1e3 * median(seconds),')),
    "weight bytes counted per token": bug(ROOF, ("FP32 * (WIDTH * WIDTH + 2 * batch * WIDTH)", "FP32 * batch * (WIDTH * WIDTH + 2 * WIDTH)")),
    "weight bytes counted in elements": bug(ROOF, ("FP32 * (WIDTH * WIDTH + 2 * batch * WIDTH)", "(WIDTH * WIDTH + 2 * batch * WIDTH)")),
    "STREAM rate without the array length": bug(ROOF, ("STREAM_ELEMENTS * STREAM_BYTES[name] / median(SECONDS[name])",
                                                       "STREAM_BYTES[name] / median(SECONDS[name])")),
    "ridge point inverted": bug(ROOF, ("RIDGE = PEAK / BANDWIDTH", "RIDGE = BANDWIDTH / PEAK")),
    "memory-bound test mixes GB/s and bytes/s": bug(ROOF_CRITERIA, ('return row["gbs"] * 1e9 >= BANDWIDTH / 3', 'return row["gbs"] >= BANDWIDTH / 3')),
    # Section 11: the assisted-generation referee (it runs only with transformers).
    "draft proposes k + 1 tokens": bug(HF, ("gpt2_draft.generation_config.num_assistant_tokens = k",
                                            "gpt2_draft.generation_config.num_assistant_tokens = k + 1"), only_referee=True),
    "draft's confidence stop left on": bug(HF, ("assistant_confidence_threshold = 0.0", "assistant_confidence_threshold = 0.4"), only_referee=True),
}


runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)


def test_every_implementation_section_has_a_bug():
    assert {found.file for found in BUGS.values()} == {HASH, POOL, STORE, SERVE, REQUESTS, SPEC, SPLIT, COST, ROOF, ROOF_CRITERIA, HF}


def test_the_store_bugs_left_out_are_store_bugs():
    """The store bugs this notebook leaves out (code it never runs: fork, copy-on-write) are named as in the table."""
    assert REUSE_NEVER_RUNS < set(STORE_BUGS) and set(STORE_STOPS_WITH) <= set(STORE_BUGS) - REUSE_NEVER_RUNS

