"""The run record, and the one decision made from it: may a notebook's recorded run be reused?

Each built notebook carries the record of the run whose outputs it embeds (so the built notebook is
the cache). Its parts answer different questions:

- `execution_key`: what the author controls, hashed from the code's tokens (comments, blank lines
  and the spacing between tokens left out; string literals whole), the parameter overrides and
  the builder format. When it changed, the outputs belong to other code and are never reused.
- `environment`: Python and the versions of the packages the code imports. When only these
  differ, the outputs are still those of this code, but `--execute` runs the notebook again.
- `run`: a digest of every output of the run (all languages): the languages of one build carry the
  same value, so two files from different runs are never taken for one build.
- `outputs_digest`: a digest of the outputs embedded in this file and of the values its prose
  quotes from the run (`run_values`), so outputs or values edited by hand are detected instead of
  reused.
- `output_files`: the sha256 of every file the run wrote, which `outputs/<series>/<notebook>/`
  must hold, exactly.

`verdict` is the pure function that decides reuse, for the build and for `--check` alike.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import sys
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata

# Bump when a change to the builder changes what an executed or built notebook holds: every
# recorded run then counts as stale. Independent of the package version.
BUILDER_FORMAT = 4


# -- the execution key -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)  # pure; the build asks for the same cells in several places
def code_tokens(source: str) -> tuple[tuple[str, str], ...]:
    """The code as (token type, text) pairs: what it does, not how it is laid out.

    Comments and blank lines are left out; line ends and indentation count as tokens, not as the
    characters that make them; each string literal (an f-string too, in any Python version) is one
    token with its exact text, trailing spaces included. Code that does not tokenize is one token.
    """
    lines = source.splitlines(keepends=True)
    found: list[tuple[str, str]] = []
    fstring_start: list[tuple[int, int]] = []  # Python 3.12+ splits f-strings into pieces
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = tokenize.tok_name[token.type]
            if kind == "FSTRING_START":
                fstring_start.append(token.start)
            elif kind == "FSTRING_END":
                start = fstring_start.pop()
                if not fstring_start:
                    found.append(("STRING", _text(lines, start, token.end)))
            elif fstring_start or kind in ("COMMENT", "NL", "ENCODING"):
                continue
            else:
                found.append((kind, "" if kind in ("NEWLINE", "INDENT", "DEDENT", "ENDMARKER") else token.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return (("SOURCE", source),)
    return tuple(found)


def _text(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source text between two tokenize positions ((1-based row, column))."""
    if start[0] == end[0]:
        return lines[start[0] - 1][start[1]:end[1]]
    return lines[start[0] - 1][start[1]:] + "".join(lines[start[0]:end[0] - 1]) + lines[end[0] - 1][:end[1]]


def recorded_parameters(parameters: Mapping[str, object]) -> dict[str, str]:
    """The parameter overrides as the run record holds them: name -> repr(value), sorted by name."""
    return {name: repr(value) for name, value in sorted(parameters.items())}


def execution_key(code: Iterable[str], parameters: Mapping[str, object], builder_format: int = BUILDER_FORMAT) -> str:
    """Hash of what the author controls: the tokens of the code cells in execution order (prose is
    absent, so a prose edit keeps the outputs), the parameter overrides, and the builder format."""
    payload = {
        "code": [code_tokens(cell) for cell in code],
        "parameters": recorded_parameters(parameters),
        "builder_format": builder_format,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return "sha256:" + hashlib.sha256(blob).hexdigest()


# -- the environment -------------------------------------------------------------------------------


def environment(packages: Mapping[str, str], python: str) -> dict:
    """The environment part of the run record: {"python": "3.11", "packages": {dist: version}}."""
    return {"python": python, "packages": dict(sorted(packages.items()))}


def environment_changes(recorded: Mapping, current: Mapping) -> list[str]:
    """What differs between two `environment` records, e.g. ["torch 2.13.0 → 2.13.1"]."""
    changes = []
    if recorded.get("python") != current.get("python"):
        changes.append(f"python {recorded.get('python', 'unknown')} → {current.get('python')}")
    old, new = recorded.get("packages", {}), current.get("packages", {})
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            changes.append(f"{name} {old.get(name, 'not recorded')} → {new.get(name, 'not imported')}")
    return changes


def imported_modules(code: Iterable[str]) -> set[str]:
    """Top-level names of the absolute imports in `code` (cells that do not parse are skipped)."""
    names = set()
    for source in code:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def package_versions(modules: Iterable[str]) -> dict[str, str]:
    """Installed version of the distribution behind each module; the standard library is left out.

    A module that is not installed maps to "missing", so installing it later changes the environment.
    """
    providers = metadata.packages_distributions()
    versions = {}
    for module in sorted(set(modules)):
        if module in sys.stdlib_module_names:
            continue
        for dist in providers.get(module, []) or [module]:
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                versions[dist] = "missing"
    return versions


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


# -- outputs ---------------------------------------------------------------------------------------


def _joined(value: object) -> object:
    """nbformat stores multi-line strings as lists of lines on disk and as strings in memory."""
    return "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def _normal(output: Mapping) -> dict:
    normal = {key: _joined(value) for key, value in output.items()}
    if isinstance(output.get("data"), Mapping):
        normal["data"] = {mime: _joined(value) for mime, value in output["data"].items()}
    return normal


def outputs_digest(cells: Iterable[Mapping], values: Mapping[str, object] | None = None) -> str:
    """Hash of the outputs and execution counts of the code cells among `cells`, in order, and of
    the run's `values` for the prose (an edition carries them in its metadata, not in a cell); the
    same whether the notebook was just executed or read back from disk."""
    record: list = [
        {"execution_count": cell.get("execution_count"), "outputs": [_normal(o) for o in cell.get("outputs", [])]}
        for cell in cells
        if cell.get("cell_type") == "code"
    ]
    if values:
        record.append({"run_values": dict(values)})
    blob = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    return "sha256:" + hashlib.sha256(blob).hexdigest()


# -- the decision ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Previous:
    """One built file of a notebook, as the verdict sees it."""

    name: str  # the file, for messages
    record: Mapping | None  # its run record; None when the file is missing or unreadable
    outputs_intact: bool = False  # the outputs embedded in it match the digest its record holds
    code_intact: bool = False  # its code is the code the current sources compose (edited by hand?)


@dataclass(frozen=True)
class Current:
    """What the recorded run must match now."""

    key: str
    parameters: Mapping[str, object]
    environment: Mapping
    quick: bool
    output_files: Mapping[str, str]  # digest of outputs/<series>/<notebook>/ as it is now
    outputs_name: str = "outputs/"  # that folder, for messages


@dataclass(frozen=True)
class Verdict:
    problems: tuple[str, ...]  # why the recorded run cannot be reused as a whole (empty: it can)
    drift: tuple[str, ...]  # how this environment differs from the one recorded in any language
    reusable: frozenset[str]  # languages whose own file is a valid run of the current code
    edited: tuple[str, ...]  # names of the files whose embedded outputs differ from their record

    @property
    def valid(self) -> bool:
        return not self.problems


def stale_reason(record: Mapping, current: Current) -> str:
    """Why a recorded run of another execution key does not belong to the current sources."""
    if record.get("builder_format") != BUILDER_FORMAT:
        return f"built by an older builder (format {record.get('builder_format', 'before 3')}, now {BUILDER_FORMAT})"
    if record.get("parameters") != recorded_parameters(current.parameters):
        return "parameters changed"
    return "code changed"


def verdict(previous: Mapping[str, Previous], current: Current) -> Verdict:
    """May the recorded run be reused? Valid only when every language's file holds an intact run of
    the current execution key, in the current mode, all the same run, and outputs/ holds exactly the
    files that run wrote. Environment drift (in any language's record) is reported apart: the build
    runs again, `--check` warns (or fails with --strict-env)."""
    problems, drift, edited, reusable, runs = [], [], [], set(), {}
    for lang, file in previous.items():
        record = file.record
        if record is None:
            problems.append(f"{file.name}: missing")
        elif not record.get("executed"):
            problems.append(f"{file.name}: carries no outputs")
        elif not file.outputs_intact:
            edited.append(file.name)
            problems.append(f"{file.name}: outputs edited by hand (they differ from the run recorded in it)")
        elif bool(record.get("quick")) != current.quick:
            problems.append(f"{file.name}: a {'quick-mode' if record.get('quick') else 'full'} build")
        elif record.get("execution_key") != current.key:
            problems.append(f"{file.name}: stale: {stale_reason(record, current)} since its run")
        elif not file.code_intact:
            problems.append(f"{file.name}: its code differs from what the sources compose (edited by hand?)")
        else:
            reusable.add(lang)
            runs[file.name] = record.get("run")
            drift += [c for c in environment_changes(record.get("environment", {}), current.environment) if c not in drift]
    if len(set(runs.values())) > 1:
        problems.append(f"the languages hold different runs ({', '.join(sorted(runs))}): rebuild them together")
    if reusable and not problems:
        recorded = next(previous[lang].record for lang in sorted(reusable)).get("output_files", {})
        if current.output_files != recorded:
            problems.append(f"{current.outputs_name}: its files differ from the ones the recorded run wrote")
    return Verdict(tuple(problems), tuple(drift), frozenset(reusable), tuple(edited))
