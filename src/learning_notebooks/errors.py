"""Every error the builder reports: one line each (`str(err)`), naming the file and line when there is one.

Each carries `exit_code` (what the command exits with), `intact` and `built`: `intact` is True only
once the builder has checked, after the failure, that every notebook's files under build/ and
outputs/ are either as they were before the build or (the notebooks named in `built`) the whole new
build (`build.build_all` sets both; nothing else may claim it).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path


class BuildError(Exception):
    """Base class. `exit_code`: 1 (a run or a write failed), 2 (bad input, nothing has run)."""

    exit_code: int = 1
    intact: bool = False  # checked by the builder after the failure, never assumed
    built: tuple[str, ...] = ()  # notebooks whose whole new build was in place before the failure

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class OptionError(BuildError):
    """A command-line value out of range (`--timeout -5`, `--jobs 0`, `--lang fr`, ...)."""

    exit_code = 2


class SourceError(BuildError):
    """Bad input (manifest, cell header, pairing, placeholder, unknown target): nothing has executed."""

    exit_code = 2

    def __init__(self, message: str, file: Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.file, self.line = file, line

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        return f"{where}{self.message}"


@dataclass(eq=False)
class CellFailed(BuildError):
    """A cell raised, timed out, printed too much or killed its kernel. Fields mirror nbclient's
    CellExecutionError; `file:line` is the statement in the section file."""

    notebook: str
    section: str
    file: Path
    line: int
    ename: str
    evalue: str
    traceback: str = ""
    called_from: str = ""  # "file:line" of the cell's statement when the error was raised deeper

    def __str__(self) -> str:
        via = f", called from {self.called_from}" if self.called_from else ""
        return (
            f"{self.file}:{self.line}: {self.ename}: {self.evalue} "
            f"(notebook {self.notebook}, section {self.section}{via})"
        )


class KernelFailed(BuildError):
    """The kernel did not start or stopped answering."""


class UnsafeOutput(BuildError):
    """A run left a symlink, a special file or a file name that is not UTF-8 in its working folder."""


class ProjectTouched(BuildError):
    """A cell created, changed or removed something in the project tree."""


class WriteFailed(BuildError):
    """Staging or swapping the new build failed (a full disk, a target that cannot be replaced)."""


class CodeDrift(BuildError):
    """Outputs were about to be embedded into code other than the code that produced them."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: the build stops its kernels and removes what it staged."""

    intact: bool = False  # as BuildError's
    built: tuple[str, ...] = ()

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
