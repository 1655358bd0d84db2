"""Fixtures for infra-benchmark/kv-cache-reuse: the whole notebook exec'ed once per session, quick mode.

`say`/`say_table` are strict stand-ins (`notebook_code.bilingual_stand_ins`): every sentence and table
must come in both languages; they are recorded in SAID."""

from __future__ import annotations

from pathlib import Path

from notebook_code import bilingual_stand_ins, run_notebook_code
from notebook_fixtures import notebook_fixtures

from .notebook import NOTEBOOK

SAID: list[dict] = []

quick_run, nb, out_dir = notebook_fixtures(NOTEBOOK, said=SAID)


def run_quick(folder: Path) -> dict:
    """Another quick run of the whole notebook into `folder`, recording into SAID (tests that change its
    environment, e.g. without transformers)."""
    return run_notebook_code(NOTEBOOK, **bilingual_stand_ins(SAID), QUICK=True, OUTPUT_DIR=str(folder))
