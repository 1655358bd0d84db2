"""Exec the companion notebook infra-benchmark/kv-cache-hf-gpt2 in this process.

The cells come from the builder (tests/notebook_code.py): the prelude, then the manifest's sections,
including the section files of infra-benchmark/kv-cache it lists (../kv-cache/03_masks.py, ...).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from notebook_code import PRELUDE_NAME, SOURCES, code_cells

NOTEBOOK = "infra-benchmark/kv-cache-hf-gpt2"
FOLDER = SOURCES / NOTEBOOK
MAIN = SOURCES / "infra-benchmark" / "kv-cache"


def section_paths() -> list[Path]:
    manifest = tomllib.loads((FOLDER / "notebook.toml").read_text(encoding="utf-8"))
    return [(FOLDER / name).resolve() for name in manifest["sections"]]


def run_companion(until: str | None = None, replace: dict | None = None, **overrides) -> dict:
    """Exec the code cells in one namespace, stopping after the last cell of section file `until`.

    `replace` overrides names right after the prelude (a recording `say`, say); `overrides` are the
    notebook's parameters (QUICK, OUTPUT_DIR), applied as the builder applies them.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    cells = code_cells(NOTEBOOK, **overrides)
    if until is not None:
        last = max(i for i, (name, _) in enumerate(cells) if name == until)
        cells = cells[:last + 1]
    namespace: dict = {"__name__": "__notebook__"}
    for name, cell in cells:
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        if name == PRELUDE_NAME and replace:
            namespace.update(replace)
    return namespace
