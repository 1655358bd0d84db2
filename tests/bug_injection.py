"""One harness for the bugs injected into every notebook's own code.

A bug is a careless edit of a section file's text: `bug("05_decoder.py", (old, new))` replaces `old`
(which must occur exactly once in that file, inside a code cell) with `new`; more (old, new) pairs may
follow, for a bug that edits several places of the file. The notebook must then stop
by its own checks: an AssertionError raised by (or through) a statement of one of its section files (or the error a
bug names in `stops_with`, e.g. `"ValueError: length + new_len > T_max"`, an error the notebook raises itself). A bug that runs to
the end means the notebook cannot see it.

Each notebook's tests hold one table, `BUGS = {name: bug(...)}`, and the fixture and two tests that
`bug_tests` makes of it:

    BUGS = {"wrong position": bug("05_decoder.py", ("past_len + torch.arange(n)", "torch.arange(n)"))}
    runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)

Speed: the unmutated notebook (quick mode) runs once per module, section by section, in this process.
Just before the first cell of the section a bug edits, the process forks; the child runs the mutated
section and every section after it and reports how it ended. The child starts from exactly the state a
full run reaches there, at the cost of the mutated suffix only.

Every bug runs without `transformers`, the way a reader without the package runs the notebook, so the
notebook must catch it on its own. A bug marked `hf=True` also runs with `transformers` installed (the
build's environment): the Hugging Face referees must see it too. `only_referee=True` marks a bug that
makes a self-consistent model, which only a referee is there to see: it runs with `transformers` only.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import select
import signal
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from learning_notebooks.sources import load_config, load_notebook
from notebook_code import INJECTED_NAME, PRELUDE_NAME, SOURCES, MutationDoesNotApply, code_cells

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
CHILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Bug:
    """Text edits of one section file, and how the notebook must stop."""

    file: str
    edits: tuple[tuple[str, str], ...]
    hf: bool = False
    stops_with: str = "AssertionError"
    only_referee: bool = False


def bug(file: str, *edits: tuple[str, str], **options) -> Bug:
    """A bug that replaces, in `file`, each `old` of its (old, new) pairs with `new`."""
    assert edits and all(len(edit) == 2 for edit in edits), edits
    return Bug(file, tuple(edits), **options)


@contextmanager
def without_transformers():
    """`import transformers` fails and `find_spec("transformers")` is None, as on a reader's machine."""
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules)
              if name == "transformers" or name.startswith("transformers.")}
    sys.modules["transformers"] = None
    try:
        yield
    finally:
        del sys.modules["transformers"]
        sys.modules.update(hidden)


def _first_lines(notebook: str) -> dict[str, int]:
    """Cell id -> the line of its first content line in its section file (for tracebacks)."""
    series, name = notebook.split("/")
    source = load_notebook(SOURCES, series, name, load_config(SOURCES))
    return {cell.id: cell.first_line for cell in source.code_cells()}


def _padded(cells, lines: dict[str, int]) -> list[tuple[str, str]]:
    """(file name, code) with blank lines before each cell, so a traceback names the file's own line."""
    return [(label, "\n" * (lines.get(cell.id, 1) - 1) + cell.source) for label, cell in cells]


class Runner:
    """The unmutated notebook, run cell by cell in this process; forks a child per bug."""

    def __init__(self, notebook: str, out_dir: Path, hf: bool):
        self.notebook, self.hf = notebook, hf
        self.overrides = {"QUICK": True, "OUTPUT_DIR": str(out_dir)}
        self.lines = _first_lines(notebook)
        self.cells = _padded(code_cells(notebook, **self.overrides), self.lines)
        self.files = {label for label, _ in self.cells} - {PRELUDE_NAME, INJECTED_NAME}
        self.namespace: dict = {"__name__": "__notebook__"}
        self.next_cell = 0

    def _exec(self, label: str, code: str) -> None:
        exec(compile(code, label, "exec", dont_inherit=True), self.namespace)

    def advance_to(self, file: str) -> int:
        """Run the unmutated cells before the first cell of `file` (starting over if already past it)."""
        first = next(i for i, (label, _) in enumerate(self.cells) if label == file)
        if first < self.next_cell:
            self.namespace, self.next_cell = {"__name__": "__notebook__"}, 0
        with without_transformers() if not self.hf else _nothing():
            while self.next_cell < first:
                self._exec(*self.cells[self.next_cell])
                self.next_cell += 1
        return first

    def run(self, found: Bug | None) -> dict:
        """Fork; the child runs the (mutated) rest of the notebook from `found.file` on. How it ended."""
        if found is None:
            first = self.advance_to(self.cells[0][0])
            rest = self.cells[first:]
        else:
            first = self.advance_to(found.file)
            try:
                mutated = code_cells(self.notebook, edits={found.file: list(found.edits)}, **self.overrides)
            except MutationDoesNotApply as error:
                pytest.fail(f"{error}")
            rest = _padded(mutated, self.lines)[first:]
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:                                                     # child
            os.close(read_end)
            report = {"outcome": "ran to the end"}
            try:
                sys.stdout = open(os.devnull, "w")
                with without_transformers() if not self.hf else _nothing():
                    for label, code in rest:
                        self._exec(label, code)
            except BaseException as error:                              # noqa: BLE001 - reported to the parent
                frames = traceback.extract_tb(error.__traceback__)
                ours = [f for f in frames if f.filename in self.files]
                report = {"outcome": type(error).__name__, "message": str(error)[:300],
                          "where": f"{ours[-1].filename}:{ours[-1].lineno}" if ours else None}
            finally:
                with os.fdopen(write_end, "wb") as pipe:
                    pickle.dump(report, pipe)
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            ready, _, _ = select.select([pipe], [], [], CHILD_TIMEOUT_S)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"outcome": "timeout"}
            report = pickle.load(pipe)
        os.waitpid(pid, 0)
        return report


@contextmanager
def _nothing():
    yield


def stopped(report: dict, found: Bug) -> bool:
    """The notebook stopped itself: the expected error (`stops_with` is the start of "ErrorName: message"),
    raised by a statement of its own sections (`where`; `torch.testing.assert_close` raises from inside
    torch, called by the notebook's statement)."""
    said = f"{report['outcome']}: {report.get('message', '')}"
    return said.startswith(found.stops_with) and report.get("where") is not None


def bug_tests(notebook: str, bugs: dict[str, Bug]):
    """The two tests of a notebook's bug table: the unmutated notebook runs to the end under the
    runner, and every bug stops it (without transformers; with it too when `hf`)."""
    assert bugs, "an empty bug table tests nothing"

    @pytest.fixture(scope="module")
    def runners(tmp_path_factory):
        made: dict[bool, Runner] = {}

        def get(hf: bool) -> Runner:
            if hf not in made:
                made[hf] = Runner(notebook, tmp_path_factory.mktemp(f"bugs_hf_{hf}"), hf)
            return made[hf]
        return get

    def test_unmutated_notebook_runs(runners):
        """The control: the runner and the fork change nothing; the whole notebook runs to the end."""
        assert runners(False).run(None) == {"outcome": "ran to the end"}

    def cases():
        for hf in (False, True):
            for name, found in bugs.items():
                if (hf and not (found.hf or found.only_referee)) or (not hf and found.only_referee):
                    continue
                marks = [pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed")] if hf else []
                yield pytest.param(name, hf, id=f"{name} [{'with' if hf else 'without'} transformers]", marks=marks)

    @pytest.mark.parametrize("name, hf", list(cases()))
    def test_injected_bug_stops_the_notebook(runners, name, hf):
        report = runners(hf).run(bugs[name])
        print(name, report)
        assert stopped(report, bugs[name]), report

    return runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook
