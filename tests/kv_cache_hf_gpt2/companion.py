"""Exec the companion notebook infra-benchmark/kv-cache-hf-gpt2 in this process, section by section.

Its manifest includes section files of infra-benchmark/kv-cache (../kv-cache/03_masks.py, ...);
they are resolved relative to the companion's folder, as the builder does.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import jupytext

from notebook_code import SOURCES
from prelude_stand_ins import STAND_INS

NOTEBOOK = "infra-benchmark/kv-cache-hf-gpt2"
FOLDER = SOURCES / NOTEBOOK
MAIN = SOURCES / "infra-benchmark" / "kv-cache"


def section_paths() -> list[Path]:
    manifest = tomllib.loads((FOLDER / "notebook.toml").read_text(encoding="utf-8"))
    return [(FOLDER / name).resolve() for name in manifest["sections"]]


def code_cells(path: Path) -> list:
    return [cell for cell in jupytext.read(path).cells if cell.cell_type == "code"]


def exec_section(path: Path, namespace: dict, overrides: dict | None = None) -> dict:
    for cell in code_cells(path):
        exec(compile(cell.source, path.name, "exec", dont_inherit=True), namespace)
        if overrides and "parameters" in cell.metadata.get("tags", []):
            namespace.update(overrides)
    return namespace


def run_companion(until: str | None = None, namespace: dict | None = None, **overrides) -> dict:
    """Exec the sections in manifest order (up to and including the file named `until`).

    `namespace` may carry a run that stopped earlier; its sections are not run again.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    namespace = namespace if namespace is not None else {"__name__": "__notebook__", **STAND_INS}
    done = namespace.setdefault("__sections_run__", [])
    for path in section_paths():
        if str(path) in done:
            continue
        source = path.read_text(encoding="utf-8")
        if path.parent == MAIN and "PAST_LEN" in source and "IDS" not in namespace:
            # the kv-cache sections before "shareable masks and decoder sections" landed: they still read
            # the names of its section 2
            exec_section(MAIN / "02_six_token_example.py", namespace)
        exec_section(path, namespace, overrides)
        done.append(str(path))
        if until is not None and path.name == until:
            break
    return namespace
