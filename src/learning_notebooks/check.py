"""`--check`: is every built file what the sources produce now? Reads only: it creates no file,
folder or lock (it waits for a build in progress, if there is one).

Per notebook, the verdict on its recorded run (cache.verdict: every language present, executed,
not quick, outputs intact, of the current code, one run, outputs/ holding exactly that run's files;
environment drift a warning unless strict), each language's bytes against what the build would
write now (its prose filled from the values the run recorded, which the outputs' digest covers),
the twins of language-tagged outputs; then anything under build/ or outputs/ that no source
produces.
"""

from __future__ import annotations

import os
from pathlib import Path

from .build import NotebookResult, Status
from .files import notebook_bytes, project_lock
from .layout import BUILD_DIR, METADATA_KEY, OUTPUTS_DIR, built_path, outputs_dir
from .links import Links, configured, from_config
from .localize import missing_twins
from .options import BuildOptions
from .plan import Plan, editions, plan, record_of, reused_runs
from .sources import NotebookSource, ProjectConfig


def check_notebook(p: Plan, config: ProjectConfig, options: BuildOptions) -> NotebookResult:
    result = NotebookResult(p.target, Status.CHECKED, 0.0)
    verdict = p.verdict
    result.problems += verdict.problems
    if verdict.drift:
        finding = f"{p.target}: environment differs from the recorded run: {', '.join(verdict.drift)}"
        (result.problems if options.strict_env else result.notes).append(finding)
    links = {lang: from_config(config) if configured(config) else
             Links.recorded((record_of(p.previous[lang]) or {}).get("colab")) for lang in p.languages}
    composed = editions(p, config, reused_runs(p), links)
    for lang, notebook in composed.items():
        path = p.paths[lang]
        if lang in verdict.reusable and path.read_bytes() != notebook_bytes(notebook):
            result.problems.append(f"{path}: stale: prose or header differ from what the sources produce; rebuild")
    result.problems += twin_problems(p)
    return result


def twin_problems(p: Plan) -> list[str]:
    """Each code cell's language-tagged outputs have their twins in the other built languages."""
    notebooks = {lang: nb for lang, nb in p.previous.items() if (record_of(nb) or {}).get("executed")}
    if len(notebooks) < 2:
        return []
    by_id = {lang: {c.get("id"): c.outputs for c in nb.cells if c.cell_type == "code"} for lang, nb in notebooks.items()}
    ids = sorted(set().union(*(cells.keys() for cells in by_id.values())) - {None})
    origins = {cell.id: cell for cell in p.source.code_cells()}
    problems = []
    for cell_id in ids:
        found = missing_twins({lang: outputs.get(cell_id, []) for lang, outputs in by_id.items()}, tuple(p.paths))
        origin = origins.get(cell_id)
        where = f"{origin.file}:{origin.line}" if origin else f"cell {cell_id}"
        problems += [f"{where}: {problem} (built notebooks of {p.target})" for problem in found]
    return problems


def strays(options: BuildOptions, config: ProjectConfig, sources: list[NotebookSource]) -> list[Path]:
    """Everything under build/ and outputs/ that no selected source produces (staging leftovers,
    swap journals, stray files and folders), within the --only selection."""
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


def check_all(sources: list[NotebookSource], config: ProjectConfig, options: BuildOptions,
              report=None) -> list[str]:
    """Every problem found (one line each); `report(result)` as each notebook is checked."""
    def waiting(path: Path) -> None:
        options.log.write(f"waiting: a build holds {path}\n")

    problems = []
    with project_lock(options.out, waiting, shared=True):
        for source in sources:
            result = check_notebook(plan(source, config, options), config, options)
            problems += result.problems
            if report:
                report(result)
        problems += [f"{path}: no source produces it" for path in strays(options, config, sources)]
    return problems
