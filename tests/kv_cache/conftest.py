"""Fixtures for the KV-cache notebook: its code cells exec'ed once, in quick mode, into a temp folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from notebook_code import run_notebook_code

NOTEBOOK = "infra-benchmark/kv-cache"
CORE_SECTIONS = 9   # sections 01..09; a later appendix (10_...) is not needed here


@pytest.fixture(scope="session")
def quick_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kv_cache_quick")


@pytest.fixture(scope="session")
def nb(quick_dir) -> dict:
    """Namespace of sections 1-9 run with QUICK=True, writing into a temporary folder."""
    return run_notebook_code(NOTEBOOK, sections=CORE_SECTIONS, QUICK=True, OUTPUT_DIR=str(quick_dir))
