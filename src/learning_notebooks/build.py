"""Build notebooks: compose each language, execute once (or reuse cached outputs), write atomically."""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import __version__, placeholders
from .cache import execution_key, imported_modules, package_versions, python_version
from .compose import RUN_VALUES_KEY, built_name, code_sources, compose, compose_for_execution, transplant
from .localize import missing_twins, strip_comments
from .errors import SourceError
from .execute import Progress, run
from .files import digest_tree, notebook_bytes, replace_dir, write_atomic
from .sources import NotebookSource, ProjectConfig, discover, load_config, load_notebook

METADATA_KEY = "learning_notebooks"


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
    timeout: int | None = 600
    log: object = None  # a text stream; default stderr

    @property
    def src_root(self) -> Path:
        return self.root / "notebooks_src"


@dataclass
class NotebookResult:
    target: str
    status: str  # executed | cached | kept outputs | no outputs
    seconds: float
    problems: list[str] = field(default_factory=list)  # --check findings


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
    if not path.exists():
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


def build_notebook(source: NotebookSource, config: ProjectConfig, options: BuildOptions) -> NotebookResult:
    log = options.log or sys.stderr
    started = time.perf_counter()
    overrides = source.quick if options.quick else {}
    executable = compose_for_execution(source, overrides)
    code = code_sources(executable)
    key = execution_key(key_code(code), overrides, __version__, package_versions(imported_modules(code)), python_version())

    languages = options.languages or list(config.languages)
    build_dir = options.out / "build" / source.series
    outputs_dir = options.out / "outputs" / source.series / source.name
    paths = {lang: build_dir / built_name(source, lang) for lang in config.languages}
    previous = {lang: read_built(path) for lang, path in paths.items()}
    # A built notebook holds its own language's outputs only, so each language reuses its own file.
    reusable = {lang: nb for lang, nb in previous.items() if lang in languages and reusable_outputs(nb, key)}

    staging = None
    if options.execute and not options.check and (options.force or len(reusable) < len(languages)):
        log.write(f"{source.target}: executing {len(code)} code cells\n")
        staging = tempfile.TemporaryDirectory(prefix="learning-notebooks-")
        progress = Progress(source.target, len(executable.cells), log)
        try:
            executed = run(source, executable, Path(staging.name), options.timeout, progress)
            check_executed_twins(source, executed, config.languages)
        except BaseException:
            staging.cleanup()
            raise
        output_files = digest_tree(Path(staging.name))
        runs = {lang: (executed, output_files) for lang in languages}
        status = "executed"
    else:
        runs = {lang: (nb, build_metadata(nb).get("output_files", {})) for lang, nb in reusable.items()}
        status = ("cached" if options.execute else "kept outputs") if len(runs) == len(languages) else "no outputs"

    built, composed = {}, {}
    for lang in languages:
        executed, output_files = runs.get(lang, (None, {}))
        metadata = {
            "source": f"notebooks_src/{source.series}/{source.name}/",
            "quick": options.quick,
            "execution_key": key,
            "executed": executed is not None,
            "output_files": output_files if executed is not None else {},
        }
        values = placeholders.run_values(source, executed) if executed is not None else None
        notebook = compose(source, lang, config, overrides, metadata, values)
        if executed is not None:
            transplant(executed, notebook)
        nbformat.validate(notebook)
        composed[lang] = notebook
        built[lang] = notebook_bytes(notebook)

    result = NotebookResult(source.target, status, 0.0)
    if options.check:
        result.problems = check_built(source, paths, previous, built, outputs_dir)
        result.problems += twin_problems(source, previous, config.languages)
        result.problems += run_value_problems(paths, previous, composed)
    else:
        try:
            if staging is not None:
                replace_dir(outputs_dir, Path(staging.name))
            for lang, data in built.items():
                write_atomic(paths[lang], data)
        finally:
            if staging is not None:
                staging.cleanup()
    result.seconds = time.perf_counter() - started
    return result


def key_code(code: list[str]) -> list[str]:
    """What the execution key hashes of the code: the code tokens, without comments or blank lines."""
    return [strip_comments(cell) for cell in code]


def reusable_outputs(notebook: NotebookNode | None, key: str) -> bool:
    meta = build_metadata(notebook)
    return bool(meta.get("executed")) and meta.get("execution_key") == key


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


def check_built(source, paths, previous, built, outputs_dir) -> list[str]:
    """Why the files under build/ (and outputs/) are not what the current sources produce."""
    problems = []
    for lang, data in built.items():
        path, old = paths[lang], previous[lang]
        meta = build_metadata(old)
        if old is None:
            problems.append(f"{path}: missing")
            continue
        if meta.get("quick"):
            problems.append(f"{path}: a quick-mode build; rebuild with --execute (without --quick)")
        elif not meta.get("executed"):
            problems.append(f"{path}: carries no outputs; rebuild with --execute")
        elif path.read_bytes() != data:
            problems.append(f"{path}: stale (prose, code or outputs differ from what the sources produce)")
    meta = build_metadata(next((nb for nb in previous.values() if nb is not None), None))
    if meta.get("executed") and digest_tree(outputs_dir) != meta.get("output_files", {}):
        problems.append(f"{outputs_dir}: files differ from the ones the built notebook's run wrote")
    return problems


def orphans(options: BuildOptions, config: ProjectConfig, sources: list[NotebookSource]) -> list[Path]:
    """Notebooks under build/ that no current source produces (only meaningful without --only)."""
    expected = {options.out / "build" / s.series / built_name(s, lang) for s in sources for lang in config.languages}
    return sorted(p for p in (options.out / "build").glob("*/*.ipynb") if p not in expected)
