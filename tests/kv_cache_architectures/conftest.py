"""Fixtures for infra-benchmark/kv-cache-architectures: the notebook's code exec'ed once per session.

The whole notebook (its setup, the two sections included from infra-benchmark/kv-cache, its own
sections) runs in quick mode through the builder's loader (`arch_code.run_arch_code`), writing into a
temporary folder. `say`/`say_table` are replaced by strict stand-ins that also check that every
sentence and table comes in both languages with matching headers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .arch_code import run_arch_code

os.environ.setdefault("MPLBACKEND", "Agg")
SAID: list[dict] = []


def strict_say(**texts):
    assert set(texts) == {"en", "zh"} and all(isinstance(t, str) and t for t in texts.values()), texts
    SAID.append(texts)
    print(texts["en"])


def strict_say_table(rows, **headers):
    assert set(headers) == {"en", "zh"} and len(headers["en"]) == len(headers["zh"]), headers
    assert all(len(row) == len(headers["en"]) and all(isinstance(c, str) for c in row) for row in rows), rows
    SAID.append({"table": headers, "rows": rows})
    print(headers["en"], rows)


STAND_INS = {"LANG": "en", "say": strict_say, "say_table": strict_say_table}


def run_quick(folder: Path) -> dict:
    return run_arch_code(stand_ins=STAND_INS, QUICK=True, OUTPUT_DIR=str(folder))


@pytest.fixture(scope="session")
def arch_run(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("kv_cache_architectures_quick")
    return run_quick(folder), folder


@pytest.fixture(scope="session")
def nb(arch_run) -> dict:
    """Namespace after every code cell of the notebook, QUICK=True."""
    return arch_run[0]


@pytest.fixture(scope="session")
def out_dir(arch_run) -> Path:
    return arch_run[1]
