"""Section 11: Hugging Face GPT-2 as a referee for padding and StaticCache; skipped without transformers."""

from __future__ import annotations

import json
import sys

import pytest

from notebook_code import exec_sections

from .notebook import NOTEBOOK

APPENDIX = "08_appendix_hf.py"
REFEREE = "10_hf_gpt2_referee.py"            # included from infra-benchmark/kv-cache


def test_peer_block_in_results(nb, out_dir):
    saved = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert saved["peer"] == json.loads(json.dumps(nb["PEER"]))


def test_gpt2_static_cache_with_other_prompts(nb):
    """The appendix's loop on prompts the notebook does not use: GPT-2's StaticCache against our static store."""
    pytest.importorskip("transformers")
    import torch
    prompts = [torch.tensor([3, 1, 4]), torch.tensor([1, 5, 9, 2, 6])]
    ours = nb["generate_with_store"](nb["ours64"], prompts, nb["StaticStore"](nb["cfg"], 2, 9, torch.float64), steps=4)
    cache = nb["StaticCache"](config=nb["gpt2_64"].config, max_cache_len=9)
    theirs = nb["gpt2_padded_loop"](nb["gpt2_64"], prompts, cache, steps=4)
    assert nb["compare"](theirs["logits"], ours["logits"])["close"] and theirs["tokens"] == ours["tokens"]


def test_without_transformers_the_appendix_says_so_and_skips(nb, monkeypatch, capsys):
    namespace = dict(nb)
    monkeypatch.setitem(sys.modules, "transformers", None)          # import transformers -> ImportError
    exec_sections(namespace, NOTEBOOK, REFEREE, APPENDIX)
    assert namespace["PEER"] == {"skipped": {"reason": "transformers_missing"}}
    assert "transformers is not installed: this section is skipped." in capsys.readouterr().out
