"""Each serving bug, injected into the notebook's own code, stops the notebook by its own checks.

The bugs edit the text of the notebook's own implementation code (as a careless edit would), never the
negative controls, which are wrong on purpose. Each must raise an AssertionError from the notebook's
assertions, or an error the notebook raises on purpose (`stops_with`: the static store refusing what does not
fit, the block pool with no free block). The harness is `tests/bug_injection.py`.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests
from serving_shared_bugs import REQUEST_BUGS, STORE_BUGS

from .notebook import NOTEBOOK

PAD, STATIC, MEMORY = "02_padding.py", "03_static_cache.py", "05_memory.py"
BATCH, SERVING = "04_paged_batch.py", "06_serve_loop.py"
FULL = "ValueError: length + new_len > T_max"          # the static store refusing what does not fit
EXHAUSTED = "RuntimeError: free == []"                   # the block pool with no free block
BUGS = {
    # Section 4: left padding.
    "positions off by one": bug(PAD, ("key_mask.long().cumsum(dim=-1) - 1", "key_mask.long().cumsum(dim=-1)")),
    "positions from arange": bug(
        PAD,
        ("    positions = key_mask.long().cumsum(dim=-1) - 1",
         "    positions = torch.arange(key_mask.shape[1]).expand_as(key_mask)")),
    "positions of the first columns": bug(PAD, ("return positions[:, -new_len:]", "return positions[:, :new_len]")),
    "padding mask dropped": bug(
        PAD,
        ("    return key_mask[:, None, None, :]",
         "    return torch.ones_like(key_mask)[:, None, None, :]")),
    "padding mask on the query axis": bug(
        PAD,
        ("    return key_mask[:, None, None, :]",
         "    return key_mask[:, None, -new_len:, None]")),
    "empty-row guard dropped": bug(PAD, ("    return guard_empty_rows(allowed)", "    return allowed")),
    "empty-row guard over the query axis": bug(
        PAD,
        ("allowed.any(dim=-1, keepdim=True)",
         "allowed.any(dim=-2, keepdim=True)")),
    "decode mask column prepended": bug(
        PAD,
        ("key_mask = torch.cat((key_mask, torch.ones(len(prompts), 1, dtype=torch.bool)), dim=1)",
         "key_mask = torch.cat((torch.ones(len(prompts), 1, dtype=torch.bool), key_mask), dim=1)")),
    # Section 5: the cat store, the shared attention arithmetic, the static store.
    "cat cache: reordered concatenation": bug(
        STATIC,
        ("torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)",
         "torch.cat((k, past_k), dim=-2), torch.cat((v, past_v), dim=-2)")),
    "cat cache: mask concatenation reordered": bug(
        STATIC,
        ("torch.cat((self.key_mask, new_mask), dim=1)",
         "torch.cat((new_mask, self.key_mask), dim=1)")),
    "keys scaled in place (cached tensor written)": bug(
        STATIC,
        ("scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)",
         "scores = q @ k.div_(math.sqrt(attn.head_dim)).transpose(-2, -1)")),
    "store_forward: positions counted from the new tokens only": bug(
        STATIC,
        ("model.wpe(padded_positions(key_mask, new_len))",
         "model.wpe(padded_positions(new_mask, new_len))")),
    "static: written at offset + 1": bug(
        STATIC,
        ("self.k[layer][:, :, self.start:self.length] = k",
         "self.k[layer][:, :, self.start + 1:self.length + 1] = k"),
        ("self.v[layer][:, :, self.start:self.length] = v",
         "self.v[layer][:, :, self.start + 1:self.length + 1] = v")),
    "static: length set, not advanced": bug(STATIC, ("        self.length += new_len\n", "        self.length = new_len\n")),
    "static: length advanced twice": bug(
        STATIC,
        ("        self.start = self.length\n", "        self.start = self.length = self.length + new_len\n"),
        stops_with=FULL),
    "static: attention over the whole buffer": bug(
        STATIC,
        ("        return self.key_mask[:, :self.length]\n",
         "        return self.key_mask\n"),
        ("return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]",
         "return self.k[layer], self.v[layer]")),
    "static: mask written at offset 0": bug(
        STATIC,
        ("self.key_mask[:, self.start:self.length] = new_mask",
         "self.key_mask[:, :new_len] = new_mask")),
    "static: reset keeps the length": bug(
        STATIC,
        ("    def reset(self):\n        self.start = self.length = 0\n",
         "    def reset(self):\n")),
    # The capacity, on both sides of T_max: the exact fit must fit, one token more must be refused by the store.
    "static: capacity check one slot short": bug(
        STATIC,
        ("        if self.length + new_len > self.max_len:\n",
         "        if self.length + new_len >= self.max_len:\n"),
        stops_with=FULL),
    "static: capacity check one slot long": bug(
        STATIC,
        ("        if self.length + new_len > self.max_len:\n",
         "        if self.length + new_len > self.max_len + 1:\n")),
    # Section 6: the block pool, the block tables, copy-on-write (the includable store: tests/serving_shared_bugs.py,
    # shared with the reuse notebook's table), the batch store.
    **STORE_BUGS,
    "paged: new K/V taken from the left of the row": bug(
        BATCH,
        ("k[row, :, -n:], v[row, :, -n:]",
         "k[row, :, :n], v[row, :, :n]")),
    "paged: cached keys placed at the left of the row": bug(
        BATCH,
        ("keys[row, :, self.total - seq_k.shape[1]:] = seq_k",
         "keys[row, :, :seq_k.shape[1]] = seq_k")),
    "paged: batch key mask off by one": bug(
        BATCH,
        ("columns[None, :] >= (self.total",
         "columns[None, :] > (self.total")),
    "paged batch: padding slots of the batch filled with NaN": bug(
        BATCH,
        ("values = torch.zeros_like(keys)", "values = torch.full_like(keys, float(\"nan\"))")),
    # Section 7: the memory accounting.
    "memory: paged slots one block too many": bug(
        MEMORY,
        ("slots = np.ceil(lengths / b).astype(int) * b",
         "slots = (lengths // b + 1) * b")),
    "memory: the last token counted as stored": bug(
        MEMORY,
        ("lengths = p + np.arange(o)",
         "lengths = p + np.arange(1, o + 1)")),
    "memory: waste as reserved over used": bug(MEMORY, ('"waste_pct": 100 * (1 - used / r)', '"waste_pct": 100 * (1 - r / used)')),
    # Sections 6 and 8: the serving loop and the scheduler of `serve`.
    "serving: first token read from the first prompt position": bug(
        SERVING, ("request.tokens.append(int(logits[0, -1].argmax()))", "request.tokens.append(int(logits[0, 0].argmax()))")),
    "serving: decode step feeds the first generated token again": bug(
        SERVING, ("ids = torch.tensor([[r.tokens[-1]] for r in requests])", "ids = torch.tensor([[r.tokens[0]] for r in requests])")),
    "scheduler: admits without free blocks": bug(
        SERVING,
        ("and reserved + blocks_needed(waiting[0], block_size) <= num_blocks",
         "and reserved < num_blocks")),
    "scheduler: reservation not counted on admission": bug(
        SERVING,
        ("            reserved += blocks_needed(request, block_size)\n",
         ""),
        stops_with=EXHAUSTED),
    "scheduler: admits before arrival": bug(
        SERVING,
        ("while (waiting and waiting[0].arrival <= iteration and",
         "while (waiting and")),
    "scheduler: retired request's blocks not freed": bug(
        SERVING,
        ("            cache.free(r.rid)\n",
         ""),
        stops_with=EXHAUSTED),
    **REQUEST_BUGS,
    # The scheduler's promises, which no logit can see: the cap, first come first served, no needless wait.
    "scheduler: one request over the cap": bug(
        SERVING,
        ("and len(running) < max_batch",
         "and len(running) <= max_batch")),
    "scheduler: shortest prompt first": bug(
        SERVING,
        ("waiting = sorted(requests, key=lambda r: (r.arrival, r.rid))",
         "waiting = sorted(requests, key=lambda r: (r.arrival, len(r.prompt)))")),
    "scheduler: admitted one iteration after arrival": bug(
        SERVING,
        ("waiting[0].arrival <= iteration",
         "waiting[0].arrival < iteration")),
    "scheduler: pool check one block short": bug(
        SERVING,
        ("reserved + blocks_needed(waiting[0], block_size) <= num_blocks",
         "reserved + blocks_needed(waiting[0], block_size) < num_blocks")),
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)
