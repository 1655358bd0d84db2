"""Compose one language's notebook from the shared sources (pure: no I/O, no execution).

Two kinds of notebook come from one source:

- the executed notebook (`compose_for_execution`): the prelude and every code cell, each language's
  texts in it (one run fills every language), tagged comments emptied to `#`;
- an edition (`compose`): the header, each section's prose in that language and the code as that
  language's reader sees it (its comments, its say()/say_table() texts only: `localize.edition_code`),
  with the run's outputs copied in by `transplant`. A reader who runs it again sees one language.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import layout, placeholders
from .cache import code_tokens
from .errors import CodeDrift
from .links import Links, from_config
from .localize import edition_code, localize_comments, outputs_for
from .sources import NotebookSource, ProjectConfig, Section, build_only_tag

LANGUAGE_NAMES = {"en": "English", "zh": "中文"}

# Header text per language. Adding a language means adding its entry here (see README).
HEADER_TEXT = {
    "en": {
        "other": "Also in ",
        "generated": "Generated from `{source}` by `build-learning-notebooks`: edit the sources there, not this file.",
        "quick": "**Quick-mode build** (a fast smoke run for tests): its numbers are not the published ones.",
        "shared": "*Shared section.* This section comes from [{title}]({link}), where it is taught; if you have "
                  "read it there, you can skip to the next section. Its code is folded here, and it runs all the same.",
    },
    "zh": {
        "other": "其他语言版本：",
        "generated": "本文件由 `build-learning-notebooks` 从 `{source}` 生成：请修改那里的源文件，不要直接改这个文件。",
        "quick": "**快速模式构建**（供测试用的冒烟运行）：其中的数字不是正式发布的结果。",
        "shared": "*共用的一节。* 本节取自[《{title}》]({link})，完整的讲解在那里；如果已经读过，可以直接跳到下一节。"
                  "这里把本节的代码折叠了起来，但代码照常运行。",
    },
}

HEADER_ID = "header"
INJECTED_ID = "injected-parameters"
PRELUDE_ID = "prelude"
PRELUDE_FILE = Path(__file__).with_name("prelude.py")
RUN_VALUES_KEY = "run_values"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


def header_cell(source: NotebookSource, lang: str, config: ProjectConfig, quick: bool, links: Links) -> NotebookNode:
    """Title; the Colab badge (when a repository is known); the other languages' files (and their
    Colab pages); where the sources are."""
    text = HEADER_TEXT[lang]
    colab = {other: links.colab(source.series, source.name, other) for other in config.languages}
    others = " · ".join(  # the file beside this one (GitHub, Jupyter) and its Colab page
        f"[{LANGUAGE_NAMES.get(other, other)}]({layout.built_name(source.name, other)})"
        + (f" ([Colab]({colab[other]}))" if colab[other] else "")
        for other in config.languages
        if other != lang
    )
    badge = [f"[![Open In Colab]({COLAB_BADGE})]({colab[lang]})"] if colab[lang] else []
    also = [f"{text['other']}{others}"] if others else []
    lines = [
        f"# {source.titles[lang]}",
        "",
        " &nbsp; ".join(badge + also),
        "",
        "> " + text["generated"].format(source=f"notebooks_src/{source.series}/{source.name}/"),
    ]
    if quick:
        lines += ["", "> " + text["quick"]]
    return nbformat.v4.new_markdown_cell("\n".join(lines), id=HEADER_ID)


@functools.cache
def _prelude() -> tuple[tuple[str, ...], int]:
    """The prelude's lines, read once per process (a run cannot change what is composed after it),
    and the index of its `LANG = None` line (found by Python's parser)."""
    text = PRELUDE_FILE.read_text(encoding="utf-8").rstrip("\n")
    [row] = [node.lineno - 1 for node in ast.parse(text).body
             if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["LANG"]]
    return tuple(text.split("\n")), row


def prelude_source(lang: str | None, *, executed: bool = False) -> str:
    """The prelude cell: `LANG = lang` and the `say`/`say_table` helpers, comments in `lang`
    (`executed`, or lang=None: tagged comments emptied, as in the executed code).

    Its code lives once, in `prelude.py` beside this module.
    """
    lines, row = _prelude()
    value = "None" if lang is None else f'"{lang}"'
    text = "\n".join([*lines[:row], f"LANG = {value}", *lines[row + 1:]])
    return localize_comments(text, None if executed else lang)


def prelude_cell(lang: str | None) -> NotebookNode:
    """Hidden in Jupyter and Colab (`source_hidden`); tagged `remove-input` so that static exports
    (Jupyter Book / MyST-NB, nbconvert's TagRemovePreprocessor) leave its code out: it has no output."""
    return nbformat.v4.new_code_cell(prelude_source(lang), id=PRELUDE_ID,
                                     metadata={"jupyter": {"source_hidden": True}, "tags": [PRELUDE_ID, "remove-input"]})


def has_heading(section: Section) -> bool:
    """Whether the section's prose opens a numbered part of the notebook: a level-2 heading (`## ...`)."""
    return any(
        line.startswith("## ") for cell in section.cells if cell.kind == "markdown" for line in cell.source.splitlines()
    )


def section_numbers(sections: tuple[Section, ...]) -> list[int]:
    """The number `{{section}}` stands for in each section: 1 + the headed sections before it.

    A section without a `##` heading continues the one before it and takes its number, so a shared
    piece of code (the environment report, say) can be its own file without shifting the numbers.
    """
    numbers, count = [], 0
    for section in sections:
        count += has_heading(section)
        numbers.append(max(count, 1))
    return numbers


def parameters_source(overrides: dict[str, object]) -> str:
    lines = ["# Parameters injected by build-learning-notebooks"]
    lines += [f"{name} = {value!r}" for name, value in overrides.items()]
    return "\n".join(lines)


def code_metadata(tags: tuple[str, ...], included: bool) -> dict:
    """A code cell's metadata in an edition: its tags; a cell tagged `hide-input` (by its source, or
    because it belongs to a section included from another notebook) has its code folded in Jupyter
    and Colab (`jupyter.source_hidden`) and behind a toggle on the site."""
    tags = list(tags)
    jupyter = {}
    if included and "hide-input" not in tags:  # nbformat: tags are unique
        tags.append("hide-input")
    if "hide-input" in tags:
        jupyter["source_hidden"] = True
    metadata = {"jupyter": jupyter} if jupyter else {}
    if tags:
        metadata["tags"] = tags
    return metadata


def is_build_only(cell: NotebookNode) -> bool:
    """A cell of the executed notebook that no edition shows (`sources.build_only_tag`): a
    `prose-values` cell (numbers for the prose; the editions carry them in their metadata) or a
    `record` cell (the run's record, such as results.json). It runs once, with everything else."""
    return build_only_tag(cell.get("metadata", {}).get("tags", [])) is not None


def shared_note(section: Section, lang: str, cell_id: str, link: Callable[[str, str], str]) -> NotebookNode:
    """The note that opens a headed section included from another notebook: where it is taught, and
    that a reader who has read it there may skip it."""
    series, name = section.home
    text = HEADER_TEXT[lang]["shared"].format(title=section.home_titles.get(lang, name), link=link(series, name))
    return nbformat.v4.new_markdown_cell("> " + text, id=f"{cell_id}-shared")


def _cells(source: NotebookSource, lang: str | None, overrides: dict[str, object],
           prose: Callable[[object, int], str] | None = None,
           link: Callable[[str, str], str] | None = None) -> list[NotebookNode]:
    """Cells in order: the prelude right before the first code cell (so the opening prose comes
    first), code cells always (as `lang` shows them), prose cells of `lang` filled by
    `prose(cell, section number)`; a headed section included from another notebook gets a note after
    its first prose cell (`link(series, name)` is where its home notebook is). lang=None: the
    notebook that executes, without prose."""
    cells = []
    for ordinal, section in zip(section_numbers(source.sections), source.sections):
        note = lang is not None and section.folded and has_heading(section)
        for cell in section.cells:
            if cell.kind == "markdown":
                if cell.lang == lang:
                    cells.append(nbformat.v4.new_markdown_cell(prose(cell, ordinal), id=cell.id))
                    if note:
                        cells.append(shared_note(section, lang, cell.id, link))
                        note = False
                continue
            if lang is not None and build_only_tag(cell.tags):
                continue  # numbers the prose quotes, or the run's record: the reader's edition leaves it out
            metadata = code_metadata(cell.tags, section.folded) if lang is not None else (
                {"tags": list(cell.tags)} if cell.tags else {})
            if not any(c.cell_type == "code" for c in cells):
                cells.append(prelude_cell(lang))
            code = localize_comments(cell.source, lang)
            if lang is not None:
                code = edition_code(code, lang)
            cells.append(nbformat.v4.new_code_cell(code, id=cell.id, metadata=metadata))
            if "parameters" in cell.tags and overrides:
                cells.append(
                    nbformat.v4.new_code_cell(
                        parameters_source(overrides), id=INJECTED_ID, metadata={"tags": [INJECTED_ID]}
                    )
                )
    if not any(c.cell_type == "code" for c in cells):
        cells.append(prelude_cell(lang))
    return cells


def _new_notebook(cells: list[NotebookNode], build_metadata: dict) -> NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.nbformat_minor = 5
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        layout.METADATA_KEY: build_metadata,
    }
    return notebook


def compose(
    source: NotebookSource,
    lang: str,
    config: ProjectConfig,
    overrides: dict[str, object],
    build_metadata: dict,
    values: dict[str, object] | None = None,
    *,
    quick: bool = False,
    links: Links | None = None,
) -> NotebookNode:
    """The `lang` edition, without outputs: header, then each section's prose and shared code.

    `values`: what the run's `prose-values` cells exposed, by dotted key, for the `{{run:...}}`
    placeholders (None: no run; the prose shows their names). The edition leaves those cells out,
    so it records every value as `run_values` in its metadata: a later build that reuses this run
    (a prose edit quoting another value) reads them there.
    `quick`: mark it as a quick-mode build in its header. `links`: where Colab links point (default:
    config.toml's repository, if it names one); recorded as `colab` in the metadata.
    """
    links = links or from_config(config)

    def prose(cell, ordinal: int) -> str:
        return placeholders.fill(cell.source, cell.file, cell.first_line, section=ordinal, values=values,
                                 link=lambda target: links.prose_link(*target.split("/"), lang, source.series))

    cells = [header_cell(source, lang, config, quick, links),
             *_cells(source, lang, overrides, prose,
                     link=lambda series, name: links.prose_link(series, name, lang, source.series))]
    metadata = {**build_metadata, "language": lang}
    if links.record:
        metadata["colab"] = links.record
    if values:
        metadata[RUN_VALUES_KEY] = dict(sorted(values.items()))
    return _new_notebook(cells, metadata)


def compose_for_execution(source: NotebookSource, overrides: dict[str, object], lang: str | None = None) -> NotebookNode:
    """The code cells alone, as they run once for every language (`LANG = None`).

    `lang` sets the prelude's LANG instead (tests that exec the cells in-process use "en"); the
    code still holds every language's texts.
    """
    cells = _cells(source, None, overrides)
    cells[0].source = prelude_source(lang, executed=True)  # the first cell: no prose here
    return _new_notebook(cells, {})


def code_sources(notebook: NotebookNode) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def notebook_language(notebook: NotebookNode) -> str | None:
    return notebook.metadata.get(layout.METADATA_KEY, {}).get("language")


def comparable_code(notebook: NotebookNode, lang: str | None = None) -> list[tuple[str, list]]:
    """(id, code tokens) of each code cell an edition shows, but the builder's prelude, as `lang`'s
    edition has them (lang=None: without any language's texts): equal for the executed notebook and
    every edition of one source, comments and layout aside."""
    return [(cell.get("id", ""), code_tokens(edition_code(cell.source, lang))) for cell in shown_code(notebook)
            if cell.get("id") != PRELUDE_ID]


def shown_code(notebook: NotebookNode) -> list[NotebookNode]:
    """The code cells an edition shows: all but the build-only cells the executed notebook has."""
    return [cell for cell in notebook.cells if cell.cell_type == "code" and not is_build_only(cell)]


def transplant(executed: NotebookNode, target: NotebookNode) -> None:
    """Copy outputs and execution counts of `executed`'s code cells into `target`'s, in order (the
    executed notebook's build-only cells, which no edition shows, aside).

    Only the outputs of `target`'s language are copied (and the untagged ones). Refuses (CodeDrift)
    when the code differs, comments and the other languages' texts aside: outputs only belong to the
    code that produced them.
    """
    lang = notebook_language(target)
    ours, theirs = comparable_code(target, lang), comparable_code(executed, lang)
    if ours != theirs:
        mismatch = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        raise CodeDrift(f"cannot embed the run's outputs: code cell {mismatch + 1} differs "
                        f"({len(ours)} code cells here, {len(theirs)} executed)")
    runs = iter(shown_code(executed))
    for cell in target.cells:
        if cell.cell_type == "code":
            run = next(runs)
            cell.outputs = outputs_for(run.outputs, lang) if lang else run.outputs
            cell.execution_count = run.execution_count
