"""The companion notebook infra-benchmark/kv-cache-hf-gpt2, exec'ed once per session in quick mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from notebook_code import run_notebook_code

from .companion import NOTEBOOK


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kv_cache_hf_gpt2")


@pytest.fixture(scope="session")
def nb(out_dir) -> dict:
    """Namespace after every section of the companion (QUICK=True), writing into out_dir."""
    return run_notebook_code(NOTEBOOK, QUICK=True, OUTPUT_DIR=str(out_dir))


@pytest.fixture(scope="session")
def results(nb, out_dir) -> dict:
    import json

    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
