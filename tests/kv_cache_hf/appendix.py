"""Where the appendix lives and how to exec its code cells into a notebook namespace."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from notebook_code import code_cells  # noqa: E402

NOTEBOOK = "infra-benchmark/kv-cache"
CORE_SECTIONS = 9                      # 01..09 come before the appendix
APPENDIX = "10_appendix_hf_gpt2.py"


def appendix_cells() -> list:
    cells = [cell for name, cell in code_cells(NOTEBOOK) if name == APPENDIX]
    assert cells, f"{APPENDIX} has no code cells"
    return cells


def run_appendix(namespace: dict) -> dict:
    """Exec the appendix's code cells, in order, into `namespace` (which must hold sections 1-9)."""
    for cell in appendix_cells():
        exec(compile(cell.source, APPENDIX, "exec", dont_inherit=True), namespace)
    return namespace
