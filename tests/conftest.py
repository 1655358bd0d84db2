import os
from pathlib import Path

import pytest

from notebook_code import manifest_sections, run_notebook_code

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def kv_cache_quick(tmp_path_factory) -> tuple[dict, Path]:
    """Sections 1-9 of the KV-cache notebook (every manifest entry through 09_saved_results.py; the set-up
    files continue section 1), exec'ed once per session with QUICK=True.

    Returns (namespace, output folder). Tests that write must copy the folder, not write into it.
    """
    folder = tmp_path_factory.mktemp("kv_cache_quick")
    sections = manifest_sections("infra-benchmark/kv-cache").index("09_saved_results.py") + 1
    namespace = run_notebook_code("infra-benchmark/kv-cache", sections=sections, QUICK=True, OUTPUT_DIR=str(folder))
    return namespace, folder
