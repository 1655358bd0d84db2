"""Read notebook sources: the project config, a notebook's manifest, its section files.

Everything here is checked before anything executes. A problem raises SourceError with
the file and line, so the author can jump straight to it.
"""

from __future__ import annotations

import ast
import keyword
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import jupytext
from jupytext.magics import is_magic
from jupytext.stringparser import StringParser

from . import placeholders
from .errors import SourceError
from .localize import PairingError, check_comment_pairs, check_say_calls

CONFIG_FILE = "config.toml"
MANIFEST_FILE = "notebook.toml"
CONFIG_KEYS = ("languages", "repository", "branch")
MANIFEST_KEYS = ("sections", "unfolded", "title", "quick")
SECTION_PATTERN = re.compile(r"^\d\d_[A-Za-z0-9_]+\.py$")
CELL_MARKER = re.compile(r"^# %%(?!%)")
WELL_FORMED_MARKER = re.compile(r"^# %%( .*)?$")
# Jupytext's percent format, with magics left alone: a commented `# !cmd` stays a comment.
PERCENT_FORMAT = {"extension": ".py", "format_name": "percent", "comment_magics": False}
# Characters str.splitlines() (and so Jupytext) treats as line breaks but Python source does not.
EXTRA_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
ALLOWED_CELL_KEYS = {"lang", "tags"}


@dataclass(frozen=True)
class ProjectConfig:
    """`notebooks_src/config.toml`: languages (the first is the primary) and where Colab finds the files."""

    languages: tuple[str, ...]
    repository: str | None = None  # "owner/name" on GitHub (see links.py for what decides the links)
    branch: str | None = None


@dataclass(frozen=True)
class Cell:
    """One cell of a section file. `lang` is None for shared code cells."""

    kind: str  # "markdown" or "code"
    source: str
    file: Path
    line: int  # line of the `# %%` marker, 1-based
    lang: str | None = None
    tags: tuple[str, ...] = ()
    id: str = ""

    @property
    def first_line(self) -> int:
        """Line of the cell's first line of content in the source file."""
        return self.line + 1

    @property
    def code_line(self) -> int:
        """Line of the cell's first non-blank line: IPython drops leading blank lines before running
        a cell, so its traceback's `line 1` is this line."""
        blank = len(self.source) - len(self.source.lstrip("\n"))
        return self.first_line + blank if self.source.strip() else self.first_line


@dataclass(frozen=True)
class Section:
    """One section file. `home`: for a section included from another notebook, that notebook
    (series, name) and its titles by language; None for the notebook's own sections. `unfolded`: an
    included section this notebook teaches (manifest key `unfolded`), shown like its own sections."""

    file: Path
    cells: tuple[Cell, ...]
    home: tuple[str, str] | None = None
    home_titles: dict[str, str] = field(default_factory=dict)
    unfolded: bool = False

    @property
    def folded(self) -> bool:
        """Whether the editions fold its code and open it with the shared-section note."""
        return self.home is not None and not self.unfolded

    @property
    def name(self) -> str:
        return self.file.stem


@dataclass(frozen=True)
class NotebookSource:
    """One notebook: `notebooks_src/<series>/<name>/`."""

    series: str
    name: str
    folder: Path
    titles: dict[str, str]
    quick: dict[str, object]
    sections: tuple[Section, ...] = field(default=())

    @property
    def target(self) -> str:
        return f"{self.series}/{self.name}"

    def code_cells(self) -> list[Cell]:
        return [cell for section in self.sections for cell in section.cells if cell.kind == "code"]


def read_text(path: Path) -> str:
    """The file's text, UTF-8 without a byte-order mark; otherwise a SourceError naming the line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SourceError("file not found", path) from None
    except OSError as err:
        raise SourceError(f"cannot read: {err.strerror or err}", path) from None
    if data.startswith(b"\xef\xbb\xbf"):
        raise SourceError("starts with a UTF-8 byte-order mark (BOM): save the file as UTF-8 without BOM", path, 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SourceError(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} at column {column} (save the file as UTF-8)", path, line
        ) from None


def _load_toml(path: Path, allowed: tuple[str, ...]) -> tuple[dict, str]:
    """The TOML file as a dict, and its text; a syntax error or a key outside `allowed` names its line."""
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        found = re.search(r"line (\d+)", str(err))
        line = int(found.group(1)) if found else None
        if line is None and "end of document" in str(err):
            line = max(1, len(text.split("\n")) - (1 if text.endswith("\n") else 0))
        raise SourceError(f"malformed TOML: {err}", path, line) from None
    for key in data:
        if key not in allowed:
            raise SourceError(f"unknown key '{key}' (allowed: {', '.join(allowed)})", path, _key_line(text, key))
    return data, text


def _key_line(text: str, key: str, table: str | None = None) -> int | None:
    """Line of `key = ...` (in `[table]` when given) or of the table `[key]`, in TOML text."""
    name = rf"""(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
    current = None
    for number, line in enumerate(text.split("\n"), start=1):
        header = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
        if header:
            current = header.group(1).strip("\"'")
            if table is None and re.fullmatch(name, header.group(1)):
                return number
        elif current == table and re.match(rf"\s*{name}\s*=", line):
            return number
    return None


def _require(data: dict, key: str, kind: type, path: Path):
    if key not in data:
        raise SourceError(f"missing key '{key}'", path)
    if not isinstance(data[key], kind):
        raise SourceError(f"'{key}' must be a {kind.__name__}, not {type(data[key]).__name__}", path)
    return data[key]


def load_config(src_root: Path) -> ProjectConfig:
    path = src_root / CONFIG_FILE
    data, text = _load_toml(path, CONFIG_KEYS)
    languages = _require(data, "languages", list, path)
    if not languages or not all(isinstance(lang, str) and re.fullmatch(r"[a-z]{2}(-[A-Za-z]+)?", lang) for lang in languages):
        raise SourceError("'languages' must list language codes such as \"en\", \"zh\"", path)
    for key in ("repository", "branch"):
        if not isinstance(data.get(key, ""), str):
            raise SourceError(f"'{key}' must be a str, not {type(data[key]).__name__}", path, _key_line(text, key))
    return ProjectConfig(tuple(languages), data.get("repository") or None, data.get("branch") or None)


def discover(src_root: Path) -> list[tuple[str, str]]:
    """(series, notebook) of every folder holding a manifest, sorted."""
    return sorted((p.parent.parent.name, p.parent.name) for p in src_root.glob(f"*/*/{MANIFEST_FILE}"))


def _inside(path: Path, src_root: Path, what: str, where: tuple[Path, int | None]) -> None:
    """`path`, symbolic links followed, stays inside notebooks_src/ (else the build would read another tree)."""
    if not path.resolve().is_relative_to(src_root.resolve()):
        raise SourceError(f"{what} is outside notebooks_src/ ({path} leads to {path.resolve()})", *where)


def _quick(manifest: dict, text: str, path: Path) -> dict[str, object]:
    """The [quick] overrides: each a Python name (not a keyword) with a value Python can write back."""
    quick = manifest.get("quick", {})
    if not isinstance(quick, dict):
        raise SourceError("[quick] must be a table of parameter overrides", path, _key_line(text, "quick"))
    for key, value in quick.items():
        where = (path, _key_line(text, key, "quick"))
        if not key.isidentifier() or keyword.iskeyword(key):
            raise SourceError(f"[quick] key '{key}' is not a name a Python variable can have", *where)
        try:
            literal = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError):
            literal = False
        if not literal:
            raise SourceError(f"[quick] value of '{key}' cannot be written as Python code ({value!r}): "
                              "use a number, string, boolean, list or table", *where)
    return dict(quick)


RECORD_TAG = "record"
BUILD_ONLY_TAGS = (placeholders.TAG, RECORD_TAG)


def build_only_tag(tags) -> str | None:
    """The tag that keeps a code cell out of the editions, if it has one: `prose-values` (numbers
    the prose quotes) or `record` (the run's record, such as results.json). Such a cell runs once,
    with all the others, in the executed notebook; no reader sees it."""
    return next((tag for tag in BUILD_ONLY_TAGS if tag in tags), None)


def check_record_cell(code: str, file: Path, line: int) -> None:
    """A `record` cell writes down what the run found; it proves nothing, because readers do not
    see it: a check belongs in a shown cell, next to the claim it checks."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return  # reported with its line by the compile check
    found = next((node for node in ast.walk(tree) if isinstance(node, ast.Assert)), None)
    if found is not None:
        raise SourceError(f"an assert in a cell tagged '{RECORD_TAG}', which readers do not see: "
                          "check the claim in a shown code cell", file, line + found.lineno)


def load_notebook(src_root: Path, series: str, name: str, config: ProjectConfig) -> NotebookSource:
    """Read and validate the manifest and every section of one notebook: every check of the
    sources happens here, before anything executes."""
    folder = src_root / series / name
    manifest_path = folder / MANIFEST_FILE
    _inside(manifest_path, src_root, f"notebook {series}/{name}", (manifest_path, None))
    manifest, text = _load_toml(manifest_path, MANIFEST_KEYS)

    titles = _require(manifest, "title", dict, manifest_path)
    for lang in config.languages:
        if not isinstance(titles.get(lang), str) or not titles[lang].strip():
            raise SourceError(f"[title] has no '{lang}' title", manifest_path, _key_line(text, "title"))
    for lang in titles:
        if lang not in config.languages:
            raise SourceError(f"[title] language '{lang}' is not configured ({', '.join(config.languages)})",
                              manifest_path, _key_line(text, lang, "title"))
    quick = _quick(manifest, text, manifest_path)

    listed = _require(manifest, "sections", list, manifest_path)
    paths = section_paths(src_root, folder, listed, manifest_path)
    unfolded = _unfolded(manifest, listed, paths, manifest_path)
    sections = tuple(
        read_section(path, config.languages, id_prefix="" if path.parent == folder else f"{path.parent.name}-")
        if path.parent == folder else replace(_included(src_root, path, config.languages), unfolded=path in unfolded)
        for path in paths
    )
    duplicates = _duplicate_ids(sections)
    if duplicates:
        first = duplicates[0]
        raise SourceError(f"two sections give cell id '{first.id}': rename one section file", first.file, first.line)
    cells = [c for s in sections for c in s.cells]
    parameters = [c for c in cells if "parameters" in c.tags]
    if len(parameters) > 1:
        raise SourceError("only one cell may be tagged 'parameters'", parameters[1].file, parameters[1].line)
    if quick and not parameters:
        raise SourceError("[quick] overrides need a code cell tagged 'parameters'", manifest_path,
                          _key_line(text, "quick"))
    producers = [c for c in cells if c.kind == "code" and placeholders.TAG in c.tags]
    for cell in producers:
        placeholders.check_values_cell(cell.source, cell.file, cell.line)
    for cell in (c for c in cells if c.kind == "code" and RECORD_TAG in c.tags):
        check_record_cell(cell.source, cell.file, cell.line)
    placeholders.check_values_private([(c.source, build_only_tag(c.tags), c.file, c.line)
                                       for c in cells if c.kind == "code"])
    notebooks = {f"{s}/{n}" for s, n in discover(src_root)}
    for cell in (c for c in cells if c.kind == "markdown"):
        placeholders.check_prose(cell.source, cell.file, cell.first_line, notebooks, bool(producers))
    return NotebookSource(series, name, folder, dict(titles), quick, sections)


def _unfolded(manifest: dict, listed: list, paths: list[Path], manifest_path: Path) -> set[Path]:
    """The included sections named by the manifest's optional `unfolded` list: sections this notebook
    teaches, so its editions show their code open and without the shared-section note. Each entry
    must be an include listed in `sections`; a problem names the entry's manifest line."""
    entries = manifest.get("unfolded", [])
    if not isinstance(entries, list):
        raise SourceError("'unfolded' must be a list of included section paths", manifest_path,
                          _key_line(manifest_path.read_text(encoding="utf-8"), "unfolded"))
    by_entry = dict(zip(listed, paths))
    found = set()
    for index, entry in enumerate(entries):
        line = _manifest_line(manifest_path, entry, listed.count(entry) + entries[: index + 1].count(entry))
        if not isinstance(entry, str) or entry not in by_entry:
            raise SourceError(f"unfolded section '{entry}' is not listed in 'sections'", manifest_path, line)
        if "/" not in entry:
            raise SourceError(f"unfolded section '{entry}' is this notebook's own (only includes are folded)",
                              manifest_path, line)
        found.add(by_entry[entry])
    return found


def _included(src_root: Path, path: Path, languages: tuple[str, ...]) -> Section:
    """A section of another notebook, with that notebook (its home) and its titles."""
    home = path.parent
    manifest_path = home / MANIFEST_FILE
    titles = {}
    if manifest_path.is_file():
        manifest, _ = _load_toml(manifest_path, MANIFEST_KEYS)
        found = manifest.get("title")
        titles = {lang: found[lang] for lang in languages if isinstance(found, dict) and isinstance(found.get(lang), str)}
    section = read_section(path, languages, id_prefix=f"{home.name}-")
    return replace(section, home=(home.parent.name, home.name), home_titles=titles)


def _manifest_line(manifest_path: Path, entry: object, occurrence: int = 1) -> int | None:
    """Line of the `occurrence`-th quoted `entry` in the manifest (None when it cannot be found)."""
    if not isinstance(entry, str):
        return None
    seen = 0
    for number, line in enumerate(manifest_path.read_text(encoding="utf-8").splitlines(), start=1):
        for quoted in (f'"{entry}"', f"'{entry}'"):
            seen += line.count(quoted)
            if seen >= occurrence:
                return number
    return None


def section_paths(src_root: Path, folder: Path, listed: list, manifest_path: Path) -> list[Path]:
    """The files named by the manifest's `sections`, in order, each checked.

    An entry is a file of this notebook's folder (`03_masks.py`) or, to share a section, a relative
    path to another notebook's section file (`../kv-cache/03_masks.py`) that stays inside
    notebooks_src/. Errors name the manifest line of the entry. Included entries are section
    files, which cannot include anything themselves, so includes cannot form a cycle.
    """
    present = sorted(p.name for p in folder.glob("*.py"))
    root = src_root.resolve()
    paths: list[Path] = []
    seen: dict[Path, int] = {}
    for index, entry in enumerate(listed):
        line = _manifest_line(manifest_path, entry, listed[: index + 1].count(entry))
        if not isinstance(entry, str) or not SECTION_PATTERN.match(Path(entry).name) or "\\" in entry:
            raise SourceError(f"section '{entry}' must be named like 01_setup.py", manifest_path, line)
        if "/" not in entry:
            if entry not in present:
                raise SourceError(f"section '{entry}' is listed but {folder / entry} does not exist", manifest_path, line)
            path = folder / entry
            _inside(path, src_root, f"section '{entry}'", (manifest_path, line))
        else:
            resolved = (folder / entry).resolve()
            if not resolved.is_relative_to(root):
                raise SourceError(f"included section '{entry}' is outside notebooks_src/", manifest_path, line)
            if not resolved.is_file():
                raise SourceError(f"included section '{entry}' does not exist ({resolved})", manifest_path, line)
            path = src_root / resolved.relative_to(root)
        key = path.resolve()
        if key in seen:
            raise SourceError(
                f"section '{entry}' is listed twice in 'sections' (first at line {seen[key]})", manifest_path, line
            )
        seen[key] = line or 0
        paths.append(path)
    unlisted = [p for p in present if folder / p not in paths]
    if unlisted:
        raise SourceError(f"section file(s) not listed in 'sections': {', '.join(unlisted)}", manifest_path)
    return paths


def _duplicate_ids(sections: tuple[Section, ...]) -> list[Cell]:
    seen, duplicates = set(), []
    for cell in (c for s in sections for c in s.cells):
        if cell.id in seen:
            duplicates.append(cell)
        seen.add(cell.id)
    return duplicates


def marker_lines(text: str) -> list[int]:
    """1-based line numbers of the `# %%` cell markers in a percent-format file.

    Lines are split on "\\n" only, as Python counts them (a form feed is not a line break).
    """
    return [n for n, line in enumerate(text.split("\n"), start=1) if CELL_MARKER.match(line)]


def _protect_line_breaks(text: str) -> tuple[str, dict[str, str]]:
    """Replace the characters Jupytext would split lines at, but Python would not, by unused ones."""
    free = (chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text)
    mapping = {char: next(free) for char in EXTRA_LINE_BREAKS if char in text}
    for char, stand_in in mapping.items():
        text = text.replace(char, stand_in)
    return text, {stand_in: char for char, stand_in in mapping.items()}


def _restore(text: str, mapping: dict[str, str]) -> str:
    for stand_in, char in mapping.items():
        text = text.replace(stand_in, char)
    return text


def _yaml_header_end(lines: list[str]) -> int:
    """Number of lines taken by a leading Jupytext YAML header (`# ---` ... `# ---`), 0 when none."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or lines[first].rstrip() != "# ---":
        return 0
    for i in range(first + 1, len(lines)):
        if lines[i].rstrip() == "# ---":
            return i + 1
        if not lines[i].startswith("#"):
            return 0
    return 0


def read_section(path: Path, languages: tuple[str, ...], id_prefix: str = "") -> Section:
    """Parse one percent-format section file into cells, checking headers and language pairing.

    Localized comments (`# [en]` / `# [zh]`) in code cells are checked for their twins too.
    `id_prefix` tells apart the cell ids of a section included from another notebook.
    """
    text = read_text(path).replace("\r\n", "\n")
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if line.startswith("# %%") and CELL_MARKER.match(line) and not WELL_FORMED_MARKER.match(line):
            raise SourceError(f"malformed cell marker '{line.strip()}' (write '# %%' then a space, e.g. '# %% [markdown] lang=\"en\"')", path, number)
    markers = marker_lines(text)
    if not markers:
        raise SourceError("no '# %%' cell marker found", path, 1)
    header = _yaml_header_end(lines[: markers[0] - 1])  # Jupytext's pairing header: ignored
    before = [n for n, line in enumerate(lines[: markers[0] - 1], start=1) if line.strip() and n > header]
    if before:
        raise SourceError("content before the first '# %%' cell marker", path, before[0])

    # Blank lines before the first marker would become a cell of their own.
    body, mapping = _protect_line_breaks("\n".join(lines[markers[0] - 1 :]).rstrip("\n") + "\n")
    notebook = jupytext.reads(body, fmt=PERCENT_FORMAT)
    if len(notebook.cells) != len(markers):
        raise SourceError(
            f"jupytext found {len(notebook.cells)} cells but there are {len(markers)} '# %%' markers", path
        )

    cells = []
    for index, (raw, line) in enumerate(zip(notebook.cells, markers)):
        metadata = dict(raw.metadata)
        metadata.pop("lines_to_next_cell", None)
        if "incorrectly_encoded_metadata" in metadata:
            raise SourceError(
                f"malformed cell header: '{metadata['incorrectly_encoded_metadata']}' "
                '(write options as key="value", e.g. lang="en")',
                path,
                line,
            )
        unknown = set(metadata) - ALLOWED_CELL_KEYS
        if unknown:
            raise SourceError(f"unknown cell option(s): {', '.join(sorted(unknown))}", path, line)
        tags = metadata.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise SourceError("tags must be a list of strings, e.g. tags=[\"parameters\"]", path, line)
        lang = metadata.get("lang")
        if raw.cell_type == "markdown":
            if lang is None:
                raise SourceError(f"prose cell without a language: add lang=\"{languages[0]}\" or another of {', '.join(languages)}", path, line)
            if lang not in languages:
                raise SourceError(f"unknown language '{lang}' (configured: {', '.join(languages)})", path, line)
        elif raw.cell_type == "code":
            if lang is not None:
                raise SourceError("code cells are shared by all languages: remove lang=", path, line)
        else:
            raise SourceError(f"unsupported cell type '{raw.cell_type}'", path, line)
        stem = (id_prefix + path.stem)[:56] if id_prefix else path.stem[:48]
        cell_id = f"{stem}-{index:02d}".replace(".", "-")
        cell = Cell(raw.cell_type, _restore(raw.source, mapping), path, line, lang, tuple(tags), cell_id)
        if cell.kind == "code":
            check_code(cell, languages)
        cells.append(cell)

    check_pairing(cells, languages)
    return Section(path, tuple(cells))


def check_code(cell: Cell, languages: tuple[str, ...]) -> None:
    """A code cell is plain Python: no IPython magic or shell escape (not even commented, which
    Jupytext would turn back into one); it compiles; its tagged comments have their twins and its
    say()/say_table() calls one text per language. Raises SourceError with the line."""
    parser = StringParser("python")
    for offset, text in enumerate(cell.source.split("\n")):
        if not parser.is_quoted() and is_magic(text, "python", True, True):
            raise SourceError(
                f"IPython magic or shell escape in a code cell: '{text.strip()}' "
                "(code cells are plain Python; Jupytext would run even a commented one)",
                cell.file,
                cell.first_line + offset,
            )
        parser.read_line(text)
    try:
        compile(cell.source, str(cell.file), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as err:
        line = cell.first_line + (err.lineno or 1) - 1
        raise SourceError(f"{type(err).__name__}: {err.msg}", cell.file, line) from None
    except ValueError as err:  # e.g. a NUL byte
        raise SourceError(f"cannot compile: {err}", cell.file, cell.first_line) from None
    try:
        check_comment_pairs(cell.source, languages)
        check_say_calls(cell.source, languages)
    except PairingError as err:
        raise SourceError(str(err), cell.file, cell.first_line + err.row) from None


def check_pairing(cells: list[Cell], languages: tuple[str, ...]) -> None:
    """Prose cells come in groups: one cell per language, in the configured order.

    So each English cell is followed directly by its Chinese twin. Reports the first cell that
    breaks the pattern: a missing twin, an extra cell, or the languages out of order.
    """
    expected = 0  # index into `languages` of the language the next prose cell must have
    previous: Cell | None = None
    for cell in cells:
        if cell.kind == "code":
            if expected:
                raise _missing(previous, languages[expected])
            continue
        if cell.lang != languages[expected]:
            if expected:
                raise _missing(previous, languages[expected], found=cell)
            raise SourceError(
                f"'{cell.lang}' prose cell without a preceding '{languages[0]}' cell "
                f"(prose groups go {', '.join(languages)}, one cell each)",
                cell.file,
                cell.line,
            )
        expected = (expected + 1) % len(languages)
        previous = cell
    if expected:
        raise _missing(previous, languages[expected])


def _missing(after: Cell, lang: str, found: Cell | None = None) -> SourceError:
    tail = f"; found '{found.lang}' at line {found.line}" if found else ""
    return SourceError(f"prose cell has no '{lang}' twin right after it{tail}", after.file, after.line)
