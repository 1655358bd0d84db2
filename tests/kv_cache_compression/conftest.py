"""Fixtures for infra-benchmark/kv-cache-compression: the notebook's code exec'ed once per session.

The whole notebook (its setup, the sections included from infra-benchmark/kv-cache, its own sections) runs in
quick mode through the builder's loader (`notebook_code.run_notebook_code`), writing into a temporary folder.
`say`/`say_table` are replaced by strict stand-ins (`notebook_code.bilingual_stand_ins`) that check that every
sentence and table comes in both languages with matching headers, and record them in SAID.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from notebook_code import bilingual_stand_ins, run_notebook_code

NOTEBOOK = "infra-benchmark/kv-cache-compression"
SAID: list[dict] = []


def run_quick(folder: Path) -> dict:
    return run_notebook_code(NOTEBOOK, **bilingual_stand_ins(SAID), QUICK=True, OUTPUT_DIR=str(folder))


@pytest.fixture(scope="session")
def compression_run(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("kv_cache_compression_quick")
    return run_quick(folder), folder


@pytest.fixture(scope="session")
def nb(compression_run) -> dict:
    """Namespace after every code cell of the notebook, QUICK=True."""
    return compression_run[0]


@pytest.fixture(scope="session")
def out_dir(compression_run) -> Path:
    return compression_run[1]
