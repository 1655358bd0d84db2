"""Each bug, injected into a copy of the notebook's own code, stops the notebook by its own checks.

The mutations edit the text of the implementation (as a careless edit would), never the negative controls,
which are wrong on purpose. The mutated code is composed by the builder and exec'ed in this process, in quick
mode, through the section that must catch the bug (the shared set-up, masks and decoder, the sections it
depends on, then it: `notebook.run_with`). Each must raise an AssertionError from the notebook's assertions,
or one of the errors the notebook raises on purpose (`EXPECTED_ERRORS`). Every target text must occur exactly
once in its file, so a mutation that no longer applies fails loudly instead of testing nothing.
"""

from __future__ import annotations

import pytest

from notebook_code import code_cells

from .notebook import NOTEBOOK, run_with

EXPECTED_ERRORS = {RuntimeError: ("prefix cache full", "too small")}
POOL, SERVE, CONTROLS, SPEC, SPLIT, COST, ROOF, HF, SAVE = (
    "02_prefix_cache.py", "03_prefix_serving.py", "04_prefix_controls.py", "05_speculative.py", "06_split_k.py", "07_decode_cost.py",
    "08_roofline.py", "09_assisted_generation.py", "10_saved_results.py")
# name -> (section file, [(old, new), ...], the section through which the notebook runs)
MUTATIONS = {
    # Section 4: the block pool and its content index.
    "hash chain without the parent": (POOL, [('hashlib.sha256(f"{parent}|{block}".encode())', 'hashlib.sha256(f"{block}".encode())')], POOL),
    "partly filled block hashed": (POOL, [("for start in range(0, len(tokens) - block_size + 1, block_size):",
                                           "for start in range(0, len(tokens), block_size):")], POOL),
    "evicted block kept in the index": (POOL, [("        del self.index[self.hash_of.pop(block)]\n", "        self.hash_of.pop(block)\n")], POOL),
    "held block left in the LRU queue": (POOL, [("        self.evictable.pop(block, None)\n", "        pass\n")], SERVE),
    "block released while still held": (POOL, [("        if self.refs[block] == 0:\n", "        if self.refs[block] <= 1:\n")], SERVE),
    "write copies the cache from position 0": (POOL, [("self.k[layer].flatten(0, 1)[slots] = k[0, :, start:end].transpose(0, 1)",
                                                       "self.k[layer].flatten(0, 1)[slots] = k[0, :, :end - start].transpose(0, 1)")], SERVE),
    # Section 5: serving with the prefix cache.
    "prefill starts one token late": (SERVE, [("model(torch.tensor([request.prompt[hit_tokens:]]), past)",
                                               "model(torch.tensor([request.prompt[hit_tokens + 1:]]), past)")], SERVE),
    "decode step writes one position early": (SERVE, [("stored = len(request.prompt) + len(request.tokens) - 1",
                                                       "stored = len(request.prompt) + len(request.tokens) - 2")], SERVE),
    "admission counts held hit blocks as available": (SERVE, [("if fresh > pool.available() - sum(block in pool.evictable for block in hits):",
                                                               "if fresh > pool.available():")], SERVE),
    "retired request keeps its first block": (SERVE, [("for block in reversed(request.table):", "for block in reversed(request.table[1:]):")], SERVE),
    # Section 6: speculative decoding.
    "bonus token from the previous position": (SPEC, [("return drafts[:n] + [choice[n]], scores[:n + 1]",
                                                       "return drafts[:n] + [choice[max(n - 1, 0)]], scores[:n + 1]")], SPEC),
    "rollback drops the last confirmed position": (SPEC, [("self.rollback(len(tokens) - 1)", "self.rollback(len(tokens) - 2)")], SPEC),
    "crop keeps the newest positions": (SPEC, [("[(k[:, :, :length], v[:, :, :length]) for k, v in cache]",
                                                "[(k[:, :, -length:], v[:, :, -length:]) for k, v in cache]")], SPEC),
    # Only slower, not wrong: the target still decides. The referee's count of target calls catches it.
    "one draft fewer than k per round": (SPEC, [("drafts = self.propose(tokens, min(self.k, ", "drafts = self.propose(tokens, min(self.k - 1, ")], HF),
    # Section 7: split-K.
    "merge without rescaling": (SPLIT, [("w = l * torch.exp(m - m.amax(dim=0))", "w = l")], SPLIT),
    "fully masked split shifted by -inf": (SPLIT, [("p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))",
                                                    "p = torch.exp(scores - m)")], SPLIT),
    "empty split divided by zero": (SPLIT, [("return (p @ v) / torch.where(l > 0, l, torch.ones_like(l)), m, l", "return (p @ v) / l, m, l")], SPLIT),
    "split scores not scaled": (SPLIT, [('(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))   # [..., 1, n]',
                                         '(q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))   # [..., 1, n]')], SPLIT),
    # Section 8: the decode step's counts and the published configurations.
    "attention counted once per key": (COST, [("attention_macs = 2 * s.layers * s.heads * s.head_dim * context",
                                               "attention_macs = s.layers * s.heads * s.head_dim * context")], COST),
    "GELU MLP counted with three matrices": (COST, [("return (3 if s.gated_mlp else 2) * s.width * hidden", "return 3 * s.width * hidden")], COST),
    "LayerNorm biases forgotten": (COST, [("per_layer = 2 * s.width * (2 if s.biases else 1) + s.latent", "per_layer = 2 * s.width + s.latent")], COST),
    "Llama 3.1 8B K/V heads mistyped": (COST, [("128256, 4096, 32, 32, 8, 128, 14336), 8.03e9)", "128256, 4096, 32, 32, 16, 128, 14336), 8.03e9)")], COST),
    # Section 9: the roofline.
    "time per token not divided by the batch": (ROOF, [('"ms_per_token": 1e3 * seconds[batch] / batch})', '"ms_per_token": 1e3 * seconds[batch]})')], ROOF),
    "weight bytes counted per token": (ROOF, [("FP32 * (weight.numel() + 2 * batch * 4096)", "FP32 * batch * (weight.numel() + 2 * 4096)")], ROOF),
    # Section 11: the assisted-generation referee.
    "draft proposes k + 1 tokens": (HF, [("gpt2_draft.generation_config.num_assistant_tokens = k", "gpt2_draft.generation_config.num_assistant_tokens = k + 1")], HF),
    "draft's confidence stop left on": (HF, [("assistant_confidence_threshold = 0.0", "assistant_confidence_threshold = 0.4")], HF),
    # Section 12: the saved results.
    "a control recorded as not caught": (SAVE, [('"caught": COUNT_CONTROL_CAUGHT}', '"caught": not COUNT_CONTROL_CAUGHT}')], SAVE),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_injected_bug_stops_the_notebook(name, tmp_path, capsys):
    file, edits, through = MUTATIONS[name]
    try:
        with pytest.raises((AssertionError, *EXPECTED_ERRORS)) as caught:
            run_with(through, tmp_path, edits={file: edits})
    finally:
        import matplotlib.pyplot as plt
        plt.close("all")
    # Raised by the notebook's code, not by torch or by this test.
    assert caught.traceback[-1].frame.code.raw.co_filename in {name for name, _ in code_cells(NOTEBOOK)}
    if caught.type is not AssertionError:
        assert any(text in str(caught.value) for text in EXPECTED_ERRORS[caught.type])


def test_every_section_of_the_notebook_has_a_mutation():
    assert {file for file, _, _ in MUTATIONS.values()} | {CONTROLS} == {POOL, SERVE, CONTROLS, SPEC, SPLIT, COST, ROOF, HF, SAVE}


@pytest.mark.parametrize("through", [SERVE, SPEC, SPLIT, COST, ROOF, HF])
def test_the_unmutated_sections_run(through, tmp_path, capsys):
    run_with(through, tmp_path)
