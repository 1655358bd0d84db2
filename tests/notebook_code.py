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
import tomllib
from dataclasses import replace
from pathlib import Path

from learning_notebooks.compose import compose_for_execution
from learning_notebooks.sources import load_config, load_notebook

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks_src"
PRELUDE_NAME = "prelude.py"
INJECTED_NAME = "injected-parameters"


def code_cells(notebook: str, sections: int | None = None, lang: str = "en",
               edits: dict[str, list[tuple[str, str]]] | None = None, **overrides) -> list[tuple[str, object]]:
    """(file name, cell) of each code cell the builder would execute for `notebook`, in order.

    `sections` keeps only the first N entries of the manifest's `sections`. The first cell is the
    prelude (named "prelude.py"); `overrides` become an "injected-parameters" cell. Each cell has
    `.source`, `.id` and `.metadata` (with its `tags`). `edits` ({section file name: [(old, new), ...]})
    replaces text in those sections' code cells before composing, as a careless edit of the file would
    (bug injection); each old text must occur exactly once in its file, and inside a code cell, or
    `MutationDoesNotApply` is raised.
    """
    series, name = notebook.split("/")
    config = load_config(SOURCES)
    source = load_notebook(SOURCES, series, name, config)
    if sections is not None:
        source = replace(source, sections=source.sections[:sections])
    if edits:
        source = replace(source, sections=tuple(_edited(section, edits.get(section.file.name, []))
                                                for section in source.sections))
        missing = set(edits) - {section.file.name for section in source.sections}
        if missing:
            raise MutationDoesNotApply(f"no such section among those run: {sorted(missing)}")
    files = {cell.id: cell.file.name for cell in source.code_cells()}
    executable = compose_for_execution(source, overrides, lang=lang)
    named = []
    for cell in executable.cells:
        label = PRELUDE_NAME if cell.id == "prelude" else INJECTED_NAME if cell.id == INJECTED_NAME else files[cell.id]
        named.append((label, cell))
    return named


class MutationDoesNotApply(Exception):
    """An edit's old text is not exactly once in its file, in a code cell: the mutation needs updating.
    Neither an AssertionError nor an error the notebooks raise, so a bug-injection test cannot take it
    for the notebook stopping."""


def _edited(section, edits: list[tuple[str, str]]):
    """`section` with each (old, new) text replacement applied to the one code cell that holds `old`."""
    if not edits:
        return section
    file = section.file.name
    text = section.file.read_text(encoding="utf-8")
    cells = list(section.cells)
    for old, new in edits:
        if text.count(old) != 1:
            raise MutationDoesNotApply(f"{file}: the target occurs {text.count(old)} times, not once: update the mutation")
        hits = [i for i, cell in enumerate(cells) if cell.kind == "code" and old in cell.source]
        if len(hits) != 1:
            raise MutationDoesNotApply(f"{file}: the target is not in a code cell: update the mutation")
        cells[hits[0]] = replace(cells[hits[0]], source=cells[hits[0]].source.replace(old, new))
    return replace(section, cells=tuple(cells))


def manifest_sections(notebook: str) -> list[str]:
    """The `sections` entries of `notebook`'s notebook.toml, as written (included ones start with ../)."""
    return tomllib.loads((SOURCES / notebook / "notebook.toml").read_text(encoding="utf-8"))["sections"]


def bilingual_stand_ins(said: list) -> dict:
    """Strict `say`/`say_table` stand-ins for `run_notebook_code`: each call must give both languages
    (non-empty `en` and `zh` texts; headers of equal length, rows of string cells that fit them). They
    record into `said` ({"en", "zh"} for a sentence, {"table": headers, "rows": rows} for a table) and
    print the English text."""
    def say(**texts):
        assert set(texts) == {"en", "zh"} and all(isinstance(t, str) and t for t in texts.values()), texts
        said.append(texts)
        print(texts["en"])

    def say_table(rows, **headers):
        assert set(headers) == {"en", "zh"} and len(headers["en"]) == len(headers["zh"]), headers
        assert all(len(row) == len(headers["en"]) and all(isinstance(c, str) for c in row) for row in rows), rows
        said.append({"table": headers, "rows": rows})
        print(headers["en"], rows)

    return {"say": say, "say_table": say_table}


def _literal(value) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


def run_notebook_code(notebook: str, sections: int | None = None, lang: str = "en", until: str | None = None,
                      edits: dict[str, list[tuple[str, str]]] | None = None, **overrides) -> dict:
    """Exec the code cells in one namespace (prelude first, `overrides` after the parameters cell).

    `until` (a section file name, such as "07_gelu_tolerance.py") stops after that file's last code cell;
    `edits` mutates section files' code as in `code_cells`.
    Pass OUTPUT_DIR (a tmp_path) among the overrides when the cells write files. `lang=None` runs
    like the build's single execution: `say` then prints every language. Overrides that are not
    literals (a stand-in function, say) cannot be written into a cell: they are put into the
    namespace right after the prelude and again right after the parameters cell.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    literals = {name: value for name, value in overrides.items() if _literal(value)}
    objects = {name: value for name, value in overrides.items() if name not in literals}
    cells = code_cells(notebook, sections, lang, edits, **literals)
    if until is not None:
        cells = cells[:max(i for i, (name, _) in enumerate(cells) if name == until) + 1]
    namespace: dict = {"__name__": "__notebook__"}
    for name, cell in cells:
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        if name == PRELUDE_NAME or "parameters" in cell.metadata.get("tags", []):
            namespace.update(objects)
    return namespace


def exec_sections(namespace: dict, notebook: str, *files: str) -> dict:
    """Exec into `namespace`, in notebook order, the code cells of the section files named `files`
    ("prelude.py" for the prelude): to run a section again, or alone, in a namespace the test prepared."""
    cells = [(name, cell) for name, cell in code_cells(notebook) if name in files]
    assert {name for name, _ in cells} == set(files), f"no code cells for {set(files) - {name for name, _ in cells}}"
    for name, cell in cells:
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
    return namespace
