import os
from pathlib import Path

import pytest

from notebook_code import run_notebook_code

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def kv_cache_quick(tmp_path_factory) -> tuple[dict, Path]:
    """Sections 1-9 of the KV-cache notebook (10 files: 01_setup_environment.py continues section 1), exec'ed once per session with QUICK=True.

    Returns (namespace, output folder). Tests that write must copy the folder, not write into it.
    """
    folder = tmp_path_factory.mktemp("kv_cache_quick")
    namespace = run_notebook_code("infra-benchmark/kv-cache", sections=10, QUICK=True, OUTPUT_DIR=str(folder))
    return namespace, folder
