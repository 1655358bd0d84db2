"""Build notebooks: plan (key and reuse), execute or reuse, compose each language, stage, swap or check.

Each step is a function of its own:

1. `plan`: the run record of the current sources (author key, environment) and which previous
   build, if any, holds outputs that may be reused (their digest verified).
2. `execute_all`: the notebooks that need a run execute, in parallel (`--jobs`), each in its own
   kernel and empty working folder; nothing is written meanwhile.
3. `compose_languages`: one notebook per language, with the outputs of the run (or the reused ones).
4. `stage_and_swap`: every file of the notebook is staged beside its target, then all are swapped in
   together (files.Transaction); or, with --check, `check_built` compares instead.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import __version__, placeholders
from .cache import (
    author_key,
    environment,
    environment_changes,
    imported_modules,
    outputs_digest,
    package_versions,
    python_version,
    recorded_parameters,
)
from .compose import RUN_VALUES_KEY, code_sources, compose, compose_for_execution, transplant
from .errors import SourceError
from .localize import missing_twins, strip_comments
from .execute import DEFAULT_MAX_OUTPUT_BYTES, Cancel, Progress, check_output_size, run
from .files import (
    Transaction,
    digest_tree,
    notebook_bytes,
    project_lock,
    remove_leftovers,
    signals_held,
    tree_files,
)
from .layout import BUILD_DIR, METADATA_KEY, OUTPUTS_DIR, built_path, outputs_dir
from .snapshot import check_untouched, snapshot
from .sources import NotebookSource, ProjectConfig, discover, load_config, load_notebook

__all__ = ["METADATA_KEY", "BuildOptions", "NotebookResult", "Status", "build_all", "build_notebook", "load_all"]


class Status(StrEnum):
    """What happened to a notebook's outputs in this build."""

    EXECUTED = "executed"
    CACHED = "cached"  # --execute, and the recorded run is still valid
    KEPT = "kept outputs"  # no --execute: the recorded run's outputs carried over
    NO_OUTPUTS = "no outputs"  # no --execute, and no valid recorded run
    CHECKED = "checked"


@dataclass
class BuildOptions:
    """What to build and how. Paths: sources under `root/notebooks_src`, results under `out`."""

    root: Path
    out: Path
    only: list[str] = field(default_factory=list)
    languages: list[str] = field(default_factory=list)  # empty: every configured language
    execute: bool = False
    quick: bool = False
    force: bool = False
    check: bool = False
    strict_env: bool = False  # --check: an environment that differs from the recorded run is a problem
    timeout: int | None = 600
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    max_output_bytes: int | None = DEFAULT_MAX_OUTPUT_BYTES
    log: object = None  # a text stream; default stderr

    @property
    def src_root(self) -> Path:
        return self.root / "notebooks_src"


@dataclass
class NotebookResult:
    target: str
    status: Status
    seconds: float
    problems: list[str] = field(default_factory=list)  # --check findings
    notes: list[str] = field(default_factory=list)  # why it has no outputs, which versions differ, ...


def select(src_root: Path, only: list[str]) -> list[tuple[str, str]]:
    """The (series, notebook) pairs named by `--only` (all when empty). Unknown names are an error."""
    available = discover(src_root)
    if not only:
        return available
    chosen = []
    for target in only:
        parts = target.strip("/").split("/")
        matches = [pair for pair in available if list(pair[: len(parts)]) == parts] if len(parts) <= 2 else []
        if not matches:
            names = ", ".join(f"{s}/{n}" for s, n in available) or "none"
            raise SourceError(f"unknown --only target '{target}' (available: {names})")
        chosen += [pair for pair in matches if pair not in chosen]
    return chosen


def read_built(path: Path) -> NotebookNode | None:
    if not path.is_file():
        return None
    try:
        return nbformat.read(path, as_version=4)
    except Exception:  # an unreadable old build is simply not reusable
        return None


def build_metadata(notebook: NotebookNode | None) -> dict:
    return dict(notebook.metadata.get(METADATA_KEY, {})) if notebook is not None else {}


def load_all(options: BuildOptions) -> tuple[ProjectConfig, list[NotebookSource]]:
    """Read and validate every selected source before anything executes."""
    config = load_config(options.src_root)
    for lang in options.languages:
        if lang not in config.languages:
            raise SourceError(f"unknown --lang '{lang}' (configured: {', '.join(config.languages)})")
    sources = [load_notebook(options.src_root, s, n, config) for s, n in select(options.src_root, options.only)]
    return config, sources


# -- 1. plan: key and reuse ---------------------------------------------------------------------


@dataclass
class Plan:
    source: NotebookSource
    overrides: dict
    executable: NotebookNode
    key: str  # author_key of the current sources
    environment: dict  # of this machine
    paths: dict[str, Path]  # every configured language -> built path
    previous: dict[str, NotebookNode | None]
    outputs: Path
    languages: list[str] = field(default_factory=list)  # the languages this build writes
    # A built notebook holds its own language's outputs only, so each language reuses its own file:
    reusable: dict[str, NotebookNode] = field(default_factory=dict)  # whose run record is valid and intact
    edited: list[Path] = field(default_factory=list)  # previous builds whose outputs differ from their record
    stale: str = ""  # why some language has no reusable run ("" when every one has)
    drift: list[str] = field(default_factory=list)  # environment of the reusable run vs this machine

    @property
    def code(self) -> list[str]:
        return code_sources(self.executable)

    @property
    def all_languages(self) -> tuple[str, ...]:
        return tuple(self.paths)


def stale_reason(meta: dict, key: str, overrides: dict) -> str:
    """Why a recorded run (metadata `meta`) does not belong to the current sources."""
    parameters = recorded_parameters(overrides)
    if meta.get("parameters", parameters) != parameters:
        return "parameters changed"
    if meta.get("builder", __version__) != __version__:
        return f"builder version changed ({meta.get('builder')} → {__version__})"
    return "code changed"


def plan(source: NotebookSource, config: ProjectConfig, options: BuildOptions) -> Plan:
    """Step 1: the run record of the current sources, and the previous outputs that may be reused."""
    overrides = source.quick if options.quick else {}
    executable = compose_for_execution(source, overrides)
    code = code_sources(executable)
    key = author_key(key_code(code), overrides, __version__)
    env = environment(package_versions(imported_modules(code)), python_version())
    paths = {lang: built_path(options.out, source.series, source.name, lang) for lang in config.languages}
    previous = {lang: read_built(path) for lang, path in paths.items()}
    result = Plan(source, overrides, executable, key, env, paths, previous,
                  outputs_dir(options.out, source.series, source.name), options.languages or list(config.languages))
    reasons = []
    for lang, notebook in previous.items():
        meta = build_metadata(notebook)
        if not meta.get("executed"):
            continue
        if "outputs_digest" not in meta:
            reasons.append("its run record predates the outputs digest (an older builder)")
        elif meta.get("outputs_digest") != outputs_digest(notebook.cells):
            result.edited.append(paths[lang])
        elif meta.get("execution_key") != key:
            reasons.append(stale_reason(meta, key, overrides))
        elif lang in result.languages:
            result.reusable[lang] = notebook
    if result.reusable:
        recorded = build_metadata(next(iter(result.reusable.values()))).get("environment", {})
        result.drift = environment_changes(recorded, env)
    if len(result.reusable) < len(result.languages):
        if result.edited:
            result.stale = "outputs edited by hand in " + ", ".join(p.name for p in result.edited)
        elif reasons:
            result.stale = reasons[0]
        else:
            result.stale = "never executed"
    return result


def key_code(code: list[str]) -> list[str]:
    """What the execution key hashes of the code: the code tokens, without comments or blank lines."""
    return [strip_comments(cell) for cell in code]


def needs_run(p: Plan, options: BuildOptions) -> bool:
    if not options.execute or options.check:
        return False
    return options.force or len(p.reusable) < len(p.languages) or bool(p.drift)


# -- 2. execute -----------------------------------------------------------------------------------


@dataclass
class Executed:
    notebook: NotebookNode
    folder: tempfile.TemporaryDirectory  # the kernel's working folder, with what the run wrote
    files: list[Path]  # regular files in it (symlinks and special files were refused)
    seconds: float


def execute_one(p: Plan, options: BuildOptions, cancel: Cancel, live: bool) -> Executed:
    """Run one notebook in a fresh kernel in an empty folder; check what it printed and wrote."""
    log = options.log or sys.stderr
    started = time.perf_counter()
    log.write(f"{p.source.target}: executing {len(p.code)} code cells\n")
    folder = tempfile.TemporaryDirectory(prefix="learning-notebooks-")
    try:
        progress = Progress(p.source.target, len(p.executable.cells), log, live=live)
        notebook = run(p.source, p.executable, Path(folder.name), options.timeout, progress, cancel)
        check_output_size(p.source, notebook, options.max_output_bytes)
        check_executed_twins(p.source, notebook, p.all_languages)
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
    jobs = max(1, min(options.jobs, len(plans)))
    live = jobs == 1 and ((options.log or sys.stderr).isatty() if hasattr(options.log or sys.stderr, "isatty") else False)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="notebook")
    futures: dict = {}
    try:
        for p in plans:  # an interruption may land here too: `cancel` reaches runs not yet recorded
            futures[pool.submit(execute_one, p, options, cancel, live)] = p.source.target
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_EXCEPTION)
            for future in done:
                if future.exception() is not None:
                    raise future.exception()
        return {target: future.result() for future, target in futures.items()}
    except BaseException:
        with signals_held():  # a second Ctrl-C must not cut the clean-up short
            cancel.stop()
            for future in futures:
                future.cancel()
            while not all(future.done() for future in futures):
                wait(list(futures), timeout=0.25)
                cancel.stop()  # kernels that were still starting
            for future in futures:
                if not future.cancelled() and future.exception() is None:
                    future.result().folder.cleanup()
            pool.shutdown(wait=True)
        raise
    finally:
        pool.shutdown(wait=True)


# -- 3. compose -----------------------------------------------------------------------------------


def run_record(p: Plan, options: BuildOptions, executed: NotebookNode | None, output_files: dict, env: dict) -> dict:
    """The metadata each built notebook carries (see cache.py for what each part answers).

    `outputs_digest` is filled in by `compose_languages` once the language's outputs are in place.
    """
    return {
        "source": f"notebooks_src/{p.source.series}/{p.source.name}/",
        "quick": options.quick,
        "execution_key": p.key,
        "parameters": recorded_parameters(p.overrides),
        "builder": __version__,
        "environment": env if executed is not None else {},
        "executed": executed is not None,
        "output_files": output_files if executed is not None else {},
        "outputs_digest": "",
    }


def compose_languages(p: Plan, config: ProjectConfig, options: BuildOptions,
                      runs: dict[str, tuple[NotebookNode, dict, dict]]) -> dict[str, NotebookNode]:
    """Step 3: each language's notebook; `runs`: lang -> (executed notebook, output files, environment)."""
    composed = {}
    for lang in p.languages:
        executed, output_files, env = runs.get(lang, (None, {}, {}))
        metadata = run_record(p, options, executed, output_files, env)
        values = placeholders.run_values(p.source, executed) if executed is not None else None
        notebook = compose(p.source, lang, config, p.overrides, metadata, values, quick=options.quick)
        if executed is not None:
            transplant(executed, notebook)
            notebook.metadata[METADATA_KEY]["outputs_digest"] = outputs_digest(notebook.cells)
        nbformat.validate(notebook)
        composed[lang] = notebook
    return composed


def check_executed_twins(source: NotebookSource, executed: NotebookNode, languages) -> None:
    """Every language-tagged output of the run has one twin per language (say() given every language)."""
    cells = {cell.id: cell for cell in source.code_cells()}
    for cell in executed.cells:
        if cell.cell_type != "code":
            continue
        problems = missing_twins({lang: cell.outputs for lang in languages}, tuple(languages))
        if problems:
            origin = cells.get(cell.get("id"))
            where = (origin.file, origin.line) if origin else (source.folder, None)
            raise SourceError(f"{problems[0]}: give say()/say_table() every language ({', '.join(languages)})", *where)


# -- 4. stage and swap, or check -----------------------------------------------------------------


def stage_and_swap(p: Plan, built: dict[str, bytes], run: Executed | None) -> None:
    """Step 4: stage every file of the notebook beside its target, then swap all in (or none)."""
    with Transaction() as transaction:
        if run is not None:
            transaction.copy_tree(p.outputs, run.files, Path(run.folder.name))
        for lang, data in built.items():
            transaction.write(p.paths[lang], data)
        transaction.commit()


def check_built(p: Plan, built: dict[str, bytes], options: BuildOptions) -> tuple[list[str], list[str]]:
    """Why the files under build/ (and outputs/) are not what the current sources produce.

    Returns (problems, warnings): environment drift is a warning unless options.strict_env.
    """
    problems, warnings = [], []
    for lang in built:
        path, old = p.paths[lang], p.previous[lang]
        meta = build_metadata(old)
        if old is None:
            problems.append(f"{path}: missing")
        elif meta.get("quick"):
            problems.append(f"{path}: a quick-mode build; rebuild with --execute (without --quick)")
        elif not meta.get("executed"):
            problems.append(f"{path}: carries no outputs; rebuild with --execute")
        elif path in p.edited:
            problems.append(f"{path}: outputs edited by hand (they differ from the run recorded in it); "
                            "rebuild with --execute")
        elif "outputs_digest" not in meta:
            problems.append(f"{path}: stale: its run record predates the outputs digest (an older builder); "
                            "rebuild with --execute")
        elif meta.get("execution_key") != p.key:
            problems.append(f"{path}: stale: {stale_reason(meta, p.key, p.overrides)} since its run; "
                            "rebuild with --execute")
        elif path.read_bytes() != built[lang]:
            problems.append(f"{path}: stale: prose or header differ from what the sources produce; rebuild")
    if p.drift:
        finding = f"{p.source.target}: environment differs from the recorded run: {', '.join(p.drift)}"
        (problems if options.strict_env else warnings).append(finding)
    meta = build_metadata(next(iter(p.reusable.values()), None))
    if meta.get("executed") and digest_tree(p.outputs) != meta.get("output_files", {}):
        problems.append(f"{p.outputs}: files differ from the ones the built notebook's run wrote")
    return problems, warnings


def twin_problems(source: NotebookSource, previous: dict[str, NotebookNode | None], languages) -> list[str]:
    """--check: each code cell's language-tagged outputs have their twins in the other built languages."""
    notebooks = {lang: nb for lang, nb in previous.items() if nb is not None and build_metadata(nb).get("executed")}
    if len(notebooks) < 2:
        return []
    by_id = {lang: {c.get("id"): c.outputs for c in nb.cells if c.cell_type == "code"} for lang, nb in notebooks.items()}
    ids = sorted(set().union(*(cells.keys() for cells in by_id.values())) - {None})
    origins = {cell.id: cell for cell in source.code_cells()}
    problems = []
    for cell_id in ids:
        found = missing_twins({lang: outputs.get(cell_id, []) for lang, outputs in by_id.items()}, tuple(languages))
        origin = origins.get(cell_id)
        where = f"{origin.file}:{origin.line}" if origin else f"cell {cell_id}"
        problems += [f"{where}: {problem} (built notebooks of {source.target})" for problem in found]
    return problems


def run_value_problems(paths, previous, composed) -> list[str]:
    """--check: the values each built notebook's prose quotes are those its recorded run exposed."""
    problems = []
    for lang, notebook in composed.items():
        old = build_metadata(previous.get(lang))
        if not old.get("executed"):
            continue
        recorded, expected = old.get(RUN_VALUES_KEY, {}), notebook.metadata[METADATA_KEY].get(RUN_VALUES_KEY, {})
        if recorded != expected:
            keys = sorted(k for k in set(recorded) | set(expected) if recorded.get(k) != expected.get(k))
            problems.append(f"{paths[lang]}: prose values differ from the recorded run ({', '.join(keys)})")
    return problems


def strays(options: BuildOptions, config: ProjectConfig, sources: list[NotebookSource]) -> list[Path]:
    """Everything under build/ and outputs/ that no selected source produces (staging leftovers,
    stray files and folders), within the --only selection."""
    expected = {built_path(options.out, s.series, s.name, lang) for s in sources for lang in config.languages}
    kept = {outputs_dir(options.out, s.series, s.name) for s in sources}
    scopes = [(options.out / BUILD_DIR, None), (options.out / OUTPUTS_DIR, None)]
    if options.only:
        scopes = []
        for target in options.only:
            series, _, name = target.strip("/").partition("/")
            for top in (BUILD_DIR, OUTPUTS_DIR):
                scopes.append((options.out / top / series, name or None))
    found = set()
    for folder, name in scopes:
        if not folder.is_dir():
            continue
        for parent, dirs, files in os.walk(folder):
            here = Path(parent)
            keep_dirs = []
            for entry in sorted(dirs) + sorted(files):
                path = here / entry
                if name is not None and here == folder and not (
                    entry == name or entry.startswith(f"{name}.") or entry.startswith(f".{name}.")
                ):
                    continue  # another notebook of the series: not selected
                if path in expected or path in kept:
                    continue  # a kept outputs folder's content is checked against its digest
                if entry in dirs and any(k.is_relative_to(path) for k in kept | expected):
                    keep_dirs.append(entry)
                    continue
                found.add(path)
            dirs[:] = keep_dirs
    return sorted(found)


# -- the whole build -------------------------------------------------------------------------------


def finish(p: Plan, run: Executed | None, config: ProjectConfig, options: BuildOptions) -> NotebookResult:
    """Steps 3 and 4 for one notebook, given its run (None: reuse the recorded ones, or no outputs)."""
    started = time.perf_counter()
    notes: list[str] = []
    edited = f"outputs edited by hand in {', '.join(x.name for x in p.edited)}: not reused"
    if run is not None:
        files = digest_tree(Path(run.folder.name))
        runs = {lang: (run.notebook, files, p.environment) for lang in p.languages}
        status = Status.EXECUTED
        if p.edited:
            notes.append(edited)
        if p.drift and not options.force:
            notes.append(f"ran again because the environment differs: {', '.join(p.drift)}")
    else:
        runs = {}
        for lang, notebook in p.reusable.items():
            meta = build_metadata(notebook)
            runs[lang] = (notebook, meta.get("output_files", {}), meta.get("environment", {}))
        complete = len(runs) == len(p.languages)
        status = (Status.CACHED if options.execute else Status.KEPT) if complete else Status.NO_OUTPUTS
        if not options.check:
            if not complete:
                notes.append(f"{p.stale}, so it carries no outputs; run: build-learning-notebooks --execute "
                             f"--only {p.source.target}")
            elif p.edited:
                notes.append(edited)
            if p.drift:
                notes.append(f"environment differs from the recorded run ({', '.join(p.drift)}); outputs kept; "
                             f"--execute runs it again")
    composed = compose_languages(p, config, options, runs)
    built = {lang: notebook_bytes(notebook) for lang, notebook in composed.items()}
    result = NotebookResult(p.source.target, Status.CHECKED if options.check else status, 0.0, notes=notes)
    if options.check:
        result.problems, warnings = check_built(p, built, options)
        result.problems += twin_problems(p.source, p.previous, config.languages)
        # An edited file is named above; its prose values are compared only when its outputs are intact.
        result.problems += run_value_problems(p.paths, p.previous, {lang: composed[lang] for lang in p.reusable})
        result.notes += warnings
    else:
        stage_and_swap(p, built, run)
    result.seconds = (run.seconds if run else 0.0) + time.perf_counter() - started
    return result


def build_all(sources: list[NotebookSource], config: ProjectConfig, options: BuildOptions, report=None) -> list[NotebookResult]:
    """Build (or check) every notebook of `sources`, holding the tree's lock.

    Every run happens first, with the project tree snapshotted before and compared after; then each
    notebook is composed and swapped in (or checked). `report(result)` is called as each finishes.
    """
    log = options.log or sys.stderr

    def waiting(path: Path) -> None:
        log.write(f"waiting: another build holds {path} (it is building this tree)\n")
        log.flush()

    results = []
    with project_lock(options.out, waiting, shared=options.check):
        if not options.check:
            for path in remove_leftovers([options.out / BUILD_DIR, options.out / OUTPUTS_DIR]):
                log.write(f"removed a leftover of an interrupted build: {path}\n")
        plans = [plan(source, config, options) for source in sources]
        to_run = [p for p in plans if needs_run(p, options)]
        before = snapshot(options.root, options.out) if to_run else None
        runs = execute_all(to_run, options)
        try:
            if before is not None:
                check_untouched(before, options.root, options.out)
            for p in plans:
                result = finish(p, runs.get(p.source.target), config, options)
                results.append(result)
                if report:
                    report(result)
        finally:
            for executed in runs.values():
                executed.folder.cleanup()
    return results


def build_notebook(source: NotebookSource, config: ProjectConfig, options: BuildOptions) -> NotebookResult:
    """Build (or check) one notebook: `build_all` for a single source."""
    return build_all([source], config, options)[0]
