"""Exec the code cells of infra-benchmark/kv-cache-architectures in this process, in manifest order.

`notebook_code.run_notebook_code` gets the cells from the builder: the prelude (`say`, `say_table`),
the included sections of infra-benchmark/kv-cache, then this notebook's own sections.
"""

from __future__ import annotations

import tomllib

import os

from notebook_code import PRELUDE_NAME, SOURCES, code_cells

NOTEBOOK = "infra-benchmark/kv-cache-architectures"
MANIFEST = SOURCES / NOTEBOOK / "notebook.toml"


def manifest_sections() -> list[str]:
    return tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["sections"]


def run_arch_code(last: str | None = None, stand_ins: dict | None = None, **overrides) -> dict:
    """Exec the notebook's code cells, up to and including the section file `last` (all by default).

    `stand_ins` (names such as `say`) replace the prelude's definitions right after the prelude cell;
    `overrides` are parameter values, injected after the parameters cell as the builder does.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    sections = manifest_sections()
    count = None if last is None else [name.rsplit("/", 1)[-1] for name in sections].index(last) + 1
    namespace: dict = {"__name__": "__notebook__"}
    for name, cell in code_cells(NOTEBOOK, count, **overrides):
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        if name == PRELUDE_NAME and stand_ins:
            namespace.update(stand_ins)
    return namespace
