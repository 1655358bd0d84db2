"""The run record: what decides whether a notebook's outputs are still valid, and whether they are intact.

It lives in each built notebook's metadata, so the built notebook itself is the cache. It has three
parts, kept apart because they answer different questions:

- `author_key`: what the author controls (code, parameter overrides, builder version). When it
  changed, the outputs belong to other code and are never reused.
- `environment`: the versions of Python and of the imported packages. When only these differ, the
  outputs are still those of this code: a prose-only build keeps them and says which versions
  differ; `--execute` runs the notebook again.
- `outputs_digest`: a hash of the outputs embedded in the notebook, so outputs edited by hand are
  detected instead of reused, spread to other languages or passed by `--check`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata


def recorded_parameters(parameters: Mapping[str, object]) -> dict[str, str]:
    """The parameter overrides as the run record holds them: name -> repr(value), sorted by name."""
    return {name: repr(value) for name, value in sorted(parameters.items())}


def author_key(code: Iterable[str], parameters: Mapping[str, object], builder_version: str) -> str:
    """Hash of what the author controls: the code cells in execution order (prose is absent, so a
    prose edit keeps the outputs), the parameter overrides, and the builder version."""
    payload = {
        "code": list(code),
        "parameters": recorded_parameters(parameters),
        "builder": builder_version,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def environment(packages: Mapping[str, str], python: str) -> dict:
    """The environment part of the run record: {"python": "3.11", "packages": {dist: version}}."""
    return {"python": python, "packages": dict(sorted(packages.items()))}


def environment_changes(recorded: Mapping, current: Mapping) -> list[str]:
    """What differs between two `environment` records, e.g. ["torch 2.13.0 → 2.13.1"]."""
    changes = []
    if recorded.get("python") != current.get("python"):
        changes.append(f"python {recorded.get('python', 'unknown')} → {current.get('python')}")
    old, new = recorded.get("packages", {}), current.get("packages", {})
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            changes.append(f"{name} {old.get(name, 'not recorded')} → {new.get(name, 'not imported')}")
    return changes


def _text(value: object) -> object:
    """nbformat stores multi-line strings as lists of lines on disk and as strings in memory."""
    return "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def _normal(output: Mapping) -> dict:
    normal = {key: _text(value) for key, value in output.items()}
    if isinstance(output.get("data"), Mapping):
        normal["data"] = {mime: _text(value) for mime, value in output["data"].items()}
    return normal


def outputs_digest(cells: Iterable[Mapping]) -> str:
    """Hash of the outputs and execution counts of the code cells among `cells`, in order.

    The same for every language of one build (they embed the same outputs), and the same whether
    the notebook was just executed or read back from disk.
    """
    record = [
        {"execution_count": cell.get("execution_count"), "outputs": [_normal(o) for o in cell.get("outputs", [])]}
        for cell in cells
        if cell.get("cell_type") == "code"
    ]
    blob = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def imported_modules(code: Iterable[str]) -> set[str]:
    """Top-level names of the absolute imports in `code` (cells that do not parse are skipped)."""
    names = set()
    for source in code:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def package_versions(modules: Iterable[str]) -> dict[str, str]:
    """Installed version of the distribution behind each module; the standard library is left out.

    A module that is not installed maps to "missing", so installing it later changes the key.
    """
    providers = metadata.packages_distributions()
    versions = {}
    for module in sorted(set(modules)):
        if module in sys.stdlib_module_names:
            continue
        for dist in providers.get(module, []) or [module]:
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                versions[dist] = "missing"
    return versions


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
