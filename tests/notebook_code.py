"""Run a notebook's shared code cells in this process, so tests can reach its objects.

The builder runs notebooks in a kernel; tests that need the notebook's classes and
functions (to inject a broken variant into the model, say) exec the same code cells
here instead, with parameter overrides applied the same way the builder applies them.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks_src"


def code_cells(notebook: str, sections: int | None = None) -> list[tuple[str, str]]:
    """(section file name, source) of each code cell of `notebook`, in order.

    `sections` keeps only the first N section files (sorted by name, as the manifest orders them).
    """
    folder = SOURCES / notebook
    files = sorted(folder.glob("[0-9][0-9]_*.py"))
    if sections is not None:
        files = files[:sections]
    cells = []
    for path in files:
        for cell in jupytext.read(path).cells:
            if cell.cell_type == "code":
                cells.append((path.name, cell))
    return cells


def run_notebook_code(notebook: str, sections: int | None = None, **overrides) -> dict:
    """Exec the code cells in one namespace, applying `overrides` right after the parameters cell.

    Pass OUTPUT_DIR (a tmp_path) among the overrides when the cells write files.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__notebook__"}
    for name, cell in code_cells(notebook, sections):
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        if "parameters" in cell.metadata.get("tags", []):
            namespace.update(overrides)
    return namespace
