"""Build notebooks: plan, execute what needs a run, compose each language, stage and swap.

1. `plan.plan`: the execution key and environment of the current sources, and the verdict on the
   previous build (cache.verdict: reused only when every language and outputs/ hold one valid run).
2. `execute_all`: the notebooks that need a run execute, in parallel (`--jobs`), each in its own
   kernel and empty working folder, with the project tree snapshotted before and compared after;
   nothing is written meanwhile.
3. `plan.editions`: one notebook per language, with the outputs of the run (or the reused ones).
4. `stage_and_swap`: every file of the notebook is staged beside its target, then all are swapped in
   together (files.Transaction).

`build_all` holds the tree's lock throughout, first rolls back what a killed build left, and after
any failure checks what build/ and outputs/ hold before saying that the previous build is intact.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from nbformat import NotebookNode

from . import cache, signals
from .errors import BuildError, Interrupted, SourceError, WriteFailed
from .execute import Cancel, Progress, run
from .files import Transaction, digest_tree, notebook_bytes, project_lock, recover, tree_files
from .layout import BUILD_DIR, JOURNAL_NAME, OUTPUTS_DIR, is_staging
from .links import Links
from .localize import missing_twins
from .options import BuildOptions
from .plan import Plan, editions, plan, reused_runs
from .snapshot import check_untouched, snapshot
from .sources import NotebookSource, ProjectConfig


class Status(StrEnum):
    """What happened to a notebook's outputs in this build."""

    EXECUTED = "executed"
    CACHED = "cached"  # --execute, and the recorded run is still valid
    KEPT = "kept outputs"  # no --execute: the recorded run's outputs carried over
    NO_OUTPUTS = "no outputs"  # no --execute, and no valid recorded run for some language
    CHECKED = "checked"


@dataclass
class NotebookResult:
    target: str
    status: Status
    seconds: float
    problems: list[str] = field(default_factory=list)  # --check findings
    notes: list[str] = field(default_factory=list)  # why it has no outputs, which versions differ, ...


# -- 2. execute -----------------------------------------------------------------------------------


@dataclass
class Executed:
    notebook: NotebookNode
    folder: tempfile.TemporaryDirectory  # the kernel's working folder, with what the run wrote
    files: list[Path]  # regular files in it (symlinks, special files and non-UTF-8 names were refused)
    seconds: float

    @property
    def record(self) -> dict:
        """The run part of the run record (see cache.py)."""
        return {"run": cache.outputs_digest(self.notebook.cells),
                "output_files": digest_tree(Path(self.folder.name))}


def execute_one(p: Plan, options: BuildOptions, cancel: Cancel, live: bool) -> Executed:
    """Run one notebook in a fresh kernel in an empty folder; check what it printed and wrote."""
    started = time.perf_counter()
    options.log.write(f"{p.target}: executing {len(p.code)} code cells\n")
    folder = tempfile.TemporaryDirectory(prefix="learning-notebooks-")
    try:
        progress = Progress(p.target, len(p.executable.cells), options.log, live=live)
        notebook = run(p.source, p.executable, Path(folder.name), options.timeout, options.max_output_bytes,
                       progress, cancel)
        check_executed_twins(p.source, notebook, tuple(p.paths))
        files = tree_files(Path(folder.name))
    except BaseException:
        folder.cleanup()
        raise
    return Executed(notebook, folder, files, time.perf_counter() - started)


def execute_all(plans: list[Plan], options: BuildOptions) -> dict[str, Executed]:
    """Step 2: run `plans` in parallel (at most options.jobs at once), each kernel in a worker thread.

    The first failure, or an interruption (KeyboardInterrupt in the main thread), stops every kernel
    and removes every working folder before the exception propagates.
    """
    if not plans:
        return {}
    cancel = Cancel()
    jobs = min(options.jobs, len(plans))
    live = jobs == 1 and options.log.isatty()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="notebook")
    futures: dict = {}
    try:
        for p in plans:  # an interruption may land here too: `cancel` reaches runs not yet recorded
            futures[pool.submit(execute_one, p, options, cancel, live)] = p.target
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_EXCEPTION)
            for future in done:
                if future.exception() is not None:
                    raise future.exception()
        return {target: future.result() for future, target in futures.items()}
    except BaseException:
        with signals.held():  # a second Ctrl-C must not cut the clean-up short
            cancel.stop()
            for future in futures:
                future.cancel()
            while not all(future.done() for future in futures):
                wait(list(futures), timeout=0.25)
                cancel.stop()  # kernels that were still starting
            for future in futures:
                if not future.cancelled() and future.exception() is None:
                    future.result().folder.cleanup()
        raise
    finally:
        pool.shutdown(wait=True)


def check_executed_twins(source: NotebookSource, executed: NotebookNode, languages: tuple[str, ...]) -> None:
    """Every language-tagged output of the run has one twin per language."""
    cells = {cell.id: cell for cell in source.code_cells()}
    for cell in executed.cells:
        if cell.cell_type != "code":
            continue
        problems = missing_twins({lang: cell.outputs for lang in languages}, languages)
        if problems:
            origin = cells.get(cell.get("id"))
            where = (origin.file, origin.line) if origin else (source.folder, None)
            raise SourceError(f"{problems[0]}: give say()/say_table() every language ({', '.join(languages)})",
                              *where)


# -- 3 and 4: compose, stage and swap ---------------------------------------------------------------


def finish(p: Plan, executed: Executed | None, config: ProjectConfig, options: BuildOptions, links: Links,
           expected: dict[str, dict[Path, str | None]]) -> NotebookResult:
    """Steps 3 and 4 for one notebook, given its run (None: keep the recorded runs, or no outputs).
    `expected[target]` receives what its files will hold once swapped in (path -> sha256, None: gone)."""
    started = time.perf_counter()
    notes = list(p.notes)
    verdict = p.verdict
    if executed is not None:
        runs = {lang: (executed.notebook, {"environment": p.environment, **executed.record}) for lang in p.languages}
        status = Status.EXECUTED
        if verdict.edited:
            notes.append(f"outputs edited by hand in {', '.join(Path(name).name for name in verdict.edited)}: "
                         "not reused")
        if verdict.drift and verdict.valid and not options.force:
            notes.append(f"ran again because the environment differs: {', '.join(verdict.drift)}")
    else:
        runs = reused_runs(p)
        complete = len(runs) == len(p.languages)
        status = (Status.CACHED if options.execute else Status.KEPT) if complete else Status.NO_OUTPUTS
        if not complete:
            notes.append(f"{'some languages carry' if runs else 'it carries'} no outputs: {verdict.problems[0]}; "
                         f"run: build-learning-notebooks --execute --only {p.target}")
        elif not verdict.valid:
            notes.append(f"{verdict.problems[0]}; --execute runs it again")
        if verdict.drift:
            notes.append(f"environment differs from the recorded run ({', '.join(verdict.drift)}); outputs kept; "
                         f"--execute runs it again")
    composed = editions(p, config, runs, {lang: links for lang in p.languages})
    built = {lang: notebook_bytes(notebook) for lang, notebook in composed.items()}
    expected[p.target] = {p.paths[lang]: _sha(data) for lang, data in built.items()}
    if executed is not None:
        folder = Path(executed.folder.name)
        new = {p.outputs / path.relative_to(folder): _sha(path.read_bytes()) for path in executed.files}
        old = {path: None for path in tree_files(p.outputs)}
        expected[p.target].update({**old, **new})
    stage_and_swap(p, built, executed, options.out)
    return NotebookResult(p.target, status, (executed.seconds if executed else 0.0) + time.perf_counter() - started,
                          notes=notes)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stage_and_swap(p: Plan, built: dict[str, bytes], executed: Executed | None, out: Path) -> None:
    """Step 4: stage every file of the notebook beside its target, then swap all in (or none)."""
    with Transaction(out) as transaction:
        if executed is not None:
            transaction.copy_tree(p.outputs, executed.files, Path(executed.folder.name))
        for lang, data in built.items():
            transaction.write(p.paths[lang], data)
        transaction.commit()


# -- the whole build -------------------------------------------------------------------------------


def tree_state(out: Path) -> dict[Path, str]:
    """sha256 of every file under build/ and outputs/ (staging leftovers aside): what a reader sees."""
    state = {}
    for top in (out / BUILD_DIR, out / OUTPUTS_DIR):
        for path in sorted(top.rglob("*")) if top.is_dir() else []:
            if path.is_file() and not path.is_symlink() and not is_staging(path) \
                    and not path.name.startswith(JOURNAL_NAME):
                state[path] = _sha(path.read_bytes())
    return state


def verify(err: BuildError | Interrupted, before: dict[Path, str], out: Path,
           expected: dict[str, dict[Path, str | None]]) -> None:
    """After a failure: set `err.built` (notebooks whose whole new build is in place) and
    `err.intact` (every other file under build/ and outputs/ is as it was before the build)."""
    after = tree_state(out)
    changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
    built = [target for target, files in expected.items()
             if files and all(after.get(path) == sha for path, sha in files.items())
             and any(path in changed for path in files)]
    explained = {path for target in built for path in expected[target]}
    err.built = tuple(built)
    err.intact = changed <= explained


def build_all(sources: list[NotebookSource], config: ProjectConfig, options: BuildOptions, links: Links,
              report=None) -> list[NotebookResult]:
    """Build every notebook of `sources`, holding the tree's lock; `report(result)` as each finishes.
    `links`: where the Colab links point (links.resolve).

    Every run happens first, with the project tree snapshotted before and compared after; then each
    notebook is composed and swapped in.
    """

    def waiting(path: Path) -> None:
        options.log.write(f"waiting: another build holds {path} (it is building this tree)\n")
        options.log.flush()

    results: list[NotebookResult] = []
    with project_lock(options.out, waiting):
        for line in recover(options.out):
            options.log.write(line + "\n")
        before = tree_state(options.out)
        expected: dict[str, dict[Path, str | None]] = {}
        runs: dict[str, Executed] = {}
        try:
            plans = [plan(source, config, options) for source in sources]
            to_run = [p for p in plans if p.needs_run(options)]
            snapshot_before = snapshot(options.root, options.out) if to_run else None
            runs = execute_all(to_run, options)
            if snapshot_before is not None:
                check_untouched(snapshot_before, options.root, options.out)
            for p in plans:
                result = finish(p, runs.get(p.target), config, options, links, expected)
                results.append(result)
                if report:
                    report(result)
        except BuildError as err:
            verify(err, before, options.out, expected)
            raise
        except OSError as err:  # one the builder did not foresee: still one line
            failed = WriteFailed(f"{err.filename or 'build'}: {err.strerror or err}")
            verify(failed, before, options.out, expected)
            raise failed from None
        except KeyboardInterrupt as err:
            interrupted = err if isinstance(err, Interrupted) else Interrupted()
            verify(interrupted, before, options.out, expected)
            raise interrupted from None
        finally:
            for executed in runs.values():
                executed.folder.cleanup()
    return results
