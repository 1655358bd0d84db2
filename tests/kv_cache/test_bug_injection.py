"""Each classic cache bug, injected into the kv-cache notebook's own code, stops it by its own assertions.

The bugs edit the section files' text (as a careless edit would), never the negative controls: this checks
the notebook's own assertions, not the tests'. The harness is `tests/bug_injection.py`.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests, stopped

NOTEBOOK = "infra-benchmark/kv-cache"
BUGS = {
    "wrong position": bug(
        "05_decoder.py",
        ("    return past_len + torch.arange(new_len)",
         "    return torch.arange(new_len)")),
    "missing offset": bug(
        "03_masks.py",
        ("    query_pos = past_len + torch.arange(new_len)",
         "    query_pos = torch.arange(new_len)")),
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
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)


def test_a_harmless_edit_runs_to_the_end(runners):
    """The harness can report a survivor: an edit that changes nothing the notebook computes is no stop."""
    harmless = bug("05_decoder.py", ("    return past_len + torch.arange(new_len)",
                                     "    return (past_len + torch.arange(new_len))"))
    report = runners(False).run(harmless)
    assert report == {"outcome": "ran to the end"} and not stopped(report, harmless)
