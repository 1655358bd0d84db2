"""The `build-learning-notebooks` command: arguments -> BuildOptions -> build or check; every
failure one line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import signals
from .build import NotebookResult, build_all
from .check import check_all
from .errors import BuildError, Interrupted
from . import links
from .options import SOURCES_DIR, BuildOptions, default
from .plan import load_all

DESCRIPTION = """\
Compile the Jupytext sources under notebooks_src/<series>/<notebook>/ into one notebook per
language, build/<series>/<notebook>.<lang>.ipynb. With --execute each notebook runs once in a
fresh kernel and its outputs are embedded in every language; files it writes go to
outputs/<series>/<notebook>/. Without --execute, a notebook keeps the outputs of its last
execution while its code and parameters are unchanged.
"""

EPILOG = """\
examples:
  build-learning-notebooks --execute                      build and run everything
  build-learning-notebooks --only infra-benchmark --execute
  build-learning-notebooks --check                        is build/ up to date? (CI)
  build-learning-notebooks --execute --quick --out /tmp/x a fast smoke run elsewhere

exit status: 0 success, 1 a cell failed, a write failed or --check found problems, 2 bad input,
130 interrupted (Ctrl-C), 143 terminated (SIGTERM)
"""


def find_root(start: Path) -> Path | None:
    """The nearest folder, from `start` upwards, that holds notebooks_src/."""
    for folder in [start, *start.parents]:
        if (folder / SOURCES_DIR).is_dir():
            return folder
    return None


def parser() -> argparse.ArgumentParser:
    """The arguments; their defaults are BuildOptions' (an option left out is not passed on)."""
    p = argparse.ArgumentParser(
        prog="build-learning-notebooks",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--only", action="append", metavar="SERIES[/NOTEBOOK]",
                   help="build only this series or notebook (repeatable)")
    p.add_argument("--lang", action="append", dest="languages", metavar="LANG",
                   help="write only this language (repeatable; default: all configured; a notebook that runs "
                        "again is written in every language)")
    p.add_argument("--execute", action="store_true", help="run notebooks whose recorded run is not valid")
    p.add_argument("--force", action="store_true", help="with --execute: run even when the recorded run is valid")
    p.add_argument("--quick", action="store_true",
                   help="apply each manifest's [quick] parameter overrides (fast smoke run; --check refuses it)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 listing every built file that differs from what the sources produce")
    p.add_argument("--strict-env", action="store_true",
                   help="with --check: an environment that differs from the recorded run is a problem, "
                        "not a warning (CI passes it)")
    p.add_argument("--list", action="store_true", help="list the notebooks and exit")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="execute up to N notebooks at once, each in its own kernel (default: the number "
                        f"of cores, {default('jobs')})")
    p.add_argument("--max-output-mb", type=float, metavar="MB",
                   help=f"fail when a notebook's outputs exceed this size (default: {default('max_output_mb')}; "
                        "0 for none)")
    p.add_argument("--timeout", type=int, metavar="SECONDS",
                   help=f"per-cell time limit when executing (default: {default('timeout')}; 0 for none)")
    p.add_argument("--root", type=Path,
                   help="project folder holding notebooks_src/ (default: found from the current folder upwards)")
    p.add_argument("--out", type=Path,
                   help="write build/ and outputs/ under this folder instead of the project folder")
    return p


def report(result: NotebookResult, log) -> None:
    log.write(f"{result.target}: {result.status} ({result.seconds:.1f} s)\n")
    for note in result.notes:
        log.write(f"  {note}\n")
    log.flush()


def _tail(err: BuildError | Interrupted) -> str:
    """What the failure left, as checked (err.intact, err.built): never claimed unchecked."""
    if not err.intact:
        return ""
    if err.built:
        return f"; {', '.join(err.built)} holds its whole new build, every other notebook its previous one"
    return "; the previous build is intact"


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    log = sys.stderr
    modes = [name for name in ("check", "list") if args.pop(name, False)]
    root = args.pop("root", None) or find_root(Path.cwd()) or Path.cwd()
    for name in ("timeout", "max_output_mb"):  # 0 means no limit
        if args.get(name) == 0:
            args[name] = None
    with signals.as_interrupts():
        try:
            options = BuildOptions(root=root, log=log, **args)
            if not options.src_root.is_dir():
                log.write(f"error: no {SOURCES_DIR}/ folder in {options.root} or above; pass --root\n")
                return 2
            if "check" in modes and (options.execute or options.quick or options.force):
                log.write("error: --check only compares; do not combine it with --execute, --quick or --force\n")
                return 2
            return _run(modes, options)
        except BuildError as err:
            log.write(f"error: {err}{_tail(err)}\n")
            return err.exit_code
        except OSError as err:  # outside a build (reading a tree for --check, say): nothing was written
            log.write(f"error: {err.filename or 'build'}: {err.strerror or err}\n")
            return 1
        except KeyboardInterrupt as err:
            checked = f": kernels stopped, staging removed{_tail(err)}" if isinstance(err, Interrupted) and err.intact \
                else ""
            log.write(f"interrupted{checked}\n")
            return err.exit_code if isinstance(err, Interrupted) else 130


def _run(modes: list[str], options: BuildOptions) -> int:
    config, sources = load_all(options)
    log = options.log
    if "list" in modes:
        for source in sources:
            print(f"{source.target}\t{len(source.sections)} sections\t{source.titles[config.languages[0]]}")
        return 0
    if "check" not in modes:
        chosen = links.resolve(config, options.root)
        warning = links.warning(chosen, options.src_root)
        if warning:
            log.write(warning + "\n")
        build_all(sources, config, options, chosen, report=lambda result: report(result, log))
        return 0
    problems = check_all(sources, config, options, report=lambda result: report(result, log))
    for problem in problems:
        log.write(f"stale: {problem}\n")
    log.write("check: " + (f"{len(problems)} problem(s)\n" if problems else "build/ is up to date\n"))
    return 1 if problems else 0
