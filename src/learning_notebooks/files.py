"""Writing files so that a reader never sees half of one and a failure keeps the last good copy.

A `Transaction` stages every file of a build beside its target (same folder, so the same file
system), and only when all are staged swaps them in, with SIGINT and SIGTERM held back, rolling
back on any error: the tree holds either the whole old build or the whole new one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import signal
import stat as stat_module
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from .errors import BuildError
from .layout import LOCK_FILE, STAGING_MARK, is_staging, staging_path


class UnsafeOutput(BuildError):
    """A run left a symlink or a special file in its working folder (never followed or copied)."""


class WriteFailed(BuildError):
    """Staging or swapping the new build failed; the previous build is intact unless `intact` is False."""

    intact = True


def notebook_bytes(notebook: NotebookNode) -> bytes:
    """Stable serialization: nbformat's sorted keys and one-space indent, UTF-8, final newline."""
    return (nbformat.writes(notebook, version=4) + "\n").encode("utf-8")


def tree_files(folder: Path) -> list[Path]:
    """Every regular file below `folder`, sorted; symlinks and special files raise UnsafeOutput.

    Nothing is followed: a symlink a notebook leaves behind could point anywhere on the machine.
    """
    if not folder.is_dir() or folder.is_symlink():
        return []
    files, unsafe = [], []
    for parent, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(parent, name)
            mode = path.lstat().st_mode
            if stat_module.S_ISREG(mode):
                files.append(path)
            elif not stat_module.S_ISDIR(mode):
                unsafe.append(path.relative_to(folder).as_posix())
    if unsafe:
        kinds = ", ".join(unsafe[:5]) + (" ..." if len(unsafe) > 5 else "")
        raise UnsafeOutput(f"the run left symlinks or special files, which are not copied: {kinds}")
    return sorted(files)


def digest_tree(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder`, by POSIX relative path, sorted (symlinks refused)."""
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in tree_files(folder)
    }


def _replace(source: Path, target: Path) -> None:
    """Rename `source` over `target` (the one place that swaps; a test may inject a failure here)."""
    os.replace(source, target)


def _write(path: Path, data: bytes) -> None:
    """Create `path` with `data`, flushed to disk (the one place that writes a file's bytes)."""
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, 0o644)


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM back while a swap of renames completes; deliver them after.

    Python runs signal handlers in the main thread whichever thread the signal lands on, so the
    handlers themselves are swapped for one that only records the signal (main thread only).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@dataclass
class Transaction:
    """Files and folders staged beside their targets, swapped in together by `commit`, or not at all.

    Use as a context manager: leaving it without a commit removes everything staged.
    """

    token: str = field(default_factory=lambda: f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    staged: list[tuple[Path, Path | None]] = field(default_factory=list)  # (target, staged or None: remove)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    def write(self, target: Path, data: bytes) -> None:
        """Stage `data` as the new content of the file `target`."""
        if target.is_dir() and not target.is_symlink():
            raise WriteFailed(f"{target}: is a directory, cannot replace it with a file")
        staged = staging_path(target, self.token)
        self.staged.append((target, staged))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _write(staged, data)
        except OSError as err:
            raise WriteFailed(f"{target}: cannot write: {err.strerror or err}") from None

    def copy_tree(self, target: Path, files: list[Path], source: Path) -> None:
        """Stage the folder `target` holding `files` (regular files below `source`); none: remove it."""
        if not files:
            self.staged.append((target, None))
            return
        if target.exists() and not target.is_dir():
            raise WriteFailed(f"{target}: is a file, cannot replace it with a folder")
        staged = staging_path(target, self.token)
        self.staged.append((target, staged))
        try:
            staged.mkdir(parents=True)
            for path in files:
                destination = staged / path.relative_to(source)
                destination.parent.mkdir(parents=True, exist_ok=True)
                _write(destination, path.read_bytes())
            for folder in [staged, *(p for p in staged.rglob("*") if p.is_dir())]:
                folder.chmod(0o755)  # outputs are for everyone
        except OSError as err:
            raise WriteFailed(f"{target}: cannot write: {err.strerror or err}") from None

    def commit(self) -> None:
        """Swap every staged path in; on any error put every old one back and raise WriteFailed."""
        done: list[tuple[Path, Path | None]] = []  # (target, backup of the old one or None)
        with signals_held():
            try:
                for target, staged in self.staged:
                    backup = staging_path(target, self.token + "-old")
                    had = target.exists() or target.is_symlink()
                    if had:
                        _replace(target, backup)
                    done.append((target, backup if had else None))
                    if staged is not None:
                        _replace(staged, target)
            except OSError as err:
                stuck = []  # old files the rollback could not put back (kept under their backup name)
                for target, backup in reversed(done):
                    try:
                        if target.exists() or target.is_symlink():
                            _remove(target)
                        if backup is not None:
                            _replace(backup, target)
                    except OSError:
                        stuck.append(backup if backup is not None else target)
                message = f"{err.filename or 'build'}: cannot replace: {err.strerror or err}"
                if stuck:
                    message += f"; the rollback failed too: {', '.join(map(str, stuck))} could not be put back"
                failed = WriteFailed(message)
                failed.intact = not stuck
                raise failed from None
            finally:
                self.discard()
            for _, backup in done:
                if backup is not None:
                    _remove(backup)
        self.staged = []

    def discard(self) -> None:
        for _, staged in self.staged:
            if staged is not None:
                _remove(staged)


def leftovers(folders: list[Path]) -> list[Path]:
    """Staging files and folders (of an interrupted or killed build) below `folders`."""
    found = []
    for folder in folders:
        if folder.is_dir():
            for parent, dirs, names in os.walk(folder):
                for name in sorted(dirs + names):
                    if is_staging(Path(name)):
                        found.append(Path(parent, name))
                dirs[:] = [d for d in dirs if not is_staging(Path(d))]
    return sorted(found)


def remove_leftovers(folders: list[Path]) -> list[Path]:
    """Remove what `leftovers` finds (call it holding the lock: then no build owns them).

    A backup of an old file whose target is missing (a build killed mid-swap) is put back instead.
    """
    found = leftovers(folders)
    for path in found:
        target = path.parent / path.name[1:].split(STAGING_MARK)[0]
        if path.name.endswith("-old") and not (target.exists() or target.is_symlink()):
            os.replace(path, target)
        else:
            _remove(path)
    return found


@contextlib.contextmanager
def project_lock(out: Path, wait, shared: bool = False):
    """Hold `out/.learning-notebooks.lock` so two builds of one tree never interleave.

    When another build holds it, `wait(path)` is called once (to say so), then this blocks until it is
    free. The file is removed on release, so the tree is left as it was; a holder checks that the
    file it locked is still the one at `path` (else it was released and removed meanwhile: retry).
    A --check (`shared`) of a tree it cannot write proceeds without the lock.
    """
    path = out / LOCK_FILE
    waited = False
    while True:
        try:
            out.mkdir(parents=True, exist_ok=True)
            handle = open(path, "a+")
        except OSError:
            if shared:
                yield
                return
            raise WriteFailed(f"{path}: cannot create the lock file") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited:
                wait(path)
                waited = True
            fcntl.flock(handle, fcntl.LOCK_EX)
        except BaseException:
            handle.close()
            raise
        try:
            same = os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()
    try:
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        handle.close()  # releases the lock
