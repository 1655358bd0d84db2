"""Exec the kv-cache-serving notebook's code in this process, in the order of its manifest.

The manifest includes two sections of `infra-benchmark/kv-cache` by relative path. While that
notebook's sections still use names of its own earlier sections (before they became shareable),
its sections 1-5 run first instead, then this notebook's own sections.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import jupytext

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "notebooks_src"
NOTEBOOK = "infra-benchmark/kv-cache-serving"
FOLDER = SOURCES / NOTEBOOK


def manifest_sections() -> list[Path]:
    manifest = tomllib.loads((FOLDER / "notebook.toml").read_text(encoding="utf-8"))
    return [(FOLDER / entry).resolve() for entry in manifest["sections"]]


def _stand_ins(namespace: dict) -> None:
    """`say`/`say_table` as the builder's prelude defines them, if it is not available here."""
    try:
        from learning_notebooks.prelude import PRELUDE  # the builder's prelude, once it exists
    except ImportError:
        PRELUDE = None
    if PRELUDE is not None:
        exec(PRELUDE, namespace)
        namespace["LANG"] = "en"
        return
    namespace["LANG"] = "en"
    namespace["say"] = lambda **text: print(text.get("en"))
    namespace["say_table"] = lambda rows, **headers: print(headers.get("en"), rows)


def _shareable(path: Path) -> bool:
    return "{{section}}" in path.read_text(encoding="utf-8")


def run(sections: int | None = None, **overrides) -> dict:
    """Exec the first `sections` entries of the manifest (all by default), overrides after the parameters cell."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__notebook__"}
    _stand_ins(namespace)
    paths = manifest_sections()[:sections]
    shared = [p for p in paths if p.parent != FOLDER]
    if shared and not all(_shareable(p) for p in shared):   # kv-cache's sections not yet shareable
        from notebook_code import code_cells
        for name, cell in code_cells("infra-benchmark/kv-cache", sections=5):
            exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        paths = [p for p in paths if p.parent == FOLDER]
    for path in paths:
        for cell in jupytext.read(path).cells:
            if cell.cell_type != "code":
                continue
            exec(compile(cell.source, str(path.relative_to(SOURCES)), "exec", dont_inherit=True), namespace)
            if "parameters" in cell.metadata.get("tags", []):
                namespace.update(overrides)
    return namespace
