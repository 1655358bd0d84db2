import os
from pathlib import Path

import pytest

from notebook_code import run_notebook_code

os.environ.setdefault("MPLBACKEND", "Agg")


def _say(**texts):
    """Stand-in for the builder prelude's say() until it lands: both languages are required."""
    assert set(texts) == {"en", "zh"}, texts
    print(texts["en"])


def _say_table(rows, **headers):
    """Stand-in for the builder prelude's say_table(): one header per language, rows of strings."""
    assert set(headers) == {"en", "zh"} and len(headers["en"]) == len(headers["zh"]), headers
    assert all(len(row) == len(headers["en"]) and all(isinstance(c, str) for c in row) for row in rows), rows
    print(headers["en"], rows)


PRELUDE_STAND_INS = {"LANG": "en", "say": _say, "say_table": _say_table}


@pytest.fixture(scope="session")
def kv_cache_quick(tmp_path_factory) -> tuple[dict, Path]:
    """Sections 1-9 of the KV-cache notebook, exec'ed once per session with QUICK=True.

    Returns (namespace, output folder). Tests that write must copy the folder, not write into it.
    """
    folder = tmp_path_factory.mktemp("kv_cache_quick")
    namespace = run_notebook_code("infra-benchmark/kv-cache", sections=9, QUICK=True, OUTPUT_DIR=str(folder),
                                  **PRELUDE_STAND_INS)
    return namespace, folder
