"""The `build-learning-notebooks` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .build import BuildOptions, build_notebook, load_all, orphans
from .errors import BuildError

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

exit status: 0 success, 1 a cell failed or --check found problems, 2 bad input, 130 interrupted
"""


def find_root(start: Path) -> Path | None:
    """The nearest folder, from `start` upwards, that holds notebooks_src/."""
    for folder in [start, *start.parents]:
        if (folder / "notebooks_src").is_dir():
            return folder
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="build-learning-notebooks",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", action="append", default=[], metavar="SERIES[/NOTEBOOK]",
                   help="build only this series or notebook (repeatable)")
    p.add_argument("--lang", action="append", default=[], metavar="LANG",
                   help="write only this language (repeatable; default: all configured)")
    p.add_argument("--execute", action="store_true", help="run notebooks whose code or parameters changed")
    p.add_argument("--force", action="store_true", help="with --execute: run even when the cache is valid")
    p.add_argument("--quick", action="store_true",
                   help="apply each manifest's [quick] parameter overrides (fast smoke run; --check refuses it)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 listing every built file that differs from what the sources produce")
    p.add_argument("--list", action="store_true", help="list the notebooks and exit")
    p.add_argument("--timeout", type=int, default=600, metavar="SECONDS",
                   help="per-cell time limit when executing (default: %(default)s; 0 for none)")
    p.add_argument("--root", type=Path, default=None,
                   help="project folder holding notebooks_src/ (default: found from the current folder upwards)")
    p.add_argument("--out", type=Path, default=None,
                   help="write build/ and outputs/ under this folder instead of the project folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    log = sys.stderr
    root = (args.root or find_root(Path.cwd()) or Path.cwd()).resolve()
    if not (root / "notebooks_src").is_dir():
        log.write(f"error: no notebooks_src/ folder in {root} or above; pass --root\n")
        return 2
    if args.check and (args.execute or args.quick):
        log.write("error: --check only compares; do not combine it with --execute or --quick\n")
        return 2
    options = BuildOptions(
        root=root,
        out=(args.out or root).resolve(),
        only=args.only,
        languages=args.lang,
        execute=args.execute,
        quick=args.quick,
        force=args.force,
        check=args.check,
        timeout=args.timeout or None,
        log=log,
    )
    try:
        config, sources = load_all(options)
        if args.list:
            for source in sources:
                sections = len(source.sections)
                print(f"{source.target}\t{sections} sections\t{source.titles[config.languages[0]]}")
            return 0
        problems = []
        for source in sources:
            result = build_notebook(source, config, options)
            problems += result.problems
            log.write(f"{result.target}: {result.status} ({result.seconds:.1f} s)\n")
            if result.status == "no outputs" and not options.check:
                log.write(
                    f"  code or parameters changed since the last execution, so it carries no outputs; "
                    f"run: build-learning-notebooks --execute --only {result.target}\n"
                )
        if options.check:
            if not options.only:
                problems += [f"{path}: no source produces it" for path in orphans(options, config, sources)]
            for problem in problems:
                log.write(f"stale: {problem}\n")
            log.write("check: " + (f"{len(problems)} problem(s)\n" if problems else "build/ is up to date\n"))
            return 1 if problems else 0
        return 0
    except BuildError as err:
        log.write(f"error: {err}\n")
        return err.exit_code
    except KeyboardInterrupt:
        log.write("interrupted: kernels stopped, temporary files removed, previous build left in place\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
