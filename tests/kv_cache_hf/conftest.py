"""Fixtures for section 10 of the KV-cache notebook (the Hugging Face GPT-2 referee).

Sections 1-9 run once in quick mode into a temporary folder; the appendix's code cells are then
exec'ed into a copy of that namespace, as the notebook does. `base` is the namespace before the
appendix, so a test can replay the appendix under other conditions (transformers hidden, say).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from notebook_code import run_notebook_code  # noqa: E402

from .appendix import CORE_SECTIONS, NOTEBOOK, run_appendix  # noqa: E402


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kv_cache_hf")


@pytest.fixture(scope="session")
def base(base_dir) -> dict:
    """Namespace after sections 1-9 (QUICK=True); their results.json is in base_dir."""
    return run_notebook_code(NOTEBOOK, sections=CORE_SECTIONS, QUICK=True, OUTPUT_DIR=str(base_dir))


@pytest.fixture(scope="session")
def nb(base) -> dict:
    """Namespace after sections 1-9 and the appendix."""
    return run_appendix(dict(base))
