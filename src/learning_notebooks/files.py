"""Writing files so that a reader never sees half of one and a failure keeps the last good copy.

A `Transaction` stages every file of a notebook beside its target (same folder, so the same file
system). Only when all are staged does it write a journal (the targets, and whether each had an old
version), then swap them in with SIGINT and SIGTERM held back, rolling back on any error, and remove
the journal: that removal is the commit point. A build killed outright (SIGKILL, power loss) leaves
the journal, and the next build (`recover`) rolls the swap back, so every notebook holds one whole
run: the old one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat as stat_module
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import signals
from .errors import UnsafeOutput, WriteFailed
from .layout import BUILD_DIR, JOURNAL_NAME, LOCK_FILE, OUTPUTS_DIR, is_staging, staging_path


def notebook_bytes(notebook: NotebookNode) -> bytes:
    """Stable serialization: nbformat's sorted keys and one-space indent, UTF-8, final newline."""
    return (nbformat.writes(notebook, version=4) + "\n").encode("utf-8")


def tree_files(folder: Path) -> list[Path]:
    """Every regular file below `folder`, sorted. Symlinks, special files and names that are not
    UTF-8 raise UnsafeOutput: nothing is followed (a symlink could point anywhere on the machine),
    and every name must be one a notebook's record, git and a reader's file system can hold."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    files, unsafe = [], []
    for parent, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(parent, name)
            relative = path.relative_to(folder).as_posix()
            try:
                relative.encode("utf-8")
            except UnicodeEncodeError:
                unsafe.append(f"{relative.encode('utf-8', 'surrogateescape')!r} (a name that is not UTF-8)")
                continue
            mode = path.lstat().st_mode
            if stat_module.S_ISREG(mode):
                files.append(path)
            elif not stat_module.S_ISDIR(mode):
                unsafe.append(relative)
    if unsafe:
        kinds = ", ".join(unsafe[:5]) + (" ..." if len(unsafe) > 5 else "")
        raise UnsafeOutput(f"the run left files that are not copied (symlinks, special files or names that "
                           f"are not UTF-8): {kinds}")
    return sorted(files)


def digest_tree(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder`, by POSIX relative path, sorted (see tree_files)."""
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


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


@dataclass
class Transaction:
    """Files and folders staged beside their targets below `out`, swapped in together by `commit`,
    or not at all. Use as a context manager: leaving it without a commit removes everything staged."""

    out: Path
    token: str = field(default_factory=lambda: f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    staged: list[tuple[Path, Path | None]] = field(default_factory=list)  # (target, staged or None: remove)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    @property
    def journal(self) -> Path:
        return self.out / BUILD_DIR / f"{JOURNAL_NAME}{self.token}"

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
        entries = [(target, _exists(target)) for target, _ in self.staged]
        done: list[tuple[Path, Path | None]] = []  # (target, backup of the old one or None)
        with signals.held():
            try:
                self._write_journal(entries)
                for (target, staged), (_, had) in zip(self.staged, entries):
                    backup = staging_path(target, self.token + "-old")
                    if had:
                        _replace(target, backup)
                    done.append((target, backup if had else None))
                    if staged is not None:
                        _replace(staged, target)
            except OSError as err:
                stuck = _roll_back(done)
                message = f"{err.filename or 'build'}: cannot replace: {err.strerror or err}"
                if stuck:
                    message += (f"; the rollback failed too: {', '.join(map(str, stuck))} could not be put back "
                                "(the next build tries again)")
                else:
                    _remove(self.journal)
                raise WriteFailed(message) from None
            finally:
                _remove(staging_path(self.journal, "new"))
                self.discard()
            _remove(self.journal)  # the commit point
            for _, backup in done:
                if backup is not None:
                    _remove(backup)
        self.staged = []

    def _write_journal(self, entries: list[tuple[Path, bool]]) -> None:
        """The targets about to be swapped, and whether each has an old version (for `recover`)."""
        record = {"token": self.token, "targets": [[str(t.relative_to(self.out)), had] for t, had in entries]}
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        _write(staging_path(self.journal, "new"), json.dumps(record).encode("utf-8"))
        _replace(staging_path(self.journal, "new"), self.journal)

    def discard(self) -> None:
        for _, staged in self.staged:
            if staged is not None:
                _remove(staged)


def _roll_back(done: list[tuple[Path, Path | None]]) -> list[Path]:
    """Put back the old version of each swapped target (remove the new one where there was none);
    returns what could not be put back."""
    stuck = []
    for target, backup in reversed(done):
        try:
            if backup is None or _exists(backup):
                if _exists(target):
                    _remove(target)
                if backup is not None:
                    _replace(backup, target)
        except OSError:
            stuck.append(backup if backup is not None else target)
    return stuck


def leftovers(out: Path) -> list[Path]:
    """What an interrupted or killed build left: staging files and folders beside the targets the
    builder stages (build/<series>/, outputs/<series>/) and swap journals (build/). A run's own files
    inside outputs/<series>/<notebook>/ are never among them, whatever their names."""
    found = []
    for top in (out / BUILD_DIR, out / OUTPUTS_DIR):
        for folder in [top, *(sorted(p for p in top.iterdir() if p.is_dir() and not p.is_symlink())
                               if top.is_dir() else [])]:
            if folder.is_dir():
                found += [p for p in sorted(folder.iterdir()) if is_staging(p) or p.name.startswith(JOURNAL_NAME)]
    return found


def recover(out: Path) -> list[str]:
    """Undo what a killed build left (call it holding the lock): every unfinished swap is rolled
    back, then the staging leftovers are removed. Returns one line per thing done."""
    done = []
    for journal in sorted((out / BUILD_DIR).glob(f"{JOURNAL_NAME}*")):
        if is_staging(journal):
            continue  # a journal that was never complete: no swap began
        try:
            record = json.loads(journal.read_text(encoding="utf-8"))
            token, targets = record["token"], [(out / path, had) for path, had in record["targets"]]
        except (OSError, ValueError, KeyError, TypeError):
            raise WriteFailed(f"{journal}: an unreadable swap journal of an interrupted build; "
                              "remove it and rebuild with --execute --force") from None
        stuck = _roll_back([(t, staging_path(t, token + "-old") if had else None) for t, had in targets])
        if stuck:
            raise WriteFailed(f"{journal}: cannot roll back an interrupted swap ({', '.join(map(str, stuck))})")
        _remove(journal)
        done.append(f"rolled back an interrupted swap: {', '.join(str(t) for t, _ in targets)}")
    for path in leftovers(out):
        _remove(path)
        done.append(f"removed a leftover of an interrupted build: {path}")
    return done


@contextlib.contextmanager
def project_lock(out: Path, wait, shared: bool = False):
    """Hold `out/.learning-notebooks.lock` so two builds of one tree never interleave.

    When another build holds it, `wait(path)` is called once (to say so), then this blocks until it is
    free. The file is removed on release, so the tree is left as it was; a holder checks that the
    file it locked is still the one at `path` (else it was released and removed meanwhile: retry).
    `shared` (--check) creates nothing: it waits for a build that holds the lock, if one does.
    """
    path = out / LOCK_FILE
    waited = False
    while True:
        try:
            if shared:
                handle = open(path, "r")
            else:
                out.mkdir(parents=True, exist_ok=True)
                handle = open(path, "a+")
        except OSError:
            if shared:  # no build holds it (or the tree cannot be read: the check says so)
                yield
                return
            raise WriteFailed(f"{path}: cannot create the lock file") from None
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited:
                wait(path)
                waited = True
            fcntl.flock(handle, mode)
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
        if not shared:
            handle.write(f"{os.getpid()}\n")
            handle.flush()
        yield
    finally:
        if not shared:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        handle.close()  # releases the lock
