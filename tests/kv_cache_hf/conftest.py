"""Fixtures for section 10 of the KV-cache notebook (the Hugging Face GPT-2 referee).

Sections 1-9 run once per session in quick mode (tests/conftest.py); the appendix's code cells are
then exec'ed into a copy of that namespace, writing into a copy of its output folder, as the
notebook does. `base` is the namespace before the appendix, so a test can replay the appendix
under other conditions (transformers hidden, say).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .appendix import run_appendix


@pytest.fixture(scope="session")
def base_dir(kv_cache_quick, tmp_path_factory) -> Path:
    """A copy of the section-9 output folder: the appendix rewrites its results.json."""
    folder = tmp_path_factory.mktemp("kv_cache_hf")
    shutil.copytree(kv_cache_quick[1], folder, dirs_exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def base(kv_cache_quick, base_dir) -> dict:
    """Namespace after sections 1-9 (QUICK=True), with OUTPUT_DIR pointing at base_dir."""
    return dict(kv_cache_quick[0], OUTPUT_DIR=str(base_dir))


@pytest.fixture(scope="session")
def nb(base) -> dict:
    """Namespace after sections 1-9 and the appendix."""
    return run_appendix(dict(base))
