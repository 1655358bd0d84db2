"""Fixtures for section 11 of the KV-cache notebook (the lean Hugging Face GPT-2 referee).

Sections 1-10 run once per session in quick mode (tests/conftest.py); the referee's code cells are then
exec'ed into a copy of that namespace, with OUTPUT_DIR pointing at a copy of its output folder.
`base` is the namespace before the referee, so a test can replay it under other conditions
(transformers hidden, say).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .appendix import run_referee


@pytest.fixture(scope="session")
def base_dir(kv_cache_quick, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kv_cache_referee")
    shutil.copytree(kv_cache_quick[1], folder, dirs_exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def base(kv_cache_quick, base_dir) -> dict:
    """Namespace after sections 1-10 (QUICK=True), with OUTPUT_DIR pointing at base_dir."""
    return dict(kv_cache_quick[0], OUTPUT_DIR=str(base_dir))


@pytest.fixture(scope="session")
def nb(base) -> dict:
    """Namespace after sections 1-10 and the referee."""
    return run_referee(dict(base))
