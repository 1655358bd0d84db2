"""Plan a notebook's build: read the sources and the previous build, decide reuse, and compose the
editions the build writes (or `--check` compares). Reads only; shared by build.py and check.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import cache, placeholders
from .compose import RUN_VALUES_KEY, code_sources, comparable_code, compose, compose_for_execution, transplant
from .errors import OptionError
from .files import digest_tree
from .layout import METADATA_KEY, built_path, outputs_dir
from .links import Links
from .options import BuildOptions
from .sources import NotebookSource, ProjectConfig, discover, load_config, load_notebook


def select(src_root: Path, only: tuple[str, ...]) -> list[tuple[str, str]]:
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
            raise OptionError(f"unknown --only target '{target}' (available: {names})")
        chosen += [pair for pair in matches if pair not in chosen]
    return chosen


def load_all(options: BuildOptions) -> tuple[ProjectConfig, list[NotebookSource]]:
    """Read and validate every selected source before anything executes."""
    config = load_config(options.src_root)
    for lang in options.languages:
        if lang not in config.languages:
            raise OptionError(f"unknown --lang '{lang}' (configured: {', '.join(config.languages)})")
    sources = [load_notebook(options.src_root, s, n, config) for s, n in select(options.src_root, options.only)]
    return config, sources


def read_built(path: Path) -> NotebookNode | None:
    if not path.is_file():
        return None
    try:
        return nbformat.read(path, as_version=4)
    except Exception:  # an unreadable old build is simply not reusable
        return None


def record_of(notebook: NotebookNode | None) -> dict | None:
    """The run record a built notebook carries (None: no notebook, or none recorded)."""
    if notebook is None or not isinstance(notebook.metadata.get(METADATA_KEY), dict):
        return None
    return dict(notebook.metadata[METADATA_KEY])


def _previous(path: Path, notebook: NotebookNode | None, executable: NotebookNode) -> cache.Previous:
    """A built file as the verdict sees it: its record, and whether its outputs and its code are
    still the ones recorded and composed (not edited by hand)."""
    record = record_of(notebook)
    if notebook is None or record is None:
        return cache.Previous(str(path), record)
    lang = record.get("language")
    return cache.Previous(str(path), record,
                          outputs_intact=record.get("outputs_digest") == cache.outputs_digest(
                              notebook.cells, record.get(RUN_VALUES_KEY)),
                          code_intact=comparable_code(notebook, lang) == comparable_code(executable, lang))


@dataclass
class Plan:
    source: NotebookSource
    overrides: dict
    quick: bool
    executable: NotebookNode
    key: str  # execution key of the current sources
    environment: dict  # of this machine
    paths: dict[str, Path]  # every configured language -> its built file
    previous: dict[str, NotebookNode | None]  # what those files hold now
    outputs: Path
    verdict: cache.Verdict
    languages: tuple[str, ...] = ()  # the languages this build writes
    notes: list[str] = field(default_factory=list)

    @property
    def code(self) -> list[str]:
        return code_sources(self.executable)

    @property
    def target(self) -> str:
        return self.source.target

    def needs_run(self, options: BuildOptions) -> bool:
        return options.execute and (options.force or not self.verdict.valid or bool(self.verdict.drift))


def plan(source: NotebookSource, config: ProjectConfig, options: BuildOptions) -> Plan:
    """The execution key and environment of the current sources, the previous build and the
    verdict on it, and the languages to write: those asked for, or every one when the notebook
    runs again (its languages and outputs/ always come from one run)."""
    overrides = source.quick if options.quick else {}
    executable = compose_for_execution(source, overrides)
    code = code_sources(executable)
    key = cache.execution_key(code, overrides)
    env = cache.environment(cache.package_versions(cache.imported_modules(code)), cache.python_version())
    paths = {lang: built_path(options.out, source.series, source.name, lang) for lang in config.languages}
    previous = {lang: read_built(path) for lang, path in paths.items()}
    outputs = outputs_dir(options.out, source.series, source.name)
    files = {lang: _previous(path, previous[lang], executable) for lang, path in paths.items()}
    current = cache.Current(key, overrides, env, options.quick, digest_tree(outputs), f"{outputs}")
    p = Plan(source, overrides, options.quick, executable, key, env, paths, previous, outputs,
             cache.verdict(files, current), options.languages or config.languages)
    if p.needs_run(options) and set(p.languages) != set(config.languages):
        p.notes.append(f"it runs again, so every language is rebuilt from the new run (not only "
                       f"{', '.join(p.languages)})")
        p.languages = config.languages
    return p


def run_record(p: Plan, record: dict | None) -> dict:
    """The metadata an edition carries: the notebook's identity and mode, and the record of the run
    whose outputs it embeds (`record`, None: no outputs). `outputs_digest` is filled in once the
    edition's outputs are in place."""
    run = record or {}
    return {
        "source": f"notebooks_src/{p.source.series}/{p.source.name}/",
        "quick": p.quick,
        "execution_key": p.key,
        "parameters": cache.recorded_parameters(p.overrides),
        "builder_format": cache.BUILDER_FORMAT,
        "executed": record is not None,
        "environment": run.get("environment", {}),
        "run": run.get("run", ""),
        "output_files": run.get("output_files", {}),
        "outputs_digest": "",
    }


def editions(p: Plan, config: ProjectConfig, runs: dict[str, tuple[NotebookNode, dict]],
             links: Mapping[str, Links]) -> dict[str, NotebookNode]:
    """Each language's edition; `runs`: lang -> (notebook holding the outputs to embed, the record
    of their run). A language without a run gets no outputs and shows `[run:KEY]` in its prose.
    `links`: lang -> where its Colab links point."""
    composed = {}
    producers = {c.id: (c.file, c.line) for c in p.source.code_cells() if placeholders.TAG in c.tags}
    for lang in p.languages:
        executed, record = runs.get(lang, (None, None))
        values = run_values(producers, executed, record) if executed is not None else None
        notebook = compose(p.source, lang, config, p.overrides, run_record(p, record), values, quick=p.quick,
                           links=links[lang])
        if executed is not None:
            transplant(executed, notebook)
            notebook.metadata[METADATA_KEY]["outputs_digest"] = cache.outputs_digest(notebook.cells, values)
        nbformat.validate(notebook)
        composed[lang] = notebook
    return composed


def run_values(producers: Mapping[str, tuple[Path, int]], executed: NotebookNode, record: dict) -> dict[str, object]:
    """The values the run exposed for the prose: read from the outputs of its `prose-values` cells
    (`producers`) in a notebook just executed, or from the metadata of a built edition whose run is
    reused (it leaves those cells out)."""
    if any(cell.get("id") in producers for cell in executed.cells):
        return placeholders.run_values(producers, executed.cells)
    return dict(record.get(RUN_VALUES_KEY, {}))


def reused_runs(p: Plan) -> dict[str, tuple[NotebookNode, dict]]:
    """The recorded runs a build without a run keeps: each language its own file's, when valid."""
    return {lang: (p.previous[lang], record_of(p.previous[lang])) for lang in p.languages if lang in p.verdict.reusable}
