"""Each classic cache bug, injected into a copy of the sources, stops sections 1-7 with an AssertionError.

The mutations edit the section files' text (as a careless edit would), not the live objects: this checks
the notebook's own assertions, not the tests'. The mutated cells are composed by the builder
(`notebook_code.run_notebook_code` with `edits`) and exec'ed in this process, in quick mode.
"""

from __future__ import annotations

import pytest

from notebook_code import manifest_sections, run_notebook_code

NOTEBOOK = "infra-benchmark/kv-cache"
# Manifest entries up to and including 07_broken_variants.py (01_setup_environment.py continues section 1).
SECTIONS = manifest_sections(NOTEBOOK).index("07_broken_variants.py") + 1
MUTATIONS = {
    "wrong position": ("05_decoder.py", "    return past_len + torch.arange(new_len)", "    return torch.arange(new_len)"),
    "missing offset": ("03_masks.py", "    query_pos = past_len + torch.arange(new_len)", "    query_pos = torch.arange(new_len)"),
    "reordered concatenation": ("05_decoder.py", "k = torch.cat((past_k, k), dim=-2)", "k = torch.cat((k, past_k), dim=-2)"),
    "in-place write": ("05_decoder.py", "            past_k, past_v = past\n",
                       "            past_k, past_v = past\n            past_v.mul_(1.001)\n"),
    "softmax axis": ("05_decoder.py", '.softmax(dim=-1)\n        context', '.softmax(dim=-2)\n        context'),
    "scaling": ("05_decoder.py", "/ math.sqrt(self.head_dim)", "/ self.head_dim"),
    "GELU variant": ("05_decoder.py", 'nn.GELU(approximate="none")', 'nn.GELU(approximate="tanh")'),
    "GELU variant in forward": ("05_decoder.py", "return self.proj(self.act(self.fc(x)))",
                                "return self.proj(F.gelu(self.fc(x), approximate='tanh'))"),
}


def run_sections(out_dir, edits=None) -> dict:
    return run_notebook_code(NOTEBOOK, sections=SECTIONS, edits=edits, QUICK=True, OUTPUT_DIR=str(out_dir))


@pytest.mark.parametrize("name", MUTATIONS)
def test_injected_bug_stops_the_notebook(name, tmp_path, capsys):
    file, old, new = MUTATIONS[name]
    with pytest.raises(AssertionError):
        run_sections(tmp_path, {file: [(old, new)]})


def test_the_unmutated_sections_run(tmp_path, capsys):
    run_sections(tmp_path)
