"""What makes one shared code cell speak each reader's language: tagged comments, the language
arguments of `say`/`say_table`, and language-tagged outputs.

Comments: a full-line comment `# [en] text` belongs to English, `# [zh] text` to Chinese. A block of
consecutive `# [en]` lines is followed directly by its `# [zh]` block at the same indentation
(languages in config order). Each edition keeps its own language's lines, shown as plain `# text`,
and the untagged comments; the executed code keeps neither language (the tagged lines become empty
`#` comments, so line numbers in tracebacks still match the section file).

Messages: `say(en=..., zh=...)` and `say_table(rows, en=[...], zh=[...])` name one text per
language, as keyword arguments. The executed code keeps them all (one run fills every language);
each edition keeps only its own (`edition_code`), found with Python's own parser and removed
without changing the line count. A call whose languages cannot be told apart (`**texts`, a missing
language) is refused before anything runs.

Outputs: the prelude's `say`/`say_table` display one output per language, each carrying
`{"lang": "<code>"}` in its output metadata. An edition keeps the untagged outputs and those of its
own language (`outputs_for`); `missing_twins` finds tagged outputs whose other languages are missing.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import re
import tokenize
from dataclasses import dataclass

TAGGED_COMMENT = re.compile(r"^(?P<indent>[ \t]*)# \[(?P<lang>[A-Za-z]{2}(?:-[A-Za-z]+)?)\](?: (?P<text>.*)|$)")
OUTPUT_LANG_KEY = "lang"
SAY_FUNCTIONS = {"say": 0, "say_table": 1}  # name -> how many positional arguments it takes (rows)


class PairingError(ValueError):
    """A cell's language markup is wrong; `row` is the 0-based line in the cell."""

    def __init__(self, message: str, row: int) -> None:
        super().__init__(message)
        self.row = row


# ---- comments ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaggedLine:
    row: int  # 0-based line index in the cell
    indent: str
    lang: str
    text: str


def _comments(source: str) -> list[tuple[int, bool, str]] | None:
    """(0-based row, alone on its line, text) of each comment token (None: the cell does not tokenize)."""
    try:
        return [
            (token.start[0] - 1, not token.line[: token.start[1]].strip(), token.string)
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def tagged_lines(source: str) -> list[TaggedLine]:
    """The full-line `# [xx]` comments of a code cell (never text inside a string literal)."""
    lines = source.split("\n")
    found = []
    for row, alone, _ in _comments(source) or []:
        match = TAGGED_COMMENT.match(lines[row]) if alone else None
        if match:
            found.append(TaggedLine(row, match["indent"], match["lang"], match["text"] or ""))
    return found


def check_comment_pairs(source: str, languages: tuple[str, ...]) -> None:
    """Raise PairingError at the first localized comment that breaks the pattern.

    A run of consecutive tagged lines at one indentation is a sequence of blocks, one language
    each; the blocks must go through `languages` in order, one block per language, as many
    rounds as the author likes (en, zh, en, zh is two pairs).
    """
    for row, alone, text in _comments(source) or []:
        if not alone and TAGGED_COMMENT.match(text):
            raise PairingError("a localized comment ('# [xx] ...') must be on its own line, above the code", row)
    runs: list[list[TaggedLine]] = []
    for line in tagged_lines(source):
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


def localize_comments(source: str, lang: str | None) -> str:
    """The cell's comments as `lang`'s edition shows them; `lang=None`: the executed code (tagged
    lines emptied to `#`)."""
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


# ---- say() and say_table() -----------------------------------------------------------------------


def _say_calls(source: str) -> list[ast.Call]:
    if not any(name in source for name in SAY_FUNCTIONS):
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SAY_FUNCTIONS]


def check_say_calls(source: str, languages: tuple[str, ...]) -> None:
    """Raise PairingError at the first say()/say_table() call whose texts are not one keyword
    argument per configured language (so that each edition can keep its own)."""
    for call in sorted(_say_calls(source), key=lambda node: (node.lineno, node.col_offset)):
        name, row = call.func.id, call.lineno - 1
        given = [k.arg for k in call.keywords]
        if None in given or any(isinstance(a, ast.Starred) for a in call.args):
            raise PairingError(f"{name}() with **texts or *args: give each language's text as a keyword argument "
                               f"({', '.join(f'{lang}=...' for lang in languages)}), so each edition shows its own", row)
        if len(call.args) != SAY_FUNCTIONS[name]:
            takes = "the rows, then" if SAY_FUNCTIONS[name] else "only"
            raise PairingError(f"{name}() takes {takes} one keyword argument per language", row)
        unknown = [arg for arg in given if arg not in languages]
        if unknown:
            raise PairingError(f"{name}() keyword '{unknown[0]}' is not a configured language "
                               f"({', '.join(languages)})", row)
        missing = [lang for lang in languages if lang not in given]
        if missing:
            raise PairingError(f"{name}() without {', '.join(f'{m}=' for m in missing)}: "
                               f"give it one text per language ({', '.join(languages)})", row)


def _offset(starts: list[int], lines: list[str], row: int, column: int) -> int:
    """Character offset in the source of ast's (1-based row, UTF-8 byte column)."""
    return starts[row - 1] + len(lines[row - 1].encode("utf-8")[:column].decode("utf-8"))


@functools.lru_cache(maxsize=4096)  # pure; the build asks for the same cells in several places
def edition_code(source: str, lang: str | None) -> str:
    """The code as `lang`'s edition shows it: every say()/say_table() call keeps its `lang=` text
    only, laid out as if written that way (a removed argument takes its line breaks and its comma
    with it, so no blank line or lone bracket is left behind). Calls that do not name `lang` among
    their keywords are left alone (check_say_calls refuses them in sources). Line numbers of the
    build's errors are those of the executed code, which keeps every text.

    `lang=None`: every language's text removed, keeping the line count: the language-neutral code
    that all editions and the executed code share (to compare them, never to show)."""
    lines = source.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    def span(node: ast.AST) -> tuple[int, int]:
        return (_offset(starts, lines, node.lineno, node.col_offset),
                _offset(starts, lines, node.end_lineno, node.end_col_offset))

    cuts = []
    for call in _say_calls(source):
        if lang is not None and lang not in [k.arg for k in call.keywords]:
            continue
        items = sorted([*call.args, *call.keywords], key=lambda node: (node.lineno, node.col_offset))
        for index, item in enumerate(items):
            if not isinstance(item, ast.keyword) or item.arg is None or item.arg == lang:
                continue
            start, stop = span(item)
            comma = source[stop:].lstrip(" \t\n").startswith(",")
            if lang is None:  # the argument and its comma, whatever comes after
                cuts.append((start, source.index(",", stop) + 1 if comma else stop))
            elif index + 1 < len(items):  # up to the next argument: the comma goes with it
                cuts.append((start, span(items[index + 1])[0]))
            else:  # the last: from the end of the argument before it, its trailing comma too
                cuts.append((span(items[index - 1])[1], source.index(",", stop) + 1 if comma else stop))
    kept, end = [], 0
    for start, stop in sorted(cuts):
        if start < end:
            continue  # inside a cut already made (a call nested in a removed text)
        before = source[end:start]
        if lang is None:  # keep the line breaks: line numbers hold
            removed = source[start:stop]
            tail = removed.rsplit("\n", 1)[1] if "\n" in removed else ""
            if "\n" in removed or not source[stop:].split("\n", 1)[0].strip():
                before = before.rstrip(" \t")  # no trailing spaces where the cut ends a line
            kept += [before, "\n" * removed.count("\n") + (tail if not tail.strip() else "")]
        else:
            kept.append(before)
        end = stop
    return "".join(kept) + source[end:]


# ---- outputs -------------------------------------------------------------------------------------


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
