"""Run a notebook's code cells in this process, so tests can reach its objects.

The builder runs notebooks in a kernel; tests that need the notebook's classes and functions
(to inject a broken variant into the model, say) exec the same code cells here instead. The cells
come from the builder itself (`load_notebook` + `compose_for_execution`): the prelude first
(`LANG`, `say`, `say_table`; LANG is "en" here, so `say` prints the English text), sections in
manifest order (included sections too), localized comments dropped, and parameter overrides in an
`injected-parameters` cell right after the parameters cell, as the builder applies them.
"""

from __future__ import annotations

import ast
import os
from dataclasses import replace
from pathlib import Path

from learning_notebooks.compose import compose_for_execution
from learning_notebooks.sources import load_config, load_notebook

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks_src"
PRELUDE_NAME = "prelude.py"
INJECTED_NAME = "injected-parameters"


def code_cells(notebook: str, sections: int | None = None, lang: str = "en", **overrides) -> list[tuple[str, object]]:
    """(file name, cell) of each code cell the builder would execute for `notebook`, in order.

    `sections` keeps only the first N entries of the manifest's `sections`. The first cell is the
    prelude (named "prelude.py"); `overrides` become an "injected-parameters" cell. Each cell has
    `.source`, `.id` and `.metadata` (with its `tags`).
    """
    series, name = notebook.split("/")
    config = load_config(SOURCES)
    source = load_notebook(SOURCES, series, name, config)
    if sections is not None:
        source = replace(source, sections=source.sections[:sections])
    files = {cell.id: cell.file.name for cell in source.code_cells()}
    executable = compose_for_execution(source, overrides, lang=lang)
    named = []
    for cell in executable.cells:
        label = PRELUDE_NAME if cell.id == "prelude" else INJECTED_NAME if cell.id == INJECTED_NAME else files[cell.id]
        named.append((label, cell))
    return named


def _literal(value) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


def run_notebook_code(notebook: str, sections: int | None = None, lang: str = "en", **overrides) -> dict:
    """Exec the code cells in one namespace (prelude first, `overrides` after the parameters cell).

    Pass OUTPUT_DIR (a tmp_path) among the overrides when the cells write files. `lang=None` runs
    like the build's single execution: `say` then prints every language. Overrides that are not
    literals (a stand-in function, say) cannot be written into a cell: they are put into the
    namespace right after the prelude and again right after the parameters cell.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    literals = {name: value for name, value in overrides.items() if _literal(value)}
    objects = {name: value for name, value in overrides.items() if name not in literals}
    namespace: dict = {"__name__": "__notebook__"}
    for name, cell in code_cells(notebook, sections, lang, **literals):
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        if name == PRELUDE_NAME or "parameters" in cell.metadata.get("tags", []):
            namespace.update(objects)
    return namespace
