"""The sections other notebooks include: they run on their own after a minimal setup, define the names those
notebooks use, and never refer to another section by number (docs/source-format.md)."""

from __future__ import annotations

import re

import jupytext
import pytest
import torch

from notebook_code import PRELUDE_NAME, SOURCES, exec_sections

NOTEBOOK = "infra-benchmark/kv-cache"
FOLDER = SOURCES / NOTEBOOK
SHARED = ("01_setup_environment.py", "01_setup_helpers.py", "03_masks.py", "05_decoder.py")
INCLUDED = SHARED + ("10_hf_gpt2_referee.py",)
SETUP = """
import json, math, time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.set_num_threads(1)
SEED = 0
QUICK = True
"""
OTHER_SECTION_NAMES = ("IDS", "VOCAB", "WIDTH", "PAST_LEN", "NEW_LEN", "toy", "STREAM", "COST_STREAM", "TIMING_STREAM",
                       "RESULTS", "GROWTH_IDS")


@pytest.fixture(scope="module")
def shared_namespace(tmp_path_factory) -> dict:
    ns: dict = {"__name__": "__shared__"}
    exec(compile(SETUP, "setup", "exec", dont_inherit=True), ns)
    ns["OUTPUT_DIR"] = str(tmp_path_factory.mktemp("shared"))
    return exec_sections(ns, NOTEBOOK, PRELUDE_NAME, *SHARED)   # the prelude, then the shared sections, in order


def test_shared_sections_run_alone_and_define_the_contract(shared_namespace):
    ns = shared_namespace
    for name in ("ENVIRONMENT", "OUT", "TOLERANCE", "DTYPE_NAME", "close", "max_abs_err", "kv_bytes_per_token",
                 "causal_mask", "local_triangle_mask", "masked_attention", "MASKS_PNG", "DecoderConfig",
                 "absolute_positions", "Cache", "SelfAttention", "MLP", "Block", "CacheDecoder", "parameter_formula",
                 "build_model", "model", "cfg", "N_PARAMS"):
        assert name in ns, name
    assert ns["causal_mask"](2, 3).shape == (3, 5)
    cfg = ns["cfg"]
    assert (cfg.vocab, cfg.width, cfg.heads, cfg.layers, cfg.mlp, cfg.max_positions, cfg.head_dim) == (97, 64, 4, 2, 256, 512, 16)
    with torch.inference_mode():
        logits, cache = ns["model"](torch.tensor([[1, 2, 3]]))
    assert logits.shape == (1, 3, 97) and len(cache) == 2 and cache[0][0].shape == (1, 4, 3, 16)


@pytest.mark.parametrize("name", INCLUDED)
def test_shared_sections_are_self_contained(name):
    text = (FOLDER / name).read_text(encoding="utf-8")
    cells = jupytext.read(FOLDER / name).cells
    headings = [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines() if line.startswith("## ")]
    assert all(h.startswith("## {{section}}. ") for h in headings), headings
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    for other in OTHER_SECTION_NAMES:
        assert not re.search(rf"\b{other}\b", code), other
    prose = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert not re.search(r"section \d|第 ?\d+ ?节", prose), "no reference to another section by number"
    assert '"""' not in text, "docstrings cannot be localized: use # [en] / # [zh] comments"
