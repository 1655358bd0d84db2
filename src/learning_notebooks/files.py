"""Writing files so that a reader never sees half of one and a failure keeps the last good copy."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbformat import NotebookNode


def notebook_bytes(notebook: NotebookNode) -> bytes:
    """Stable serialization: nbformat's sorted keys and one-space indent, UTF-8, final newline."""
    return (nbformat.writes(notebook, version=4) + "\n").encode("utf-8")


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates it private; a built file is for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_dir(target: Path, staged: Path) -> None:
    """Put the contents of `staged` at `target`, keeping the old `target` until the new one is in place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not any(staged.iterdir()):  # the notebook wrote nothing: no folder for it
        shutil.rmtree(target, ignore_errors=True)
        return
    incoming = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    try:
        shutil.copytree(staged, incoming, dirs_exist_ok=True)
        incoming.chmod(0o755)  # mkdtemp and copytree keep the temporary folder private; outputs are for everyone
        if target.exists():
            os.replace(target, old)
        os.replace(incoming, target)
    except BaseException:
        if old.exists() and not target.exists():
            os.replace(old, target)
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def digest_tree(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder`, by POSIX relative path, sorted."""
    if not folder.is_dir():
        return {}
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
