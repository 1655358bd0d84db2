"""Where things live: the one home for the paths of built notebooks and outputs, and the metadata key.

Used by the builder, the tests and scripts/build-browser-site.py, so the layout is written down once.
"""

from __future__ import annotations

from pathlib import Path

METADATA_KEY = "learning_notebooks"  # the built notebook's metadata entry holding the run record
BUILD_DIR = "build"
OUTPUTS_DIR = "outputs"
LOCK_FILE = ".learning-notebooks.lock"  # beside build/ and outputs/, held while a build runs
STAGING_MARK = ".staging-"  # in the name of every file or folder staged beside its target
JOURNAL_NAME = ".swap-journal-"  # build/.swap-journal-<token>: a swap in progress (files.Transaction)


def built_name(name: str, lang: str) -> str:
    """File name of a built notebook, language included so two downloads never collide."""
    return f"{name}.{lang}.ipynb"


def built_path(out: Path, series: str, name: str, lang: str) -> Path:
    """`out/build/<series>/<name>.<lang>.ipynb`."""
    return out / BUILD_DIR / series / built_name(name, lang)


def outputs_dir(out: Path, series: str, name: str) -> Path:
    """`out/outputs/<series>/<name>/`: the files the notebook's run wrote."""
    return out / OUTPUTS_DIR / series / name


def staging_path(target: Path, token: str) -> Path:
    """A hidden name beside `target` (same folder, so the same file system) for staging it."""
    return target.parent / f".{target.name}{STAGING_MARK}{token}"


def is_staging(path: Path) -> bool:
    return path.name.startswith(".") and STAGING_MARK in path.name
