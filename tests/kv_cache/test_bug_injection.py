"""Each classic cache bug, injected into a copy of the sources, stops sections 1-7 with an AssertionError.

The mutations edit the section files' text (as a careless edit would), not the live objects: this checks
the notebook's own assertions, not the tests'.
"""

from __future__ import annotations

import jupytext
import pytest

from learning_notebooks.compose import prelude_source
from notebook_code import SOURCES

FOLDER = SOURCES / "infra-benchmark" / "kv-cache"
SECTIONS = sorted(FOLDER.glob("0[1-7]_*.py"))
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


def run_sections(texts: dict, out_dir) -> None:
    ns: dict = {"__name__": "__mutated__"}
    exec(compile(prelude_source("en"), "prelude.py", "exec", dont_inherit=True), ns)
    for path in SECTIONS:
        for cell in jupytext.reads(texts[path.name], fmt="py:percent").cells:
            if cell.cell_type == "code":
                exec(compile(cell.source, path.name, "exec", dont_inherit=True), ns)
                if "parameters" in cell.metadata.get("tags", []):
                    ns.update(QUICK=True, OUTPUT_DIR=str(out_dir))


@pytest.mark.parametrize("name", MUTATIONS)
def test_injected_bug_stops_the_notebook(name, tmp_path, capsys):
    file, old, new = MUTATIONS[name]
    texts = {path.name: path.read_text(encoding="utf-8") for path in SECTIONS}
    assert texts[file].count(old) == 1, "the mutation no longer applies: update it"
    texts[file] = texts[file].replace(old, new)
    with pytest.raises(AssertionError):
        run_sections(texts, tmp_path)


def test_the_unmutated_sections_run(tmp_path, capsys):
    run_sections({path.name: path.read_text(encoding="utf-8") for path in SECTIONS}, tmp_path)
