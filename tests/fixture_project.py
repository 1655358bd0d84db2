"""A throwaway copy of the small fixture project (tests/fixtures/project), and the real command run on it."""

from __future__ import annotations

import contextlib
import io
import shutil
from dataclasses import dataclass
from pathlib import Path

from learning_notebooks.cli import main
from learning_notebooks.layout import built_path, outputs_dir

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "project"


@dataclass
class Run:
    code: int
    log: str


@dataclass
class Project:
    root: Path

    @property
    def notebook(self) -> Path:
        return self.root / "notebooks_src" / "demo" / "hello"

    def built(self, lang: str) -> Path:
        return built_path(self.root, "demo", "hello", lang)

    @property
    def outputs(self) -> Path:
        return outputs_dir(self.root, "demo", "hello")

    def build(self, *args: str) -> Run:
        """Run build-learning-notebooks in-process against this project."""
        log = io.StringIO()
        with contextlib.redirect_stderr(log):
            code = main(["--root", str(self.root), *args])
        return Run(code, log.getvalue())

    def edit(self, name: str, old: str, new: str) -> None:
        path = self.notebook / name
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {name}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    def append(self, name: str, text: str) -> None:
        path = self.notebook / name
        path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")
