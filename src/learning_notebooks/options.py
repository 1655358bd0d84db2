"""What to build and how: the one home of every option's type, default and valid range."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .errors import OptionError

SOURCES_DIR = "notebooks_src"


@dataclass
class BuildOptions:
    """Sources under `root/notebooks_src`, results (build/, outputs/) under `out` (default: `root`).

    `timeout` (seconds per cell) and `max_output_mb` (a notebook's embedded outputs) are None for
    no limit; `languages` empty means every configured language; `only` empty means every notebook.
    """

    root: Path
    out: Path | None = None
    only: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()
    execute: bool = False  # run the notebooks whose recorded run is not valid
    quick: bool = False  # apply each manifest's [quick] overrides
    force: bool = False  # with execute: run even when the recorded run is valid
    strict_env: bool = False  # --check: an environment that differs from the recorded run is a problem
    timeout: int | None = 600
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    max_output_mb: float | None = 2.0
    log: TextIO = field(default_factory=lambda: sys.stderr)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.out = Path(self.out).resolve() if self.out is not None else self.root
        self.only, self.languages = tuple(self.only), tuple(self.languages)
        if self.timeout is not None and not (isinstance(self.timeout, int) and self.timeout > 0):
            raise OptionError(f"--timeout must be a whole number of seconds above 0 (0: no limit), not {self.timeout}")
        if self.jobs < 1:
            raise OptionError(f"--jobs must be 1 or more, not {self.jobs}")
        if self.max_output_mb is not None and not (
            math.isfinite(self.max_output_mb) and self.max_output_mb > 0 and self.max_output_bytes >= 1
        ):
            raise OptionError(f"--max-output-mb must be above 0 and at least one byte (0: no limit), "
                              f"not {self.max_output_mb}")

    @property
    def src_root(self) -> Path:
        return self.root / SOURCES_DIR

    @property
    def max_output_bytes(self) -> int | None:
        return None if self.max_output_mb is None else int(self.max_output_mb * 2**20)


def default(name: str) -> object:
    """The default of the option `name`, as BuildOptions defines it (for --help)."""
    spec = next(f for f in dataclasses.fields(BuildOptions) if f.name == name)
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default
