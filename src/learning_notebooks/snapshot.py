"""Notice a notebook's run touching the project: snapshot the tree before executing, compare after.

A cell runs with the builder's rights, so it could write into notebooks_src/, build/, outputs/ or
the project folder itself. The builder cannot prevent that without a sandbox, but it can refuse a
build whose cells did it. Content is compared by hash (never by modification time).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from .errors import BuildError
from .layout import BUILD_DIR, LOCK_FILE, OUTPUTS_DIR


class ProjectTouched(BuildError):
    """A cell created, changed or removed something in the project tree."""


def _entry(path: Path) -> str:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return "symlink:" + os.readlink(path)
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return "special"


def _walk(folder: Path, into: dict[str, str]) -> None:
    if not folder.is_dir() or folder.is_symlink():
        return
    for parent, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(parent, name)
            into[str(path)] = _entry(path)


def snapshot(root: Path, out: Path) -> dict[str, str]:
    """Path -> kind and content hash, for notebooks_src/, build/ and outputs/ (below `out`), and
    the entries directly in `root` and `out` (not below them: .venv and .git are left alone)."""
    entries: dict[str, str] = {}
    for top in dict.fromkeys([root, out]):
        if top.is_dir():
            for path in top.iterdir():
                if path.name != LOCK_FILE:
                    entries[str(path)] = _entry(path) if not path.is_dir() else "folder"
    for folder in (root / "notebooks_src", out / BUILD_DIR, out / OUTPUTS_DIR):
        _walk(folder, entries)
    return entries


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """`created PATH`, `changed PATH`, `removed PATH` for each difference, sorted by path."""
    found = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            found.append(f"created {path}")
        elif path not in after:
            found.append(f"removed {path}")
        elif before[path] != after[path]:
            found.append(f"changed {path}")
    return found


def check_untouched(before: dict[str, str], root: Path, out: Path) -> None:
    """Raise ProjectTouched (exit 1) listing what a run changed in the project tree."""
    found = changes(before, snapshot(root, out))
    if found:
        shown = "; ".join(found[:10]) + (f"; and {len(found) - 10} more" if len(found) > 10 else "")
        raise ProjectTouched(
            f"the project tree changed while notebooks ran (cells must write only into their working "
            f"folder; do not edit the project during a run): {shown}; nothing was built"
        )
