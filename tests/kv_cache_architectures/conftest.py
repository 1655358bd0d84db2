"""Fixtures for infra-benchmark/kv-cache-architectures: the notebook's code exec'ed once per session.

The whole notebook (its setup, the sections included from infra-benchmark/kv-cache, its own sections)
runs in quick mode through the builder's loader, writing into a temporary folder. `say`/`say_table` are
replaced by strict stand-ins (`notebook_code.bilingual_stand_ins`) that check that every sentence and
table comes in both languages with matching headers, and record them in SAID.
"""

from __future__ import annotations

from pathlib import Path

from notebook_code import bilingual_stand_ins, run_notebook_code
from notebook_fixtures import notebook_fixtures

NOTEBOOK = "infra-benchmark/kv-cache-architectures"
SAID: list[dict] = []

quick_run, nb, out_dir = notebook_fixtures(NOTEBOOK, said=SAID)


def run_quick(folder: Path) -> dict:
    """Another quick run of the whole notebook into `folder`, recording into SAID (tests that change its
    environment, e.g. without transformers)."""
    return run_notebook_code(NOTEBOOK, **bilingual_stand_ins(SAID), QUICK=True, OUTPUT_DIR=str(folder))
