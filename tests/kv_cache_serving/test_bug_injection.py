"""Each serving bug, injected into a copy of the sources, stops the notebook by its own checks.

The mutations edit the text of the notebook's own implementation code (as a careless edit would), never
the negative controls, which are wrong on purpose. The mutated notebook's code cells are composed by the
builder and exec'ed in this process through section 8 (the continuous-batching loop), in quick mode;
each mutation must raise an AssertionError from the notebook's assertions, or one of the errors the
notebook raises on purpose (`EXPECTED_ERRORS`). Every target text must occur exactly once in its
section file, so a mutation that no longer applies fails loudly instead of testing nothing.
"""

from __future__ import annotations

import pytest

from notebook_code import code_cells, manifest_sections, run_notebook_code

from .notebook import NOTEBOOK

# Manifest entries up to and including the continuous-batching section.
SECTIONS = manifest_sections(NOTEBOOK).index("06_continuous_batching.py") + 1
# Errors the notebook raises on purpose, by their message: a clear stop, like a failed assertion.
EXPECTED_ERRORS = {
    ValueError: "static cache full",
    RuntimeError: "block pool exhausted",
}

PAD, STATIC, PAGED, MEMORY = "02_padding.py", "03_static_cache.py", "04_paged_cache.py", "05_memory.py"
# name -> (section file, [(old text, new text), ...])
MUTATIONS = {
    # Section 4: left padding.
    "positions off by one": (PAD, [("key_mask.long().cumsum(dim=-1) - 1", "key_mask.long().cumsum(dim=-1)")]),
    "positions from arange": (PAD, [("    positions = key_mask.long().cumsum(dim=-1) - 1",
                                     "    positions = torch.arange(key_mask.shape[1]).expand_as(key_mask)")]),
    "positions of the first columns": (PAD, [("return positions[:, -new_len:]", "return positions[:, :new_len]")]),
    "padding mask dropped": (PAD, [("    return key_mask[:, None, None, :]", "    return torch.ones_like(key_mask)[:, None, None, :]")]),
    "padding mask on the query axis": (PAD, [("    return key_mask[:, None, None, :]", "    return key_mask[:, None, -new_len:, None]")]),
    "empty-row guard dropped": (PAD, [("    return guard_empty_rows(allowed)", "    return allowed")]),
    "empty-row guard over the query axis": (PAD, [("allowed.any(dim=-1, keepdim=True)", "allowed.any(dim=-2, keepdim=True)")]),
    "decode mask column prepended": (PAD, [(
        "key_mask = torch.cat((key_mask, torch.ones(len(prompts), 1, dtype=torch.bool)), dim=1)",
        "key_mask = torch.cat((torch.ones(len(prompts), 1, dtype=torch.bool), key_mask), dim=1)")]),
    # Section 5: the cat store, the shared attention arithmetic, the static store.
    "cat cache: reordered concatenation": (STATIC, [(
        "torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)",
        "torch.cat((k, past_k), dim=-2), torch.cat((v, past_v), dim=-2)")]),
    "cat cache: mask concatenation reordered": (STATIC, [(
        "torch.cat((self.key_mask[:, :self.length], new_mask), dim=1)",
        "torch.cat((new_mask, self.key_mask[:, :self.length]), dim=1)")]),
    "keys scaled in place (cached tensor written)": (STATIC, [(
        "scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)",
        "scores = q @ k.div_(math.sqrt(attn.head_dim)).transpose(-2, -1)")]),
    "static: written at offset + 1": (STATIC, [
        ("start, end = self.length, self.length + k.shape[-2]", "start, end = self.length + 1, self.length + 1 + k.shape[-2]"),
        ("return self.k[layer][:, :, :end], self.v[layer][:, :, :end]",
         "return self.k[layer][:, :, :end - 1], self.v[layer][:, :, :end - 1]")]),
    "static: length not advanced": (STATIC, [("        self.length += new_len\n\n    def reset(self):",
                                              "        pass\n\n    def reset(self):")]),
    "static: length advanced twice": (STATIC, [("        self.length += new_len\n\n    def reset(self):",
                                                "        self.length += 2 * new_len\n\n    def reset(self):")]),
    "static: attention over the whole buffer": (STATIC, [
        ("        return self.key_mask[:, :end]\n", "        return self.key_mask\n"),
        ("return self.k[layer][:, :, :end], self.v[layer][:, :, :end]", "return self.k[layer], self.v[layer]")]),
    "static: mask written at offset 0": (STATIC, [("self.key_mask[:, self.length:end] = new_mask",
                                                   "self.key_mask[:, :self.new_len] = new_mask")]),
    "static: reset keeps the length": (STATIC, [("    def reset(self):\n        self.length = 0\n", "    def reset(self):\n")]),
    # The capacity, on both sides of T_max: the exact fit must fit, one token more must be refused by the store.
    "static: capacity check one slot short": (STATIC, [("        if end > self.max_len:\n", "        if end >= self.max_len:\n")]),
    "static: capacity check one slot long": (STATIC, [("        if end > self.max_len:\n", "        if end > self.max_len + 1:\n")]),
    # Section 6: the block pool, the block tables, copy-on-write, the batch store.
    "paged: block offset off by one": (PAGED, [("addresses.append(block * pool.block_size + pool.fill[block])",
                                                "addresses.append(block * pool.block_size + pool.fill[block] + 1)")]),
    "paged: blocks gathered in reverse order": (PAGED, [("for b in self.tables[seq] for s in range(self.pool.fill[b])",
                                                         "for b in reversed(self.tables[seq]) for s in range(self.pool.fill[b])")]),
    "paged: freed block not returned": (PAGED, [("            self.clear(block)\n            self.free.append(block)\n",
                                                 "            self.clear(block)\n")]),
    "paged: freed block returned twice": (PAGED, [("            self.pool.release(block)\n",
                                                   "            self.pool.release(block)\n            self.pool.free.append(block)\n")]),
    "paged: block returned while still held": (PAGED, [("            self.clear(block)\n            self.free.append(block)\n",
                                                        "            self.clear(block)\n        self.free.append(block)\n")]),
    "paged: release ignores the reference count": (PAGED, [("        self.refs[block] -= 1\n", "        self.refs[block] = 0\n")]),
    "paged: fork does not count the new holder": (PAGED, [("            self.pool.refs[block] += 1\n", "            pass\n")]),
    "paged: forked block table reversed": (PAGED, [("self.tables[child] = list(self.tables[parent])\n        for block",
                                                    "self.tables[child] = list(reversed(self.tables[parent]))\n        for block")]),
    "paged: copy-on-write skipped": (PAGED, [("if pool.refs[table[-1]] > 1:", "if pool.refs[table[-1]] > 2:")]),
    "paged: copy-on-write keeps writing the old block": (PAGED, [("        pool.release(old)\n        table[-1] = new\n",
                                                                  "        pool.release(old)\n")]),
    "paged: copy-on-write copies K only": (PAGED, [("        for t in pool.k + pool.v:\n            t[new] = t[old]\n",
                                                    "        for t in pool.k:\n            t[new] = t[old]\n")]),
    "paged: copy-on-write forgets the fill count": (PAGED, [("        pool.fill[new] = pool.fill[old]\n", "")]),
    "paged: reused block's fill count kept": (PAGED, [("        self.fill[block] = 0\n", "")]),
    "paged: new K/V taken from the left of the row": (PAGED, [("k[row, :, -n:], v[row, :, -n:]", "k[row, :, :n], v[row, :, :n]")]),
    "paged: cached keys placed at the left of the row": (PAGED, [("keys[row, :, self.total - seq_k.shape[1]:] = seq_k",
                                                                  "keys[row, :, :seq_k.shape[1]] = seq_k")]),
    "paged: batch key mask off by one": (PAGED, [("columns[None, :] >= (self.total", "columns[None, :] > (self.total")]),
    "paged: a chunk of several positions written scrambled": (PAGED, [(
        "self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.transpose(0, 1)",
        "self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.reshape(k.shape[1], k.shape[0], k.shape[2])")]),
    # Section 7: the memory accounting.
    "memory: paged slots one block too many": (MEMORY, [("slots = np.ceil(lengths / b).astype(int) * b", "slots = (lengths // b + 1) * b")]),
    "memory: the last token counted as stored": (MEMORY, [("lengths = p + np.arange(o)", "lengths = p + np.arange(1, o + 1)")]),
    # Sections 6 and 8: the scheduler of `serve`.
    "scheduler: admits without free blocks": (PAGED, [("and reserved + blocks_needed(waiting[0], block_size) <= num_blocks",
                                                       "and reserved < num_blocks")]),
    "scheduler: reservation not counted on admission": (PAGED, [("            reserved += blocks_needed(request, block_size)\n", "")]),
    "scheduler: admits before arrival": (PAGED, [("while (waiting and waiting[0].arrival <= iteration and", "while (waiting and")]),
    "scheduler: retired request's blocks not freed": (PAGED, [("            cache.free(r.rid)\n", "")]),
    "scheduler: reservation one position short": (PAGED, [("len(request.prompt) + request.max_new - 1) / block_size",
                                                           "len(request.prompt) + request.max_new - 2) / block_size")]),
    # The scheduler's promises, which no logit can see: the cap, first come first served, no needless wait.
    "scheduler: one request over the cap": (PAGED, [("and len(running) < max_batch", "and len(running) <= max_batch")]),
    "scheduler: shortest prompt first": (PAGED, [("waiting = sorted(requests, key=lambda r: (r.arrival, r.rid))",
                                                  "waiting = sorted(requests, key=lambda r: (r.arrival, len(r.prompt)))")]),
    "scheduler: admitted one iteration after arrival": (PAGED, [("waiting[0].arrival <= iteration", "waiting[0].arrival < iteration")]),
    "scheduler: pool check one block short": (PAGED, [("reserved + blocks_needed(waiting[0], block_size) <= num_blocks",
                                                       "reserved + blocks_needed(waiting[0], block_size) < num_blocks")]),
}


def execute(mutation, out_dir) -> dict:
    """Exec the cells the builder would execute, through the continuous-batching section, with
    `mutation` ((section file, [(old, new), ...]) or None) applied; each cell is compiled under its file
    name, so a traceback names it."""
    edits = None if mutation is None else {mutation[0]: mutation[1]}
    try:
        return run_notebook_code(NOTEBOOK, sections=SECTIONS, edits=edits, QUICK=True, OUTPUT_DIR=str(out_dir))
    finally:
        import matplotlib.pyplot as plt
        plt.close("all")


@pytest.mark.parametrize("name", MUTATIONS)
def test_injected_bug_stops_the_notebook(name, tmp_path, capsys):
    with pytest.raises((AssertionError, *EXPECTED_ERRORS)) as caught:
        execute(MUTATIONS[name], tmp_path)
    # Raised by the notebook's code, not by torch or by this test.
    assert caught.traceback[-1].frame.code.raw.co_filename in {name for name, _ in code_cells(NOTEBOOK, SECTIONS)}
    if caught.type is not AssertionError:
        assert EXPECTED_ERRORS[caught.type] in str(caught.value)


def test_the_unmutated_sections_run(tmp_path, capsys):
    namespace = execute(None, tmp_path)
    assert namespace["CONTINUOUS"]["tokens_as_alone"]
