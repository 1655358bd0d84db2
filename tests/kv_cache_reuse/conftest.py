"""Fixtures for infra-benchmark/kv-cache-reuse: the whole notebook exec'ed once per session, quick mode.

`say`/`say_table` are strict stand-ins (`notebook_code.bilingual_stand_ins`): every sentence and table
must come in both languages; they are recorded in SAID."""

from __future__ import annotations

from pathlib import Path

import pytest

from notebook_code import bilingual_stand_ins, run_notebook_code

from .notebook import NOTEBOOK

SAID: list[dict] = []


def run_quick(folder: Path) -> dict:
    return run_notebook_code(NOTEBOOK, **bilingual_stand_ins(SAID), QUICK=True, OUTPUT_DIR=str(folder))


@pytest.fixture(scope="session")
def reuse_run(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("kv_cache_reuse_quick")
    return run_quick(folder), folder


@pytest.fixture(scope="session")
def nb(reuse_run) -> dict:
    """Namespace after every code cell of the notebook, QUICK=True."""
    return reuse_run[0]


@pytest.fixture(scope="session")
def out_dir(reuse_run) -> Path:
    return reuse_run[1]
