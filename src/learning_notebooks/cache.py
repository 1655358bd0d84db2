"""The execution-cache key: what decides whether a notebook's outputs are still valid.

The key lives in each built notebook's metadata, so the built notebook itself is the cache:
when the key of the current sources equals the stored one, its outputs are reused.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata


def execution_key(
    code: Iterable[str],
    parameters: Mapping[str, object],
    builder_version: str,
    packages: Mapping[str, str],
    python: str,
) -> str:
    """Hash of everything that affects a notebook's outputs, and nothing else.

    code: the code cells in execution order (prose is deliberately absent, so a prose edit
    keeps the outputs); parameters: overrides injected after the parameters cell;
    builder_version: learning_notebooks.__version__; packages: distribution -> version for
    every package the code imports; python: "major.minor" of the kernel's Python.
    """
    payload = {
        "code": list(code),
        "parameters": {name: repr(value) for name, value in sorted(parameters.items())},
        "builder": builder_version,
        "packages": dict(sorted(packages.items())),
        "python": python,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
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
