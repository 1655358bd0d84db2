"""Prose that quotes the run: `{{run:KEY}}` and `{{run:KEY:FORMAT}}` in prose cells.

The values come from the code cells tagged `prose-values`: each ends with an expression that
evaluates to a dict (nested dicts allowed; values int, float, str or bool). The kernel shows that
dict as the cell's result, so the executed notebook, and every built notebook, carries it as an
`execute_result` output; the builder reads the values back from there (`ast.literal_eval` of its
text/plain form). KEY is a dotted path into the merged dicts, FORMAT a Python format spec.

- values available (executed now, or outputs reused): each placeholder becomes
  `format(value, FORMAT)`; a missing KEY is an error naming the prose cell's file and line;
- no outputs (a build without execution after a code change): each placeholder shows its name,
  `[run:KEY]`, never a stale number;
- the values a notebook's prose used go into its metadata (`run_values`), so `--check` can tell
  when the prose, the metadata and the recorded run disagree.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from .errors import SourceError

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from .sources import Cell, NotebookSource

TAG = "prose-values"
KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
PLACEHOLDER = re.compile(r"\{\{run:(?P<key>" + KEY + r")(?::(?P<format>[^{}]*))?\}\}")
ANY_RUN = re.compile(r"\{\{run:[^}]*\}\}?")
PLAIN_TYPES = (bool, int, float, str)


def _line_of(cell: Cell, text: str, offset: int) -> int:
    return cell.first_line + text.count("\n", 0, offset)


def placeholders(cell: Cell):
    """(match, file line) of each `{{run:...}}` in a prose cell."""
    for match in PLACEHOLDER.finditer(cell.source):
        yield match, _line_of(cell, cell.source, match.start())


def check_sources(source: NotebookSource) -> None:
    """Before anything runs: placeholders are well formed and have somewhere to come from."""
    producers = [c for c in source.code_cells() if TAG in c.tags]
    for cell in producers:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue  # the kernel reports it, with its line
        if not tree.body or not isinstance(tree.body[-1], ast.Expr):
            raise SourceError(
                f"a cell tagged '{TAG}' must end with an expression whose value is a dict", cell.file, cell.line
            )
    for cell in (c for s in source.sections for c in s.cells if c.kind == "markdown"):
        for match in ANY_RUN.finditer(cell.source):
            if not PLACEHOLDER.fullmatch(match.group()):
                raise SourceError(
                    f"malformed placeholder {match.group()!r}: write {{{{run:KEY}}}} or {{{{run:KEY:FORMAT}}}}, "
                    "KEY a dotted path such as timing.ms_per_step",
                    cell.file,
                    _line_of(cell, cell.source, match.start()),
                )
        for match, line in placeholders(cell):
            if not producers:
                raise SourceError(
                    f"{{{{run:{match['key']}}}}} but no code cell is tagged '{TAG}' "
                    f'(# %% tags=["{TAG}"], ending with a dict of the values)',
                    cell.file,
                    line,
                )


def _flatten(value: dict, prefix: str, into: dict, cell: Cell) -> None:
    for name, item in value.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise SourceError(f"'{TAG}' key {name!r} is not an identifier", cell.file, cell.line)
        key = f"{prefix}{name}"
        if isinstance(item, dict):
            _flatten(item, key + ".", into, cell)
        elif isinstance(item, PLAIN_TYPES):
            if key in into:
                raise SourceError(f"'{TAG}' key '{key}' is defined twice", cell.file, cell.line)
            into[key] = item
        else:
            raise SourceError(
                f"'{TAG}' value of '{key}' is a {type(item).__name__}: use int, float, str or bool "
                "(float()/int() on NumPy or torch scalars)",
                cell.file,
                cell.line,
            )


def run_values(source: NotebookSource, executed: NotebookNode) -> dict[str, object]:
    """The merged values of the `prose-values` cells, by dotted key, read from `executed`'s outputs."""
    producers = {c.id: c for c in source.code_cells() if TAG in c.tags}
    values: dict[str, object] = {}
    for cell in executed.cells:
        origin = producers.get(cell.get("id"))
        if origin is None:
            continue
        results = [o for o in cell.get("outputs", []) if o.get("output_type") == "execute_result"]
        text = results[-1].get("data", {}).get("text/plain") if results else None
        try:
            value = ast.literal_eval(text) if isinstance(text, str) else None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise SourceError(
                f"the value of this '{TAG}' cell is not a dict of plain values (int, float, str, bool): "
                f"{text[:120]!r}",
                origin.file,
                origin.line,
            ) from None
        if not isinstance(value, dict):
            raise SourceError(f"a cell tagged '{TAG}' must end with a dict expression", origin.file, origin.line)
        _flatten(value, "", values, origin)
    return values


def fill(cell: Cell, text: str, values: dict[str, object] | None, used: dict[str, object] | None = None) -> str:
    """`text` (the cell's prose, other placeholders already filled) with each `{{run:...}}` replaced.

    values=None: no run to quote; each placeholder shows `[run:KEY]`. Errors name `cell`'s file
    and the placeholder's line. `used` collects the values quoted.
    """

    def replace(match: re.Match) -> str:
        key, spec = match["key"], match["format"] or ""
        if values is None:
            return f"[run:{key}]"
        line = _line_of(cell, cell.source, cell.source.find(match.group()))
        if key not in values:
            names = sorted(values)
            hint = f" (it has: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''})" if names else ""
            raise SourceError(f"{{{{run:{key}}}}}: the '{TAG}' cells expose no value '{key}'{hint}", cell.file, line)
        try:
            shown = format(values[key], spec)
        except (ValueError, TypeError) as err:
            raise SourceError(f"{{{{run:{key}:{spec}}}}}: cannot format {values[key]!r}: {err}", cell.file, line) from None
        if used is not None:
            used[key] = values[key]
        return shown

    return PLACEHOLDER.sub(replace, text)
