"""Where the appendix lives and how to exec its code cells into a notebook namespace."""

from __future__ import annotations

from notebook_code import code_cells

NOTEBOOK = "infra-benchmark/kv-cache"
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
