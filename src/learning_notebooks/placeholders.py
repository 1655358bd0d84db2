"""The three placeholders of prose cells, in one place: what they look like, their checks, their filling.

- `{{section}}`: the section's number in the notebook being built (`compose.section_numbers`).
- `{{colab:SERIES/NOTEBOOK}}`: a link to that notebook, in the same language (`links.py` decides
  the target: its Colab page, or its file when no GitHub repository is known).
- `{{run:KEY}}`, `{{run:KEY:FORMAT}}`: a value the run measured. The values come from the code
  cells tagged `prose-values`: each ends with an expression that evaluates to a dict (nested dicts
  allowed; values int, float, str or bool). The kernel shows that dict as the cell's result in the
  executed notebook; the builder reads the values back from there (`ast.literal_eval` of its
  text/plain form). The editions leave those cells out and carry the values in their metadata. KEY is a dotted path into the merged dicts,
  FORMAT a Python format spec (width and precision at most 100). Without outputs (a build without
  execution after a code change) each shows its name, `[run:KEY]`, never a stale number.

Errors name the prose cell's file and the placeholder's line. This module knows text, files and
lines only: the source model (`sources.py`) calls it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from .errors import SourceError

TAG = "prose-values"
KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
LINK = r"\{\{colab:(?P<target>[\w-]+/[\w-]+)\}\}"
RUN = r"\{\{run:(?P<key>" + KEY + r")(?::(?P<format>[^{}]*))?\}\}"
ANY = re.compile(r"\{\{(?:section\}\}|colab:[^}]*\}\}?|run:[^}]*\}\}?)")  # well formed or not
EXACT = re.compile(rf"(?P<section>\{{\{{section\}}\}})|{LINK}|{RUN}")
FORMAT_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d+))?[a-zA-Z%]?", re.S)
MAX_FORMAT_NUMBER = 100  # width and precision: beyond this, a typo (and a string of gigabytes)
PLAIN_TYPES = (bool, int, float, str)


def _line(first_line: int, text: str, offset: int) -> int:
    return first_line + text.count("\n", 0, offset)


def check_prose(text: str, file: Path, first_line: int, notebooks: Collection[str], has_values: bool) -> None:
    """Before anything runs: every placeholder in a prose cell is well formed and has somewhere to
    come from (`notebooks`: the known SERIES/NOTEBOOK targets; `has_values`: a cell is tagged
    prose-values)."""
    for found in ANY.finditer(text):
        where = (file, _line(first_line, text, found.start()))
        match = EXACT.fullmatch(found.group())
        if match is None:
            raise SourceError(
                f"malformed placeholder {found.group()!r}: write {{{{section}}}}, {{{{colab:SERIES/NOTEBOOK}}}}, "
                "{{run:KEY}} or {{run:KEY:FORMAT}} (KEY a dotted path such as timing.ms_per_step)", *where)
        if match["target"] and match["target"] not in notebooks:
            raise SourceError(f"{{{{colab:{match['target']}}}}} names no notebook", *where)
        if match["key"] and not has_values:
            raise SourceError(f"{{{{run:{match['key']}}}}} but no code cell is tagged '{TAG}' "
                              f'(# %% tags=["{TAG}"], ending with a dict of the values)', *where)
        spec = FORMAT_SPEC.fullmatch(match["format"] or "")
        if spec and max(int(spec["width"] or 0), int(spec["precision"] or 0)) > MAX_FORMAT_NUMBER:
            raise SourceError(f"{found.group()}: width and precision of a format are at most {MAX_FORMAT_NUMBER}",
                              *where)


def check_values_cell(code: str, file: Path, line: int) -> None:
    """A cell tagged prose-values ends with an expression (its value, a dict, is read after the run)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return  # reported with its line by the compile check
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise SourceError(f"a cell tagged '{TAG}' must end with an expression whose value is a dict", file, line)


def _bound(tree: ast.Module) -> set[str]:
    """Names a cell binds at its top level: assignments, definitions, imports, loop and with targets."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            targets = {ast.Assign: lambda n: n.targets, ast.AnnAssign: lambda n: [n.target],
                       ast.AugAssign: lambda n: [n.target], ast.For: lambda n: [n.target],
                       ast.With: lambda n: [i.optional_vars for i in n.items if i.optional_vars]}
            for target in targets.get(type(node), lambda n: [])(node):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def check_values_private(cells: list[tuple[str, str | None, Path, int]]) -> None:
    """A cell tagged prose-values or record is left out of the editions (and the site), so what it
    defines stays with it: no shown code cell may use a name that only such a cell binds. `cells`:
    the code cells in order, as (source, the build-only tag it carries or None, file, line of the
    `# %%` marker)."""
    trees = []
    for source, hidden, file, line in cells:
        try:
            trees.append((ast.parse(source), hidden, file, line))
        except SyntaxError:
            return  # reported with its line by the compile check
    shown = set().union(*(_bound(tree) for tree, hidden, _, _ in trees if not hidden))
    private: dict[str, tuple[str, Path, int]] = {}
    for tree, hidden, file, line in trees:
        if hidden:
            private.update({name: (hidden, file, line) for name in _bound(tree) - shown})
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in private:
                tag, home, home_line = private[node.id]
                raise SourceError(f"'{node.id}' is defined only in the '{tag}' cell at {home.name}:{home_line}, "
                                  "which readers do not see: define it in a shown code cell", file,
                                  line + node.lineno)


def _flatten(value: dict, prefix: str, into: dict, where: tuple[Path, int]) -> None:
    for name, item in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SourceError(f"'{TAG}' key {name!r} is not an identifier", *where)
        key = f"{prefix}{name}"
        if isinstance(item, dict):
            _flatten(item, key + ".", into, where)
        elif isinstance(item, PLAIN_TYPES):
            if key in into:
                raise SourceError(f"'{TAG}' key '{key}' is defined twice", *where)
            into[key] = item
        else:
            raise SourceError(f"'{TAG}' value of '{key}' is a {type(item).__name__}: use int, float, str or bool "
                              "(float()/int() on NumPy or torch scalars)", *where)


def run_values(producers: Mapping[str, tuple[Path, int]], executed_cells: list) -> dict[str, object]:
    """The merged values of the prose-values cells (`producers`: cell id -> (file, line)), by dotted
    key, read from the outputs of `executed_cells`."""
    values: dict[str, object] = {}
    for cell in executed_cells:
        where = producers.get(cell.get("id"))
        if where is None:
            continue
        results = [o for o in cell.get("outputs", []) if o.get("output_type") == "execute_result"]
        text = results[-1].get("data", {}).get("text/plain") if results else None
        try:
            value = ast.literal_eval(text) if isinstance(text, str) else None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise SourceError(f"the value of this '{TAG}' cell is not a dict of plain values (int, float, str, "
                              f"bool): {text[:120]!r}", *where) from None
        if not isinstance(value, dict):
            raise SourceError(f"a cell tagged '{TAG}' must end with a dict expression", *where)
        _flatten(value, "", values, where)
    return values


def fill(text: str, file: Path, first_line: int, *, section: int, link: Callable[[str], str],
         values: Mapping[str, object] | None) -> str:
    """`text` (a prose cell starting on `first_line` of `file`) with every placeholder replaced.

    `link(target)` gives what a `{{colab:...}}` becomes; `values` is None when there is no run to
    quote (then `[run:KEY]`).
    """

    def replace(match: re.Match) -> str:
        if match["section"]:
            return str(section)
        if match["target"]:
            return link(match["target"])
        key, spec = match["key"], match["format"] or ""
        if values is None:
            return f"[run:{key}]"
        where = (file, _line(first_line, text, match.start()))
        if key not in values:
            names = sorted(values)
            hint = f" (it has: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''})" if names else ""
            raise SourceError(f"{{{{run:{key}}}}}: the '{TAG}' cells expose no value '{key}'{hint}", *where)
        try:
            shown = format(values[key], spec)
        except (ValueError, TypeError, OverflowError, MemoryError) as err:
            raise SourceError(f"{{{{run:{key}:{spec}}}}}: cannot format {values[key]!r}: {err}", *where) from None
        return shown

    return EXACT.sub(replace, text)
