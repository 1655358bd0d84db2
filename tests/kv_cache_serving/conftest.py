"""The kv-cache-serving notebook's code, exec'ed once per session in quick mode (all sections)."""

from __future__ import annotations

from pathlib import Path

import pytest

from notebook_code import run_notebook_code

from .notebook import NOTEBOOK


@pytest.fixture(scope="session")
def serving_quick(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("kv_cache_serving_quick")
    return run_notebook_code(NOTEBOOK, QUICK=True, OUTPUT_DIR=str(folder)), folder


@pytest.fixture(scope="session")
def nb(serving_quick) -> dict:
    """Namespace after every section (QUICK=True), writing into a temporary folder."""
    return serving_quick[0]


@pytest.fixture(scope="session")
def out_dir(serving_quick) -> Path:
    return serving_quick[1]
