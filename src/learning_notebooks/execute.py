"""Run a notebook once in a fresh kernel (nbclient), reporting progress and mapping errors to sources."""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import sys
import tempfile
import threading
from pathlib import Path

from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from .errors import BuildError, CellFailed
from .sources import Cell, NotebookSource

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_FRAME = re.compile(r"Cell In\[(\d+)\], line (\d+)")
# A cell's frame in a faulthandler dump: IPython compiles cells to /tmp/ipykernel_<pid>/<hash>.py.
FAULT_FRAME = re.compile(r'File "[^"]*ipykernel_\d+[/\\][^"]*\.py", line (\d+) in <module>')
DEFAULT_MAX_OUTPUT_BYTES = 2 * 1024 * 1024
# Run in the kernel before the first cell (IPython exec_lines: no execution count, names deleted):
# faulthandler dumps the running statement if the kernel dies, and text with lone surrogates is
# printed with replacement characters instead of failing in the kernel's message packer.
KERNEL_SETUP = """\
def _learning_notebooks_setup(fault_path):
    import faulthandler, re, sys
    faulthandler.enable(open(fault_path, "w"))
    lone = re.compile("[\\ud800-\\udfff]")
    def clean(value):
        if isinstance(value, str):
            return lone.sub("\\ufffd", value)
        if isinstance(value, dict):
            return {{clean(k): clean(v) for k, v in value.items()}}
        if isinstance(value, (list, tuple)):
            return type(value)(clean(v) for v in value)
        return value
    session = sys.stdout.session
    pack = session.pack
    def replacing_pack(message):
        try:
            return pack(message)
        except UnicodeEncodeError:
            return pack(clean(message))
    session.pack = replacing_pack
_learning_notebooks_setup({path!r}); del _learning_notebooks_setup
"""
_WRITE_LOCK = threading.Lock()  # parallel runs share the log stream


class Progress:
    """`notebook: cell N of M` lines: rewritten in place on a terminal (one run at a time), one plain
    line per cell otherwise (CI logs, parallel runs: each line names its notebook)."""

    def __init__(self, label: str, total: int, stream=None, live: bool | None = None) -> None:
        self.label, self.total = label, total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live

    def cell(self, number: int, where: str) -> None:
        text = f"  {self.label}: cell {number} of {self.total} ({where})"
        with _WRITE_LOCK:
            if self.live:
                self.stream.write("\r\x1b[K" + text)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def done(self) -> None:
        if self.live:
            with _WRITE_LOCK:
                self.stream.write("\r\x1b[K")
                self.stream.flush()


class Cancelled(Exception):
    """The run was stopped from outside (the build was interrupted)."""


class Cancel:
    """Shared by the runs of one build: `stop()` kills every kernel they started, at any stage
    (starting, running a cell), and makes runs that have not started yet refuse to start."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._clients: set[NotebookClient] = set()
        self._lock = threading.Lock()

    def register(self, client: NotebookClient) -> None:
        with self._lock:
            self._clients.add(client)

    def unregister(self, client: NotebookClient) -> None:
        with self._lock:
            self._clients.discard(client)

    def check(self) -> None:
        if self.event.is_set():
            raise Cancelled()

    def stop(self) -> None:
        self.event.set()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            kill_kernel(client)


def kill_kernel(client: NotebookClient) -> None:
    """Kill the kernel process (and its process group) of `client`, if it is running."""
    provisioner = getattr(getattr(client, "km", None), "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is None or process.poll() is not None:
        return
    try:
        pgid = getattr(provisioner, "pgid", None)
        if pgid and pgid != os.getpgid(0):
            os.killpg(pgid, signal.SIGKILL)
        else:
            process.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def origins(source: NotebookSource, executable: NotebookNode) -> list[Cell | None]:
    """The source cell of each cell of the execution notebook (None for the prelude and injected parameters)."""
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


def fault_statement(dump: str) -> int | None:
    """Line (within the running cell) of the module-level statement in a faulthandler dump."""
    lines = [int(n) for n in FAULT_FRAME.findall(dump)]
    return lines[-1] if lines else None  # most recent call first: the last is the cell's own frame


def check_output_size(source: NotebookSource, executed: NotebookNode, limit: int | None) -> None:
    """Raise CellFailed at the cell whose outputs take the notebook's outputs past `limit` bytes."""
    if not limit:
        return
    cells = origins(source, executed)
    total = 0
    for index, cell in enumerate(executed.cells):
        total += len(json.dumps(cell.get("outputs", []), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if total > limit:
            failed = _failed(source, cells, index, "OutputTooLarge",
                             f"the outputs reach {total / 2**20:.1f} MB here, over the limit of "
                             f"{limit / 2**20:.1f} MB per notebook (--max-output-mb); print less")
            raise failed


def run(
    source: NotebookSource,
    executable: NotebookNode,
    cwd: Path,
    timeout: int | None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> NotebookNode:
    """Execute `executable` top to bottom in a new kernel whose working directory is `cwd`.

    Raises CellFailed (with file and line) when a cell raises or exceeds `timeout` seconds, and
    Cancelled when `cancel` stops it; the kernel is shut down whatever happens.
    May run in a thread of its own (then nbclient installs no signal handlers: the caller's `cancel`
    is how the run is stopped).
    """
    cancel = cancel or Cancel()
    cancel.check()
    cells = origins(source, executable)
    state = {"index": 0}

    def on_cell_start(cell: NotebookNode, cell_index: int) -> None:
        cancel.check()
        state["index"] = cell_index
        if progress:
            origin = cells[cell_index]
            where = f"{origin.file.name}:{origin.line}" if origin else builder_cell_label(cell_index)
            progress.cell(cell_index + 1, where)

    def on_notebook_start(notebook: NotebookNode) -> None:
        cancel.check()

    private = tempfile.TemporaryDirectory(prefix="learning-notebooks-private-")  # outside the kernel's folder
    fault_file = Path(private.name) / "faulthandler.txt"
    setup = KERNEL_SETUP.format(path=str(fault_file))
    client = NotebookClient(
        executable,
        timeout=timeout,
        kernel_name="python3",
        startup_timeout=180,  # a busy 2-core machine can take more than nbclient's default 60 s
        resources={"metadata": {"path": str(cwd)}},
        record_timing=False,
        allow_errors=False,
        on_cell_start=on_cell_start,
        on_notebook_start=on_notebook_start,
        # The kernel's own warnings (e.g. about its local TCP transport) are noise here; errors still show.
        # faulthandler: if the kernel dies, its dump names the statement it was running.
        extra_arguments=["--IPKernelApp.log_level=ERROR", f"--IPKernelApp.exec_lines={setup}"],
    )
    cancel.register(client)
    try:
        _execute(client)
        cancel.check()
    except Cancelled:
        raise
    except Exception:
        if cancel.event.is_set():
            raise Cancelled() from None
        try:
            raise
        except CellTimeoutError:
            raise _failed(source, cells, state["index"], "CellTimeoutError", f"cell did not finish within {timeout} s; the kernel was stopped") from None
        except DeadKernelError as err:
            failed = _failed(source, cells, state["index"], "DeadKernelError", str(err) or "the kernel died")
            dump = fault_file.read_text(errors="replace") if fault_file.exists() else ""
            line, origin = fault_statement(dump), cells[state["index"]]
            if line is not None and origin is not None:
                failed.line = origin.code_line + line - 1
                failed.evalue = "the kernel died running this statement (a crash in native code?)"
            raise failed from None
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
        cancel.unregister(client)
        kill_kernel(client)  # normally already gone; not so when start-up was cut short
        # nbclient leaves its exit hook registered when start-up fails; it would fail noisily at exit.
        atexit.unregister(client._cleanup_kernel)
        private.cleanup()
        if progress:
            progress.done()
    return executable


def _execute(client: NotebookClient) -> None:
    """client.execute(), with nbclient's own signal handling reported as KeyboardInterrupt.

    In the main thread nbclient answers SIGINT/SIGTERM itself: it shuts the kernel down, and the
    run then fails with a secondary error (DeadKernelError, or an AssertionError from its clean-up).
    The builder runs kernels from worker threads, where nbclient installs no handlers.
    """
    try:
        client.execute()
    except Exception:
        if hasattr(client, "_async_cleanup_kernel_future"):  # set only by nbclient's signal handler
            raise KeyboardInterrupt from None
        raise


def builder_cell_label(index: int) -> str:
    """What to call the cell at `index` when the builder added it (no source cell): the prelude
    (always the first cell of the execution notebook) or the injected parameters."""
    return "prelude" if index == 0 else "injected parameters"


def _failed(source: NotebookSource, cells: list[Cell | None], index: int, ename: str, evalue: str) -> CellFailed:
    origin = cells[index]
    if origin is None:
        return CellFailed(source.target, builder_cell_label(index), source.folder, 0, ename, evalue)
    return CellFailed(source.target, origin.file.stem, origin.file, origin.code_line, ename, evalue)
