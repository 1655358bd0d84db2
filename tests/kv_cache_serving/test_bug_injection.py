"""Each serving bug, injected into the notebook's own code, stops the notebook by its own checks.

The bugs edit the text of the notebook's own implementation code (as a careless edit would), never the
negative controls, which are wrong on purpose. Each must raise an AssertionError from the notebook's
assertions, or an error the notebook raises on purpose (`stops_with`). The harness is
`tests/bug_injection.py`.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests

from .notebook import NOTEBOOK

PAD, STATIC, PAGED, MEMORY = "02_padding.py", "03_static_cache.py", "04_paged_cache.py", "05_memory.py"
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
        ("torch.cat((self.key_mask[:, :self.length], new_mask), dim=1)",
         "torch.cat((new_mask, self.key_mask[:, :self.length]), dim=1)")),
    "keys scaled in place (cached tensor written)": bug(
        STATIC,
        ("scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)",
         "scores = q @ k.div_(math.sqrt(attn.head_dim)).transpose(-2, -1)")),
    "static: written at offset + 1": bug(
        STATIC,
        ("start, end = self.length, self.length + k.shape[-2]",
         "start, end = self.length + 1, self.length + 1 + k.shape[-2]"),
        ("return self.k[layer][:, :, :end], self.v[layer][:, :, :end]",
         "return self.k[layer][:, :, :end - 1], self.v[layer][:, :, :end - 1]")),
    "static: length not advanced": bug(
        STATIC,
        ("        self.length += new_len\n\n    def reset(self):",
         "        pass\n\n    def reset(self):")),
    "static: length advanced twice": bug(
        STATIC,
        ("        self.length += new_len\n\n    def reset(self):",
         "        self.length += 2 * new_len\n\n    def reset(self):"),
        stops_with="ValueError: static cache full"),
    "static: attention over the whole buffer": bug(
        STATIC,
        ("        return self.key_mask[:, :end]\n",
         "        return self.key_mask\n"),
        ("return self.k[layer][:, :, :end], self.v[layer][:, :, :end]",
         "return self.k[layer], self.v[layer]")),
    "static: mask written at offset 0": bug(
        STATIC,
        ("self.key_mask[:, self.length:end] = new_mask",
         "self.key_mask[:, :self.new_len] = new_mask")),
    "static: reset keeps the length": bug(
        STATIC,
        ("    def reset(self):\n        self.length = 0\n",
         "    def reset(self):\n")),
    # The capacity, on both sides of T_max: the exact fit must fit, one token more must be refused by the store.
    "static: capacity check one slot short": bug(
        STATIC,
        ("        if end > self.max_len:\n",
         "        if end >= self.max_len:\n"),
        stops_with="ValueError: static cache full"),
    "static: capacity check one slot long": bug(
        STATIC,
        ("        if end > self.max_len:\n",
         "        if end > self.max_len + 1:\n")),
    # Section 6: the block pool, the block tables, copy-on-write, the batch store.
    "paged: block offset off by one": bug(
        PAGED,
        ("addresses.append(block * pool.block_size + pool.fill[block])",
         "addresses.append(block * pool.block_size + pool.fill[block] + 1)")),
    "paged: blocks gathered in reverse order": bug(
        PAGED,
        ("for b in self.tables[seq] for s in range(self.pool.fill[b])",
         "for b in reversed(self.tables[seq]) for s in range(self.pool.fill[b])")),
    "paged: freed block not returned": bug(
        PAGED,
        ("            self.clear(block)\n            self.free.append(block)\n",
         "            self.clear(block)\n")),
    "paged: freed block returned twice": bug(
        PAGED,
        ("            self.pool.release(block)\n",
         "            self.pool.release(block)\n            self.pool.free.append(block)\n")),
    "paged: block returned while still held": bug(
        PAGED,
        ("            self.clear(block)\n            self.free.append(block)\n",
         "            self.clear(block)\n        self.free.append(block)\n")),
    "paged: release ignores the reference count": bug(
        PAGED,
        ("        self.refs[block] -= 1\n",
         "        self.refs[block] = 0\n")),
    "paged: fork does not count the new holder": bug(
        PAGED,
        ("            self.pool.refs[block] += 1\n",
         "            pass\n")),
    "paged: forked block table reversed": bug(
        PAGED,
        ("self.tables[child] = list(self.tables[parent])\n        for block",
         "self.tables[child] = list(reversed(self.tables[parent]))\n        for block")),
    "paged: copy-on-write skipped": bug(PAGED, ("if pool.refs[table[-1]] > 1:", "if pool.refs[table[-1]] > 2:")),
    "paged: copy-on-write keeps writing the old block": bug(
        PAGED,
        ("        pool.release(old)\n        table[-1] = new\n",
         "        pool.release(old)\n")),
    "paged: copy-on-write copies K only": bug(
        PAGED,
        ("        for t in pool.k + pool.v:\n            t[new] = t[old]\n",
         "        for t in pool.k:\n            t[new] = t[old]\n")),
    "paged: copy-on-write forgets the fill count": bug(PAGED, ("        pool.fill[new] = pool.fill[old]\n", "")),
    "paged: reused block's fill count kept": bug(PAGED, ("        self.fill[block] = 0\n", "")),
    "paged: new K/V taken from the left of the row": bug(
        PAGED,
        ("k[row, :, -n:], v[row, :, -n:]",
         "k[row, :, :n], v[row, :, :n]")),
    "paged: cached keys placed at the left of the row": bug(
        PAGED,
        ("keys[row, :, self.total - seq_k.shape[1]:] = seq_k",
         "keys[row, :, :seq_k.shape[1]] = seq_k")),
    "paged: batch key mask off by one": bug(
        PAGED,
        ("columns[None, :] >= (self.total",
         "columns[None, :] > (self.total")),
    "paged: a chunk of several positions written scrambled": bug(
        PAGED,
        ("self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.transpose(0, 1)",
         "self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.reshape(k.shape[1], k.shape[0], k.shape[2])")),
    # Section 7: the memory accounting.
    "memory: paged slots one block too many": bug(
        MEMORY,
        ("slots = np.ceil(lengths / b).astype(int) * b",
         "slots = (lengths // b + 1) * b")),
    "memory: the last token counted as stored": bug(
        MEMORY,
        ("lengths = p + np.arange(o)",
         "lengths = p + np.arange(1, o + 1)")),
    # Sections 6 and 8: the scheduler of `serve`.
    "scheduler: admits without free blocks": bug(
        PAGED,
        ("and reserved + blocks_needed(waiting[0], block_size) <= num_blocks",
         "and reserved < num_blocks")),
    "scheduler: reservation not counted on admission": bug(
        PAGED,
        ("            reserved += blocks_needed(request, block_size)\n",
         ""),
        stops_with="RuntimeError: block pool exhausted"),
    "scheduler: admits before arrival": bug(
        PAGED,
        ("while (waiting and waiting[0].arrival <= iteration and",
         "while (waiting and")),
    "scheduler: retired request's blocks not freed": bug(
        PAGED,
        ("            cache.free(r.rid)\n",
         ""),
        stops_with="RuntimeError: block pool exhausted"),
    "scheduler: reservation one position short": bug(
        PAGED,
        ("len(request.prompt) + request.max_new - 1) / block_size",
         "len(request.prompt) + request.max_new - 2) / block_size")),
    # The scheduler's promises, which no logit can see: the cap, first come first served, no needless wait.
    "scheduler: one request over the cap": bug(
        PAGED,
        ("and len(running) < max_batch",
         "and len(running) <= max_batch")),
    "scheduler: shortest prompt first": bug(
        PAGED,
        ("waiting = sorted(requests, key=lambda r: (r.arrival, r.rid))",
         "waiting = sorted(requests, key=lambda r: (r.arrival, len(r.prompt)))")),
    "scheduler: admitted one iteration after arrival": bug(
        PAGED,
        ("waiting[0].arrival <= iteration",
         "waiting[0].arrival < iteration")),
    "scheduler: pool check one block short": bug(
        PAGED,
        ("reserved + blocks_needed(waiting[0], block_size) <= num_blocks",
         "reserved + blocks_needed(waiting[0], block_size) < num_blocks")),
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)
