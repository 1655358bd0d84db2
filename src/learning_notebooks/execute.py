"""Run a notebook once in a fresh kernel (nbclient), reporting progress and mapping errors to sources."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from .errors import BuildError, CellFailed
from .sources import Cell, NotebookSource

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_FRAME = re.compile(r"Cell In\[(\d+)\], line (\d+)")


class Progress:
    """`notebook: cell N of M` lines: rewritten in place on a terminal, one plain line per cell in CI."""

    def __init__(self, label: str, total: int, stream=None) -> None:
        self.label, self.total = label, total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()

    def cell(self, number: int, where: str) -> None:
        text = f"  {self.label}: cell {number} of {self.total} ({where})"
        if self.live:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def origins(source: NotebookSource, executable: NotebookNode) -> list[Cell | None]:
    """The source cell of each cell of the execution notebook (None for injected parameters)."""
    by_id = {cell.id: cell for cell in source.code_cells()}
    return [by_id.get(cell.id) for cell in executable.cells]


def traceback_lines(traceback: str, executed: NotebookNode, cells: list[Cell | None]) -> list[tuple[Cell, int]]:
    """(source cell, 1-based file line) of each traceback frame inside the notebook, outermost first.

    IPython names cell frames `Cell In[<execution count>], line <n>`; the execution count leads back
    to the cell, and the cell's marker line to the line in the section file.
    """
    counts = {cell.get("execution_count"): i for i, cell in enumerate(executed.cells) if cell.get("execution_count")}
    frames = []
    for count, line in CELL_FRAME.findall(ANSI.sub("", traceback)):
        index = counts.get(int(count))
        if index is not None and cells[index] is not None:
            frames.append((cells[index], cells[index].code_line + int(line) - 1))
    return frames


def run(
    source: NotebookSource,
    executable: NotebookNode,
    cwd: Path,
    timeout: int | None,
    progress: Progress | None = None,
) -> NotebookNode:
    """Execute `executable` top to bottom in a new kernel whose working directory is `cwd`.

    Raises CellFailed (with file and line) when a cell raises or exceeds `timeout` seconds;
    the kernel is shut down whatever happens, Ctrl-C included.
    """
    cells = origins(source, executable)
    state = {"index": 0}

    def on_cell_start(cell: NotebookNode, cell_index: int) -> None:
        state["index"] = cell_index
        if progress:
            origin = cells[cell_index]
            where = f"{origin.file.name}:{origin.line}" if origin else "injected parameters"
            progress.cell(cell_index + 1, where)

    client = NotebookClient(
        executable,
        timeout=timeout,
        kernel_name="python3",
        startup_timeout=180,  # a busy 2-core machine can take more than nbclient's default 60 s
        resources={"metadata": {"path": str(cwd)}},
        record_timing=False,
        allow_errors=False,
        on_cell_start=on_cell_start,
        # The kernel's own warnings (e.g. about its local TCP transport) are noise here; errors still show.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    try:
        _execute(client)
    except CellTimeoutError:
        raise _failed(source, cells, state["index"], "CellTimeoutError", f"cell did not finish within {timeout} s; the kernel was stopped") from None
    except DeadKernelError as err:
        raise _failed(source, cells, state["index"], "DeadKernelError", str(err) or "the kernel died") from None
    except CellExecutionError as err:
        failed = _failed(source, cells, state["index"], err.ename, err.evalue)
        failed.traceback = ANSI.sub("", err.traceback)
        frames = traceback_lines(err.traceback, executable, cells)
        if frames:  # the innermost frame raised; the outermost is the statement the cell ran
            (outer, outer_line), (inner, inner_line) = frames[0], frames[-1]
            failed.file, failed.line, failed.section = inner.file, inner_line, inner.file.stem
            if (inner.file, inner_line) != (outer.file, outer_line):
                failed.called_from = f"{outer.file.name}:{outer_line}"
        raise failed from None
    except RuntimeError as err:  # the kernel did not start or answer
        raise BuildError(f"{source.target}: kernel failure: {err}") from None
    finally:
        if progress:
            progress.done()
    return executable


def _execute(client: NotebookClient) -> None:
    """client.execute(), with Ctrl-C reported as KeyboardInterrupt.

    nbclient answers SIGINT/SIGTERM itself: it shuts the kernel down, and the run then fails with
    a secondary error (DeadKernelError, or an AssertionError from its own clean-up).
    """
    try:
        client.execute()
    except Exception:
        if hasattr(client, "_async_cleanup_kernel_future"):  # set only by nbclient's signal handler
            raise KeyboardInterrupt from None
        raise


def _failed(source: NotebookSource, cells: list[Cell | None], index: int, ename: str, evalue: str) -> CellFailed:
    origin = cells[index]
    if origin is None:
        return CellFailed(source.target, "injected parameters", source.folder, 0, ename, evalue)
    return CellFailed(source.target, origin.file.stem, origin.file, origin.first_line, ename, evalue)
