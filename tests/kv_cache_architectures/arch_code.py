"""Exec the code cells of infra-benchmark/kv-cache-architectures in this process, in manifest order.

`notebook_code.run_notebook_code` gets the cells from the builder: the prelude (`say`, `say_table`),
the included sections of infra-benchmark/kv-cache, then this notebook's own sections.
"""

from __future__ import annotations

import tomllib

from notebook_code import SOURCES, run_notebook_code

NOTEBOOK = "infra-benchmark/kv-cache-architectures"
MANIFEST = SOURCES / NOTEBOOK / "notebook.toml"


def manifest_sections() -> list[str]:
    return tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["sections"]


def run_arch_code(last: str | None = None, **overrides) -> dict:
    """Exec the notebook's code cells, up to and including the section file `last` (all by default)."""
    sections = manifest_sections()
    count = None if last is None else [name.rsplit("/", 1)[-1] for name in sections].index(last) + 1
    return run_notebook_code(NOTEBOOK, sections=count, **overrides)
