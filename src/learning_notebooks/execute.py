"""Run a notebook once in a fresh kernel (nbclient), reporting progress and mapping errors to sources.

Every failure becomes a CellFailed naming the section file and line of the statement: an exception
(from IPython's `Cell In[N], line M` frames), `sys.exit()` (recorded by the kernel, which shows no
frames for it), a timeout, a kernel that died (from a faulthandler dump), outputs past the limit
(counted as they arrive; the kernel is stopped at once).
"""

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

from .errors import CellFailed, KernelFailed
from .sources import Cell, NotebookSource

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_FRAME = re.compile(r"Cell In\[(\d+)\], line (\d+)")
# A cell's frame in a faulthandler dump: IPython compiles cells to /tmp/ipykernel_<pid>/<hash>.py.
FAULT_FRAME = re.compile(r'File "[^"]*ipykernel_\d+[/\\][^"]*\.py", line (\d+) in <module>')
FAULT_FILE, EXIT_FILE = "faulthandler.txt", "exit.txt"  # in a private folder, outside the kernel's
# Run in the kernel before the first cell (IPython exec_lines: no execution count, names deleted):
# faulthandler dumps the running statement if the kernel dies; the line of a cell's sys.exit() is
# written down (IPython shows SystemExit without frames); text with lone surrogates is printed with
# replacement characters instead of failing in the kernel's message packer.
KERNEL_SETUP = """\
def _learning_notebooks_setup(private):
    import faulthandler, os, re, sys
    faulthandler.enable(open(os.path.join(private, "{fault}"), "w"))
    def record_exit(result):
        error = getattr(result, "error_in_exec", None)
        tb = error.__traceback__ if isinstance(error, SystemExit) else None
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_name == "<module>" and "ipykernel_" in code.co_filename:
                with open(os.path.join(private, "{exit}"), "w") as handle:
                    handle.write(str(tb.tb_lineno))
                break
            tb = tb.tb_next
    get_ipython().events.register("post_run_cell", record_exit)
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
_learning_notebooks_setup({private!r}); del _learning_notebooks_setup
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


class LimitedClient(NotebookClient):
    """nbclient's client, stopping the kernel as soon as the outputs received pass `output_limit`
    bytes (so a print loop cannot fill the builder's memory); `too_large` is then (cell index, bytes)."""

    def __init__(self, *args, output_limit: int | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.output_limit, self.output_bytes = output_limit, 0
        self.too_large: tuple[int, int] | None = None

    def output(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if out is None or not self.output_limit:
            return out
        if self.too_large is not None:
            outs.remove(out)  # the kernel is being stopped: keep nothing more
            return None
        self.output_bytes += len(json.dumps(out, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if self.output_bytes > self.output_limit:
            self.too_large = (cell_index, self.output_bytes)
            kill_kernel(self)
        return out


def run(
    source: NotebookSource,
    executable: NotebookNode,
    cwd: Path,
    timeout: int | None,
    output_limit: int | None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> NotebookNode:
    """Execute `executable` top to bottom in a new kernel whose working directory is `cwd`.

    Raises CellFailed (with file and line) when a cell raises, exceeds `timeout` seconds or takes
    the outputs past `output_limit` bytes, and Cancelled when `cancel` stops it; the kernel is shut
    down whatever happens. Runs in a worker thread of the build, where nbclient installs no signal
    handlers: the caller's `cancel` is how the run is stopped.
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
    setup = KERNEL_SETUP.format(private=private.name, fault=FAULT_FILE, exit=EXIT_FILE)
    client = LimitedClient(
        executable,
        output_limit=output_limit,
        timeout=timeout,
        kernel_name="python3",
        startup_timeout=180,  # a busy 2-core machine can take more than nbclient's default 60 s
        resources={"metadata": {"path": str(cwd)}},
        record_timing=False,
        allow_errors=False,
        on_cell_start=on_cell_start,
        on_notebook_start=on_notebook_start,
        # The kernel's own warnings (e.g. about its local TCP transport) are noise here; errors still show.
        extra_arguments=["--IPKernelApp.log_level=ERROR", f"--IPKernelApp.exec_lines={setup}"],
    )
    cancel.register(client)
    try:
        client.execute()
        cancel.check()
        if client.too_large is not None:  # passed the limit in the last message of a cell
            raise _mapped(RuntimeError(), source, executable, cells, state["index"], client, Path(private.name),
                          timeout)
    except (Cancelled, CellFailed):
        raise
    except Exception as err:
        if cancel.event.is_set():
            raise Cancelled() from None
        raise _mapped(err, source, executable, cells, state["index"], client, Path(private.name), timeout) from None
    finally:
        cancel.unregister(client)
        kill_kernel(client)  # normally already gone; not so when start-up was cut short
        # nbclient leaves its exit hook registered when start-up fails; it would fail noisily at exit.
        atexit.unregister(client._cleanup_kernel)
        private.cleanup()
        if progress:
            progress.done()
    return executable


def _mapped(err: Exception, source: NotebookSource, executable: NotebookNode, cells: list[Cell | None], index: int,
            client: LimitedClient, private: Path, timeout: int | None) -> Exception:
    """The CellFailed (or KernelFailed) that says where `err`, raised by nbclient, comes from."""
    if client.too_large is not None:
        index, size = client.too_large
        return _failed(source, cells, index, "OutputTooLarge",
                       f"the outputs reach {size / 2**20:.1f} MB here, over the limit of "
                       f"{client.output_limit / 2**20:.1f} MB per notebook (--max-output-mb); print less")
    if isinstance(err, CellTimeoutError):
        return _failed(source, cells, index, "CellTimeoutError", f"cell did not finish within {timeout} s; the kernel was stopped")
    if isinstance(err, DeadKernelError):
        failed = _failed(source, cells, index, "DeadKernelError", str(err) or "the kernel died")
        dump = (private / FAULT_FILE).read_text(errors="replace") if (private / FAULT_FILE).exists() else ""
        line, origin = fault_statement(dump), cells[index]
        if line is not None and origin is not None:
            failed.line = origin.code_line + line - 1
            failed.evalue = "the kernel died running this statement (a crash in native code?)"
        return failed
    if isinstance(err, CellExecutionError):
        failed = _failed(source, cells, index, err.ename, err.evalue)
        failed.traceback = ANSI.sub("", err.traceback)
        frames = traceback_lines(err.traceback, executable, cells)
        exit_line = (private / EXIT_FILE).read_text() if (private / EXIT_FILE).exists() else ""
        if frames:  # the innermost frame raised; the outermost is the statement the cell ran
            (outer, outer_line), (inner, inner_line) = frames[0], frames[-1]
            failed.file, failed.line, failed.section = inner.file, inner_line, inner.file.stem
            if (inner.file, inner_line) != (outer.file, outer_line):
                failed.called_from = f"{outer.file.name}:{outer_line}"
        elif exit_line.isdigit() and cells[index] is not None:  # sys.exit(): no frames shown
            failed.line = cells[index].code_line + int(exit_line) - 1
        return failed
    return KernelFailed(f"{source.target}: kernel failure: {err}")


def builder_cell_label(index: int) -> str:
    """What to call the cell at `index` when the builder added it (no source cell): the prelude
    (always the first cell of the execution notebook) or the injected parameters."""
    return "prelude" if index == 0 else "injected parameters"


def _failed(source: NotebookSource, cells: list[Cell | None], index: int, ename: str, evalue: str) -> CellFailed:
    origin = cells[index]
    if origin is None:
        return CellFailed(source.target, builder_cell_label(index), source.folder, 0, ename, evalue)
    return CellFailed(source.target, origin.file.stem, origin.file, origin.code_line, ename, evalue)
