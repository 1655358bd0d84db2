"""Each classic cache bug, injected into the kv-cache notebook's own code, stops it by its own assertions.

The bugs edit the section files' text (as a careless edit would), never the negative controls: this checks
the notebook's own assertions, not the tests'. The harness is `tests/bug_injection.py`.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests, stopped

NOTEBOOK = "infra-benchmark/kv-cache"
BUGS = {
    # The model (shared sections).
    "wrong position": bug(
        "05_decoder.py",
        ("    return past_len + torch.arange(new_len)",
         "    return torch.arange(new_len)")),
    "position off by one once cached": bug(
        "05_decoder.py",
        ("    return past_len + torch.arange(new_len)",
         "    return past_len + (past_len > 0) + torch.arange(new_len)")),
    "K and V swapped in the cache": bug("05_decoder.py", ("return self.proj(context), (k, v)", "return self.proj(context), (v, k)")),
    "every layer reads layer 0's cache": bug(
        "05_decoder.py", ("None if cache is None else cache[layer])", "None if cache is None else cache[0])")),
    "missing offset": bug(
        "03_masks.py",
        ("    query_pos = past_len + torch.arange(new_len)",
         "    query_pos = torch.arange(new_len)")),
    "mask sees one position ahead": bug(
        "03_masks.py", ("    return key_pos[None, :] <= query_pos[:, None]\n\n\n# [en] WRONG",
                        "    return key_pos[None, :] <= query_pos[:, None] + 1\n\n\n# [en] WRONG")),
    "reordered concatenation": bug(
        "05_decoder.py",
        ("k = torch.cat((past_k, k), dim=-2)",
         "k = torch.cat((k, past_k), dim=-2)")),
    "in-place write": bug(
        "05_decoder.py",
        ("            past_k, past_v = past\n",
         "            past_k, past_v = past\n            past_v.mul_(1.001)\n")),
    "softmax axis": bug("05_decoder.py", ('.softmax(dim=-1)\n        context', '.softmax(dim=-2)\n        context')),
    "scaling": bug("05_decoder.py", ("/ math.sqrt(self.head_dim)", "/ self.head_dim")),
    "GELU variant": bug("05_decoder.py", ('nn.GELU(approximate="none")', 'nn.GELU(approximate="tanh")')),
    "GELU variant in forward": bug(
        "05_decoder.py",
        ("return self.proj(self.act(self.fc(x)))",
         "return self.proj(F.gelu(self.fc(x), approximate='tanh'))")),
    "post-norm block": bug(
        "05_decoder.py", ("        x = x + self.mlp(self.ln_2(x))\n        return x, kv",
                          "        x = self.ln_2(x + self.mlp(x))\n        return x, kv")),
    "tied output projection": bug(
        "05_decoder.py", ("        self.lm_head = nn.Linear(config.width, config.vocab, bias=False)\n",
                          "        self.lm_head = nn.Linear(config.width, config.vocab, bias=False)\n"
                          "        self.lm_head.weight = self.wte.weight\n")),
    # The notebook's own code.
    "check ignores the cache lifecycle": bug(
        "06_equivalence.py", ("and all(close(a, b) for a, b in kv_pairs) and cache_unchanged),",
                              "and all(close(a, b) for a, b in kv_pairs)),")),
    "generation feeds the whole sequence into the cache": bug(
        "06_generation.py", ("        step_input = next_id\n", "        step_input = ids\n")),
    "multiply-add formula misses the weighted sum": bug(
        "08_cost_model.py", ('"attention": c.layers * 2 * new_len * total_len * c.width,',
                             '"attention": c.layers * new_len * total_len * c.width,')),
    "K/V bytes formula without the 2": bug(
        "01_setup_helpers.py", ("    return 2 * layers * kv_heads * head_dim * bytes_per_element",
                                "    return layers * kv_heads * head_dim * bytes_per_element")),
    "hidden-state cache projects V from the un-normalized input": bug(
        "08_three_questions.py", ("v = attn.split_heads(attn.v(h_all))", "v = attn.split_heads(attn.v(x_all))")),
    "cached window drops its cache": bug(
        "09_timing.py", ("logits, cache = model(continuation[:, step:step + 1], cache)   # [B, 1, vocab]",
                         "logits, _ = model(continuation[:, step:step + 1], cache)   # [B, 1, vocab]")),
    "positions formula off by one": bug(
        "09_timing.py", ('"full": generated * prompt_len + generated * (generated + 1) // 2',
                         '"full": generated * prompt_len + generated * (generated - 1) // 2')),
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)


def test_a_harmless_edit_runs_to_the_end(runners):
    """The harness can report a survivor: an edit that changes nothing the notebook computes is no stop."""
    harmless = bug("05_decoder.py", ("    return past_len + torch.arange(new_len)",
                                     "    return (past_len + torch.arange(new_len))"))
    report = runners(False).run(harmless)
    assert report == {"outcome": "ran to the end"} and not stopped(report, harmless)
