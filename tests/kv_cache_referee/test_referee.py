"""Section 11 of the KV-cache notebook: a lean, shareable comparison with transformers.GPT2LMHeadModel.

The traps, the GELU study, the cache API and the timing race live in the companion notebook
(tests/kv_cache_hf_gpt2/).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import jupytext
import pytest
import torch

from notebook_code import SOURCES, manifest_sections

from .appendix import NOTEBOOK, REFEREE, referee_cells, run_referee

transformers = pytest.importorskip("transformers")

TOL = 1e-10
SHORT_CHUNKS = [7, 1, 1, 4, 1, 18]
MAIN = SOURCES / NOTEBOOK


def test_pinned_transformers_version(nb):
    requirements = Path(__file__).resolve().parents[2] / "requirements.txt"
    pinned = [line.split("==")[1].strip() for line in requirements.read_text().splitlines()
              if line.startswith("transformers==")]
    assert pinned == [transformers.__version__] == [nb["PINNED_TRANSFORMERS"]]
    assert nb["HAVE_TRANSFORMERS"] is True and nb["cache_api_problem"]() is None


def test_config_mapping(nb):
    c, cfg = nb["hf_config"], nb["cfg"]
    assert (c.vocab_size, c.n_embd, c.n_head, c.n_layer, c.n_inner, c.n_positions) == (
        cfg.vocab, cfg.width, cfg.heads, cfg.layers, cfg.mlp, cfg.max_positions) == (97, 64, 4, 2, 256, 512)
    assert c.activation_function == "gelu" and c.layer_norm_epsilon == 1e-5 and c.tie_word_embeddings is False
    assert c.resid_pdrop == c.embd_pdrop == c.attn_pdrop == 0.0
    assert c.bos_token_id is None and c.eos_token_id is None and c.pad_token_id is None
    assert c.scale_attn_weights and not c.scale_attn_by_inverse_layer_idx and not c.reorder_and_upcast_attn
    gpt2 = nb["gpt2_64"]
    assert gpt2.config._attn_implementation == "eager" and not gpt2.training
    assert gpt2.lm_head.weight is not gpt2.transformer.wte.weight
    assert next(gpt2.parameters()).dtype == torch.float64


def test_weight_layout(nb):
    ours, sd = nb["ours64"], nb["gpt2_state_dict"](nb["ours64"])
    attn = ours.blocks[1].attn
    c_attn = sd["transformer.h.1.attn.c_attn.weight"]
    assert tuple(c_attn.shape) == (64, 192)
    for part, linear in zip(c_attn.split(64, dim=1), (attn.q, attn.k, attn.v)):
        assert torch.equal(part, linear.weight.T)
    assert torch.equal(sd["transformer.h.1.attn.c_attn.bias"], torch.cat([attn.q.bias, attn.k.bias, attn.v.bias]))
    assert torch.equal(sd["transformer.h.1.attn.c_proj.weight"], attn.proj.weight.T)
    assert torch.equal(sd["transformer.h.1.mlp.c_fc.weight"], ours.blocks[1].mlp.fc.weight.T)
    assert torch.equal(sd["lm_head.weight"], ours.lm_head.weight)
    assert set(sd) == set(nb["gpt2_64"].state_dict())


def test_full_and_cached_fp64_agreement_per_layer(nb):
    errors = nb["peer_errors"]
    assert nb["agrees"](errors) and nb["worst_error"](errors) <= TOL
    assert len(errors["k"]) == len(errors["v"]) == 2
    assert nb["peer_ids"].shape == (2, 512) and sum(nb["PEER_CHUNKS"]) == 512


def test_correct_mapping_agrees_for_other_weights(nb):
    """The mapping holds for a decoder with other random weights, another batch size and other chunks."""
    ours = nb["build_model"](seed=123).to(torch.float64)
    ids = torch.randint(0, 97, (1, sum(SHORT_CHUNKS)), generator=torch.Generator().manual_seed(5))
    errors = nb["compare_with_gpt2"](ours, nb["build_gpt2"](ours), ids, SHORT_CHUNKS)
    assert nb["agrees"](errors), errors


def test_notebook_negative_control(nb):
    assert not nb["agrees"](nb["tied_errors"]) and nb["worst_error"](nb["tied_errors"]) > 1e-3


def test_the_comparison_can_fail(nb):
    """Negative control for the lean section: a wrong mapping (tied embeddings) is reported."""
    ours = nb["ours64"]
    ids = torch.randint(0, 97, (1, sum(SHORT_CHUNKS)), generator=torch.Generator().manual_seed(6))
    errors = nb["compare_with_gpt2"](ours, nb["build_gpt2"](ours, tie_word_embeddings=True), ids, SHORT_CHUNKS)
    assert not nb["agrees"](errors)


def test_the_referee_leaves_results_json_alone(nb, base_dir, kv_cache_quick):
    """The `peer` block moved to the companion's results.json."""
    assert "peer" not in json.loads((base_dir / "results.json").read_text(encoding="utf-8"))
    assert sorted(p.name for p in base_dir.iterdir()) == sorted(p.name for p in kv_cache_quick[1].iterdir())


def hide_transformers(monkeypatch):
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.setitem(sys.modules, name, None)


def test_skips_with_one_sentence_without_transformers(base, base_dir, tmp_path, monkeypatch, capsys):
    shutil.copy(base_dir / "results.json", tmp_path / "results.json")
    hide_transformers(monkeypatch)
    said = []
    namespace = dict(base, OUTPUT_DIR=str(tmp_path), say=lambda **t: said.append(t),
                     say_table=lambda *a, **k: pytest.fail("no table when skipped"))
    run_referee(namespace)
    assert namespace["HAVE_TRANSFORMERS"] is False and namespace["SKIP_NOTE"].startswith(("ImportError: ", "ModuleNotFoundError: "))
    assert len(said) == 1
    assert said[0]["en"] == "transformers is not installed, so the comparison with Hugging Face GPT-2 is skipped."
    assert said[0]["zh"] == "没有安装 transformers，因此跳过与 Hugging Face GPT-2 的比较。"
    assert capsys.readouterr().out == ""
    assert "gpt2_64" not in namespace and "peer_errors" not in namespace


class CacheWithoutConfig(transformers.DynamicCache):
    """Like releases whose DynamicCache does not take `config=`."""

    def __init__(self):
        super().__init__()


class CacheWithoutLayers(transformers.DynamicCache):
    """Like releases that keep K/V in `key_cache` / `value_cache` lists instead of `layers`."""

    @property
    def layers(self):
        raise AttributeError("'DynamicCache' object has no attribute 'layers'")

    @layers.setter
    def layers(self, value):
        pass


@pytest.mark.parametrize("old_cache", [CacheWithoutConfig, CacheWithoutLayers])
def test_skips_without_the_cache_api(old_cache, base, monkeypatch):
    monkeypatch.setattr(sys.modules["transformers"], "DynamicCache", old_cache)
    said = []
    namespace = run_referee(dict(base, say=lambda **t: said.append(t)))
    assert namespace["HAVE_TRANSFORMERS"] is False and len(said) == 1
    assert namespace["SKIP_NOTE"] == f"transformers {transformers.__version__}: {namespace['API_PROBLEM']}"
    note = said[0]["en"]
    assert note.startswith(f"transformers {transformers.__version__} lacks the cache API used here (`")
    assert note.endswith("so the comparison with Hugging Face GPT-2 is skipped.") and "\n" not in note
    assert "4.57.1" in note and "5.23.0" in note and "4.57.1" in said[0]["zh"]


def notebook_cells(notebook: str) -> dict[str, int]:
    """Cells per section file in one language's built notebook: code cells plus one per prose group."""
    counts = {}
    for name in manifest_sections(notebook):
        cells = jupytext.read(SOURCES / notebook / name).cells
        counts[name] = sum(1 for c in cells if c.cell_type == "code" or 'lang="en"' in str(c.metadata)
                           or c.metadata.get("lang") == "en")
    return counts


def test_the_referee_is_a_short_section_of_the_notebook():
    counts = notebook_cells(NOTEBOOK)
    assert counts[REFEREE] == 7
    assert counts[REFEREE] / sum(counts.values()) <= 0.08, counts


def test_the_referee_is_shareable():
    """Heading numbered by the builder, no section of the main notebook named by number."""
    source = (MAIN / REFEREE).read_text(encoding="utf-8")
    assert source.count("## {{section}}. ") == 2
    prose = "\n".join(c.source for c in jupytext.read(MAIN / REFEREE).cells if c.cell_type == "markdown")
    assert not re.search(r"[Ss]ection \d|第 ?\d+ ?节", prose)
    # The companion notebook includes this section: the link to it lives in kv-cache's own next section.
    assert "{{colab:" not in prose
    assert "{{colab:infra-benchmark/kv-cache-hf-gpt2}}" in (MAIN / "10_hf_gpt2_companion.py").read_text(encoding="utf-8")
    code = "\n".join(cell.source for cell in referee_cells())
    for name in ("STREAM", "IDS", "VOCAB", "TIMING_STREAM", "prefill", "RESULTS"):
        assert not re.search(rf"\b{name}\b", code), name
    # TOLERANCE and max_abs_err come from the shared helpers, which every notebook that includes the
    # referee includes before it.
    notebooks = [path.parent.relative_to(SOURCES).as_posix() for path in sorted(SOURCES.glob("*/*/notebook.toml"))]
    includers = [nb for nb in notebooks if any(entry.endswith(REFEREE) for entry in manifest_sections(nb))]
    assert len(includers) >= 2, includers
    for notebook in includers:
        sections = [Path(entry).name for entry in manifest_sections(notebook)]
        assert "01_setup_helpers.py" in sections[:sections.index(REFEREE)], notebook

