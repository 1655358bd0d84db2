"""Exec the code cells of infra-benchmark/kv-cache-architectures in this process, in manifest order.

The manifest includes two sections of infra-benchmark/kv-cache (`../kv-cache/03_masks.py`,
`../kv-cache/05_decoder.py`). Until those sections are shareable (they used names of the first
notebook's section 2, such as `IDS`), the first notebook's sections 1-5 are exec'ed first so those
names exist; afterwards only the manifest's files run. `say`/`say_table` come from the builder's
prelude when `notebook_code` provides one, else from the plain stand-ins below.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import jupytext

import notebook_code

NOTEBOOK = "infra-benchmark/kv-cache-architectures"
FOLDER = notebook_code.SOURCES / NOTEBOOK


def manifest_sections() -> list[Path]:
    manifest = tomllib.loads((FOLDER / "notebook.toml").read_text(encoding="utf-8"))
    return [(FOLDER / name).resolve() for name in manifest["sections"]]


def shared_sections_ready() -> bool:
    """True once kv-cache's decoder section no longer needs names of kv-cache's section 2."""
    return "{{section}}" in (notebook_code.SOURCES / "infra-benchmark/kv-cache/05_decoder.py").read_text(encoding="utf-8")


def stand_ins(namespace: dict) -> None:
    namespace.setdefault("LANG", "en")
    namespace.setdefault("say", lambda **text: print(text.get("en")))
    namespace.setdefault("say_table", lambda rows, **headers: print(headers.get("en"), rows))


def prelude(namespace: dict) -> None:
    """The builder's prelude if this checkout's notebook_code has one, else stand-ins."""
    run_prelude = getattr(notebook_code, "run_prelude", None)
    if run_prelude is not None:
        run_prelude(namespace)
    stand_ins(namespace)


def exec_file(path: Path, namespace: dict, overrides: dict, stop_after: str | None = None) -> None:
    for cell in jupytext.read(path).cells:
        if cell.cell_type != "code":
            continue
        exec(compile(cell.source, str(path.name), "exec", dont_inherit=True), namespace)
        if "parameters" in cell.metadata.get("tags", []):
            namespace.update(overrides)


def run_arch_code(last: str | None = None, **overrides) -> dict:
    """Exec the notebook's code cells (up to and including section file `last`) with `overrides`."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__notebook__"}
    prelude(namespace)
    sections = manifest_sections()
    if not shared_sections_ready():
        first = notebook_code.run_notebook_code("infra-benchmark/kv-cache", sections=5, **overrides)
        namespace.update({k: v for k, v in first.items() if k not in ("say", "say_table", "LANG")})
        sections = [p for p in sections if p.parent == FOLDER.resolve()]
    for path in sections:
        exec_file(path, namespace, overrides)
        if last is not None and path.name == last:
            break
    return namespace
