"""Section 10: Hugging Face GPT-2 as a referee for padding and StaticCache; skipped without transformers."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from notebook_code import exec_sections

from .notebook import NOTEBOOK

APPENDIX = "08_appendix_hf.py"
REFEREE = "10_hf_gpt2_referee.py"            # included from infra-benchmark/kv-cache


def test_gpt2_agrees_with_padding_and_static_cache(nb):
    pytest.importorskip("transformers")
    assert nb["HAVE_TRANSFORMERS"] and nb["agrees"](nb["peer_errors"])   # section 10, included
    peer = nb["PEER"]
    assert peer["padding"]["max_abs_logit_err"] <= 1e-10 and peer["padding"]["tokens_identical"]
    assert peer["padding"]["generate_tokens_identical"]
    assert peer["static_cache"]["max_abs_logit_err"] <= 1e-10 and peer["static_cache"]["tokens_identical"]
    assert peer["static_cache"]["max_abs_kv_err_real_slots"] <= 1e-10
    assert peer["trap_no_position_ids"]["detected"]


def test_peer_block_in_results(nb, out_dir):
    saved = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert saved["peer"] == json.loads(json.dumps(nb["PEER"]))


def test_without_transformers_the_appendix_says_so_and_skips(nb, tmp_path, monkeypatch, capsys):
    shutil.copytree(nb["OUT"], tmp_path, dirs_exist_ok=True)
    namespace = dict(nb, RESULTS_JSON=tmp_path / "results.json")
    monkeypatch.setitem(sys.modules, "transformers", None)          # import transformers -> ImportError
    exec_sections(namespace, NOTEBOOK, REFEREE, APPENDIX)
    assert namespace["PEER"] == {"skipped": "transformers is not installed: the appendix is skipped."}
    assert "transformers is not installed" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text())["peer"] == namespace["PEER"]
