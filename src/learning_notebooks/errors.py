"""Errors the builder reports: one clear line each, naming the file and line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class BuildError(Exception):
    """Base class: `exit_code` is what the command exits with."""

    exit_code = 1


@dataclass
class SourceError(BuildError):
    """Bad input (manifest, cell header, pairing, unknown target): nothing has executed."""

    message: str
    file: Path | None = None
    line: int | None = None
    exit_code = 2

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        return f"{where}{self.message}"


@dataclass
class CellFailed(BuildError):
    """A cell raised or timed out. Fields mirror nbclient's CellExecutionError."""

    notebook: str
    section: str
    file: Path
    line: int
    ename: str
    evalue: str
    traceback: str = ""
    called_from: str = ""  # "file:line" of the cell's statement when the error was raised deeper
    exit_code = 1

    def __str__(self) -> str:
        via = f", called from {self.called_from}" if self.called_from else ""
        return (
            f"{self.file}:{self.line}: {self.ename}: {self.evalue} "
            f"(notebook {self.notebook}, section {self.section}{via})"
        )
