"""The `build-learning-notebooks` command."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from .build import BuildOptions, NotebookResult, Status, build_all, load_all, strays
from .errors import BuildError
from .sources import placeholder_warning

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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: the build stops its kernels and removes what it staged."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGTERM handled like SIGINT: both raise Interrupted in the main thread (handlers restored after)."""
    def handler(signum, frame):
        raise Interrupted(signum)

    try:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
    p.add_argument("--strict-env", action="store_true",
                   help="with --check: an environment that differs from the recorded run is a problem, "
                        "not a warning (CI passes it)")
    p.add_argument("--list", action="store_true", help="list the notebooks and exit")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="execute up to N notebooks at once, each in its own kernel (default: the number "
                        "of cores, %(default)s)")
    p.add_argument("--max-output-mb", type=float, default=2.0, metavar="MB",
                   help="fail when a notebook's outputs exceed this size (default: %(default)s; 0 for none)")
    p.add_argument("--timeout", type=int, default=600, metavar="SECONDS",
                   help="per-cell time limit when executing (default: %(default)s; 0 for none)")
    p.add_argument("--root", type=Path, default=None,
                   help="project folder holding notebooks_src/ (default: found from the current folder upwards)")
    p.add_argument("--out", type=Path, default=None,
                   help="write build/ and outputs/ under this folder instead of the project folder")
    return p


def report(result: NotebookResult, log) -> None:
    log.write(f"{result.target}: {result.status} ({result.seconds:.1f} s)\n")
    for note in result.notes:
        log.write(f"  {note}\n")
    log.flush()


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
    if args.jobs < 1:
        log.write("error: --jobs must be 1 or more\n")
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
        strict_env=args.strict_env,
        timeout=args.timeout or None,
        jobs=args.jobs,
        max_output_bytes=int(args.max_output_mb * 1024 * 1024) or None,
        log=log,
    )
    with signals_as_interrupts():
        try:
            return _run(args, options, log)
        except BuildError as err:
            intact = err.exit_code == 1 and not options.check and getattr(err, "intact", True)
            tail = "; the previous build is intact" if intact else ""
            log.write(f"error: {err}{tail}\n")
            return err.exit_code
        except OSError as err:  # one the builder did not foresee: still one line, still nothing half-written
            where = f"{err.filename}: " if err.filename else ""
            log.write(f"error: {where}{err.strerror or err}; the previous build is intact\n")
            return 1
        except KeyboardInterrupt as err:
            log.write("interrupted: kernels stopped, staging removed; every notebook holds its whole previous "
                      "build (or, if its swap had begun, its whole new one)\n")
            return getattr(err, "exit_code", 130)


def _run(args, options: BuildOptions, log) -> int:
    config, sources = load_all(options)
    if args.list:
        for source in sources:
            sections = len(source.sections)
            print(f"{source.target}\t{sections} sections\t{source.titles[config.languages[0]]}")
        return 0
    warning = placeholder_warning(config, options.src_root)
    if warning:
        log.write(warning + "\n")
    results = build_all(sources, config, options, report=lambda result: report(result, log))
    if not options.check:
        return 0
    problems = [problem for result in results for problem in result.problems]
    problems += [f"{path}: no source produces it" for path in strays(options, config, sources)]
    for problem in problems:
        log.write(f"stale: {problem}\n")
    log.write("check: " + (f"{len(problems)} problem(s)\n" if problems else "build/ is up to date\n"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
