"""A throwaway copy of the small fixture project (tests/fixtures/project), the real command run on it,
and what the tests read back from its build."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import nbformat

from learning_notebooks.cli import main
from learning_notebooks.layout import STAGING_MARK, built_path, outputs_dir

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "project"
GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden"
CELL = "\n# %%\n"  # appended to 02_compute.py: a new code cell (see `Project.line`)


@dataclass
class Run:
    code: int
    log: str

    @property
    def last(self) -> str:
        return self.log.strip().splitlines()[-1]


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

    # -- acting on it --

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

    def append_cell(self, code: str) -> None:
        """A new code cell at the end of 02_compute.py; its row N is at `self.line(N)`."""
        self.append("02_compute.py", f"{CELL}{code}")

    def line(self, row: int) -> str:
        """`.../02_compute.py:N` for row `row` (1-based) of the last cell added with append_cell."""
        text = (self.notebook / "02_compute.py").read_text(encoding="utf-8")
        marker = text[: text.rindex(CELL)].count("\n") + 2  # the appended `# %%` line
        return f"{self.notebook / '02_compute.py'}:{marker + row}"

    def add_section(self, name: str, text: str) -> None:
        (self.notebook / name).write_text(text, encoding="utf-8")
        self.edit("notebook.toml", '"02_compute.py"]', f'"02_compute.py", "{name}"]')

    # -- reading its build back --

    def read(self, lang: str):
        return nbformat.read(self.built(lang), as_version=4)

    def meta(self, lang: str) -> dict:
        return self.read(lang).metadata["learning_notebooks"]

    def outputs_text(self, lang: str) -> list[str]:
        """The text of every stream output."""
        return ["".join(o.get("text", "")) for c in self.read(lang).cells if c.cell_type == "code" for o in c.outputs]

    def displayed(self, lang: str) -> list[tuple[str | None, str]]:
        """(lang tag, text/markdown) of every display output."""
        return [(o.get("metadata", {}).get("lang"), o.data["text/markdown"])
                for c in self.read(lang).cells if c.cell_type == "code"
                for o in c.outputs if "text/markdown" in o.get("data", {})]

    def code_text(self, lang: str) -> str:
        return "\n".join(c.source for c in self.read(lang).cells if c.cell_type == "code")

    def prose(self, lang: str) -> list[str]:
        return [c.source for c in self.read(lang).cells[1:] if c.cell_type == "markdown"]

    def tree(self) -> dict:
        """Every file under build/ and outputs/, with its bytes."""
        found = {}
        for top in ("build", "outputs"):
            for path in sorted((self.root / top).rglob("*")):
                found[path] = path.read_bytes() if path.is_file() else "folder"
        return found

    def leftovers(self) -> list[Path]:
        """Staging files, swap journals and lock files anywhere in the project."""
        return [p for p in self.root.rglob("*")
                if STAGING_MARK in p.name or p.name.startswith(".swap-journal") or p.name.endswith(".lock")]
