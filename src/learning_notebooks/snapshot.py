"""Notice a notebook's run touching the project: snapshot the tree before executing, compare after.

A cell runs with the builder's rights, so it could write anywhere the builder can. The builder
cannot prevent that without a sandbox, but it refuses a build whose cells changed the project:

- every file and folder below the project folder (`root`), except what git ignores there (`.venv/`,
  caches: asked with `git ls-files --others --ignored --exclude-standard --directory`; when git or a
  repository is missing, nothing is ignored) and the lock file;
- of the `.git` folder, only `config`, `hooks/` and `info/` (what can run code or change what git
  ignores); objects, refs, the index and logs change with every git command and are left out;
- build/ and outputs/ below `out` and the entries directly in it, when `out` is elsewhere.

Content is compared by hash (never by modification time).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from .errors import ProjectTouched
from .layout import BUILD_DIR, LOCK_FILE, OUTPUTS_DIR

GIT_KEPT = ("config", "hooks", "info")  # the parts of .git that are compared


def _entry(path: Path) -> str:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return "symlink:" + os.readlink(path)
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return "special"


def ignored(root: Path) -> set[Path]:
    """The files and folders git ignores below `root` (empty when git or the repository is missing)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
            capture_output=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {root / os.fsdecode(name).rstrip("/") for name in listed.split(b"\0") if name}


def _walk(folder: Path, into: dict[str, str], skip: set[Path], git_dir: Path | None = None) -> None:
    if folder in skip or not folder.is_dir() or folder.is_symlink():
        return
    for parent, dirs, names in os.walk(folder):
        here = Path(parent)
        if here == git_dir:
            dirs[:], names = [d for d in dirs if d in GIT_KEPT], [n for n in names if n in GIT_KEPT]
        dirs[:] = [d for d in dirs if here / d not in skip]
        for name in dirs + names:
            if here / name not in skip:
                into[str(here / name)] = _entry(here / name)


def snapshot(root: Path, out: Path) -> dict[str, str]:
    """Path -> kind and content hash of everything compared (see the module's docstring)."""
    skip = ignored(root) | {root / LOCK_FILE, out / LOCK_FILE}
    entries: dict[str, str] = {}
    _walk(root, entries, skip, git_dir=root / ".git")
    if not out.is_relative_to(root):
        if out.is_dir():
            for path in out.iterdir():
                if path not in skip:
                    entries[str(path)] = "folder" if path.is_dir() and not path.is_symlink() else _entry(path)
        for folder in (out / BUILD_DIR, out / OUTPUTS_DIR):
            _walk(folder, entries, skip)
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
