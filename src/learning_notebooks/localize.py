"""Localized comments in shared code cells, and language-tagged outputs.

Comments: a full-line comment `# [en] text` belongs to English, `# [zh] text` to Chinese. A block of
consecutive `# [en]` lines is followed directly by its `# [zh]` block at the same indentation
(languages in config order). Each built notebook keeps its own language's lines, shown as plain
`# text`, and the untagged comments; the executed code keeps neither language (the tagged lines
become empty `#` comments, so line numbers in tracebacks still match the section file). Code compares and
keys with every comment removed (`strip_comments`), so a comment edit never changes the cache key.

Outputs: the prelude's `say`/`say_table` display one output per language, each carrying
`{"lang": "<code>"}` in its output metadata. A built notebook keeps the untagged outputs and
those of its own language (`outputs_for`); `missing_twins` finds tagged outputs whose other
languages are missing.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from dataclasses import dataclass

TAGGED_COMMENT = re.compile(r"^(?P<indent>[ \t]*)# \[(?P<lang>[A-Za-z]{2}(?:-[A-Za-z]+)?)\](?: (?P<text>.*)|$)")
OUTPUT_LANG_KEY = "lang"


@dataclass(frozen=True)
class TaggedLine:
    row: int  # 0-based line index in the cell
    indent: str
    lang: str
    text: str


class PairingError(ValueError):
    """A localized comment block without its twin; `row` is the 0-based line in the cell."""

    def __init__(self, message: str, row: int) -> None:
        super().__init__(message)
        self.row = row


def _comment_rows(source: str) -> set[int] | None:
    """0-based rows whose first non-blank token is a comment (None when the cell does not tokenize)."""
    rows = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and not token.line[: token.start[1]].strip():
                rows.add(token.start[0] - 1)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return rows


def _trailing_tagged(source: str) -> int | None:
    """0-based row of the first `# [xx]` comment that follows code on its line (None: there is none)."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and token.line[: token.start[1]].strip():
                if TAGGED_COMMENT.match(token.string):
                    return token.start[0] - 1
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return None


def say_calls_missing_languages(source: str, languages: tuple[str, ...]) -> list[tuple[int, str]]:
    """(0-based row, message) of each say()/say_table() call that does not name every language."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("say", "say_table")):
            continue
        names = {k.arg for k in node.keywords}
        if None in names:  # say(**texts): cannot tell statically
            continue
        missing = [lang for lang in languages if lang not in names]
        if missing:
            found.append((node.lineno - 1, f"{node.func.id}() without {', '.join(f'{m}=' for m in missing)}: "
                                           f"give it one text per language ({', '.join(languages)})"))
    return found


def tagged_lines(source: str) -> list[TaggedLine]:
    """The full-line `# [xx]` comments of a code cell (never text inside a string literal)."""
    lines = source.split("\n")
    rows = _comment_rows(source)
    found = []
    for row, line in enumerate(lines):
        if rows is not None and row not in rows:
            continue
        match = TAGGED_COMMENT.match(line)
        if match:
            found.append(TaggedLine(row, match["indent"], match["lang"], match["text"] or ""))
    return found


def check_comment_pairs(source: str, languages: tuple[str, ...]) -> None:
    """Raise PairingError at the first localized comment that breaks the pattern.

    A run of consecutive tagged lines at one indentation is a sequence of blocks, one language
    each; the blocks must go through `languages` in order, one block per language, as many
    rounds as the author likes (en, zh, en, zh is two pairs).
    """
    trailing = _trailing_tagged(source)
    if trailing is not None:
        raise PairingError("a localized comment ('# [xx] ...') must be on its own line, above the code", trailing)
    tagged = tagged_lines(source)
    runs: list[list[TaggedLine]] = []
    for line in tagged:
        if runs and runs[-1][-1].row == line.row - 1 and runs[-1][-1].indent == line.indent:
            runs[-1].append(line)
        else:
            runs.append([line])
    for run in runs:
        blocks: list[list[TaggedLine]] = []
        for line in run:
            if blocks and blocks[-1][-1].lang == line.lang:
                blocks[-1].append(line)
            else:
                blocks.append([line])
        for number, block in enumerate(blocks):
            lang = block[0].lang
            if lang not in languages:
                raise PairingError(
                    f"unknown language '{lang}' in a localized comment (configured: {', '.join(languages)})", block[0].row
                )
            expected = languages[number % len(languages)]
            if lang != expected:
                previous = blocks[number - 1] if number else None
                if previous is not None and number % len(languages):
                    raise PairingError(
                        f"'# [{previous[0].lang}]' comment has no '# [{expected}]' twin right after it "
                        f"(found '# [{lang}]' at cell line {block[0].row + 1})",
                        previous[0].row,
                    )
                raise PairingError(
                    f"'# [{lang}]' comment without a preceding '# [{languages[0]}]' block at the same indentation",
                    block[0].row,
                )
        if len(blocks) % len(languages):
            last = blocks[-1]
            missing = languages[len(blocks) % len(languages)]
            raise PairingError(
                f"'# [{last[0].lang}]' comment has no '# [{missing}]' twin right after it "
                "(same indentation, no blank line between)",
                last[0].row,
            )


def check_code_cell(source: str, languages: tuple[str, ...]) -> None:
    """What read_section checks in a code cell: comment twins, and say()/say_table() given every language."""
    check_comment_pairs(source, languages)
    for row, message in say_calls_missing_languages(source, languages):
        raise PairingError(message, row)


def localize_code(source: str, lang: str | None) -> str:
    """The cell as `lang`'s notebook shows it; `lang=None`: the executed code (tagged lines emptied to `#`)."""
    tagged = {line.row: line for line in tagged_lines(source)}
    if not tagged:
        return source
    out = []
    for row, line in enumerate(source.split("\n")):
        comment = tagged.get(row)
        if comment is None:
            out.append(line)
        elif lang is None:
            # An empty comment keeps the line numbers of the section file (IPython drops a cell's
            # leading blank lines, so a blank line would not).
            out.append(f"{comment.indent}#")
        elif comment.lang == lang:
            out.append(f"{comment.indent}# {comment.text}".rstrip())
    return "\n".join(out)


def strip_comments(source: str) -> str:
    """The code with every comment and blank line removed (string literals untouched).

    What the execution key hashes and what outputs are matched on: code tokens only.
    Falls back to the source itself when it does not tokenize.
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    lines = source.split("\n")
    cuts: dict[int, int] = {}  # 0-based row -> column where its comment starts
    in_string: set[int] = set()  # rows continuing a multi-line string: kept verbatim
    fstring_starts = []  # Python 3.12+ tokenizes f-strings in pieces
    for token in tokens:
        if token.type == tokenize.COMMENT:
            cuts[token.start[0] - 1] = token.start[1]
        elif token.type == tokenize.STRING:
            in_string.update(range(token.start[0], token.end[0] - 1))  # 0-based rows strictly inside
        elif token.type == getattr(tokenize, "FSTRING_START", None):
            fstring_starts.append(token.start[0])
        elif token.type == getattr(tokenize, "FSTRING_END", None) and fstring_starts:
            in_string.update(range(fstring_starts.pop(), token.end[0] - 1))
    kept = []
    for row, line in enumerate(lines):
        if row in in_string:
            kept.append(line)
            continue
        line = line[: cuts[row]] if row in cuts else line
        if line.strip():
            kept.append(line.rstrip())
    return "\n".join(kept)


# ---- outputs ---------------------------------------------------------------------------------


def output_lang(output) -> str | None:
    metadata = output.get("metadata") or {}
    lang = metadata.get(OUTPUT_LANG_KEY)
    return lang if isinstance(lang, str) else None


def outputs_for(outputs: list, lang: str) -> list:
    """The outputs a `lang` notebook shows: untagged ones and those tagged `lang`."""
    return [o for o in outputs if output_lang(o) in (None, lang)]


def _shape(outputs: list, lang: str) -> list[str]:
    return [
        "<tagged>" if output_lang(o) is not None else json.dumps(o, sort_keys=True, ensure_ascii=False)
        for o in outputs_for(outputs, lang)
    ]


def missing_twins(per_lang_outputs: dict[str, list], languages: tuple[str, ...]) -> list[str]:
    """Problems with one cell's language-tagged outputs; empty when every tagged output has all its twins.

    `per_lang_outputs` maps each language to the outputs that cell has in that language's notebook
    (the executed notebook's full list for every language works too). Each language must see the
    same untagged outputs with one tagged output of its own language at the same places.
    """
    problems = []
    for lang, outputs in per_lang_outputs.items():
        strays = sorted({output_lang(o) for o in outputs_for(outputs, lang) if output_lang(o) not in (None, lang)})
        unknown = sorted({output_lang(o) for o in outputs if output_lang(o) not in (None, *languages)})
        if unknown:
            problems.append(f"output tagged with unknown language(s) {', '.join(unknown)}")
        if strays:
            problems.append(f"the '{lang}' notebook shows outputs tagged {', '.join(strays)}")
    shapes = {lang: _shape(outputs, lang) for lang, outputs in per_lang_outputs.items()}
    counts = {lang: shape.count("<tagged>") for lang, shape in shapes.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{count} in '{lang}'" for lang, count in counts.items())
        problems.append(f"language-tagged outputs without all their twins ({detail})")
    elif len({tuple(shape) for shape in shapes.values()}) > 1:
        problems.append("language-tagged outputs are not at the same places in every language")
    return problems
