"""Compose one language's notebook from the shared sources (pure: no I/O, no execution)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import layout
from . import placeholders
from .localize import localize_code, outputs_for, strip_comments
from .sources import LINK_PLACEHOLDER, NotebookSource, ProjectConfig, Section

LANGUAGE_NAMES = {"en": "English", "zh": "中文"}

# Header text per language. Adding a language means adding its entry here (see README).
HEADER_TEXT = {
    "en": {
        "other": "Also in ",
        "generated": "Generated from `{source}` by `build-learning-notebooks`: edit the sources there, not this file.",
        "quick": "**Quick-mode build** (a fast smoke run for tests): its numbers are not the published ones.",
    },
    "zh": {
        "other": "其他语言版本：",
        "generated": "本文件由 `build-learning-notebooks` 从 `{source}` 生成：请修改那里的源文件，不要直接改这个文件。",
        "quick": "**快速模式构建**（供测试用的冒烟运行）：其中的数字不是正式发布的结果。",
    },
}

HEADER_ID = "header"
INJECTED_ID = "injected-parameters"
PRELUDE_ID = "prelude"
PRELUDE_FILE = Path(__file__).with_name("prelude.py")
PRELUDE_LANG = re.compile(r"^LANG = None$", re.M)
SECTION_PLACEHOLDER = "{{section}}"
RUN_VALUES_KEY = "run_values"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


def built_name(source: NotebookSource, lang: str) -> str:
    """File name of the built notebook, language included so two downloads never collide."""
    return layout.built_name(source.name, lang)


def colab_url(config: ProjectConfig, source: NotebookSource, lang: str) -> str:
    return colab_url_for(config, source.series, source.name, lang)


def colab_url_for(config: ProjectConfig, series: str, name: str, lang: str) -> str:
    path = f"{layout.BUILD_DIR}/{series}/{layout.built_name(name, lang)}"
    return f"https://colab.research.google.com/github/{config.repository}/blob/{config.branch}/{path}"


def fill_links(text: str, config: ProjectConfig, lang: str) -> str:
    """Replace each `{{colab:SERIES/NOTEBOOK}}` in prose with that notebook's Colab URL in `lang`."""
    return LINK_PLACEHOLDER.sub(lambda m: colab_url_for(config, *m["target"].split("/"), lang), text)


def header_cell(source: NotebookSource, lang: str, config: ProjectConfig, quick: bool) -> NotebookNode:
    text = HEADER_TEXT[lang]
    others = " · ".join(  # the file beside this one (GitHub, Jupyter) and its Colab page
        f"[{LANGUAGE_NAMES.get(other, other)}]({built_name(source, other)}) ([Colab]({colab_url(config, source, other)}))"
        for other in config.languages
        if other != lang
    )
    lines = [
        f"# {source.titles[lang]}",
        "",
        f"[![Open In Colab]({COLAB_BADGE})]({colab_url(config, source, lang)})"
        + (f" &nbsp; {text['other']}{others}" if others else ""),
        "",
        "> " + text["generated"].format(source=f"notebooks_src/{source.series}/{source.name}/"),
    ]
    if quick:
        lines += ["", "> " + text["quick"]]
    return nbformat.v4.new_markdown_cell("\n".join(lines), id=HEADER_ID)


def prelude_source(lang: str | None) -> str:
    """The prelude cell: `LANG` and the `say`/`say_table` helpers, comments in `lang`.

    Its code lives once, in `prelude.py` beside this module; `lang=None` is the executed version
    (every language shown, each output tagged with its language).
    """
    text = localize_code(PRELUDE_FILE.read_text(encoding="utf-8").rstrip("\n"), lang)
    return PRELUDE_LANG.sub(f"LANG = {lang!r}".replace("'", '"'), text, count=1)


def prelude_cell(lang: str | None) -> NotebookNode:
    return nbformat.v4.new_code_cell(
        prelude_source(lang), id=PRELUDE_ID, metadata={"jupyter": {"source_hidden": True}, "tags": [PRELUDE_ID]}
    )


def fill_sections(text: str, ordinal: int) -> str:
    """`{{section}}` in prose is the section's number in this notebook (see `section_numbers`)."""
    return text.replace(SECTION_PLACEHOLDER, str(ordinal))


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


def _cells(
    source: NotebookSource,
    lang: str | None,
    overrides: dict[str, object],
    config: ProjectConfig | None = None,
    values: dict[str, object] | None = None,
    used: dict[str, object] | None = None,
) -> list[NotebookNode]:
    """Cells in order: the prelude, code cells always (comments in `lang`), prose cells of `lang` only.

    lang=None: the notebook that executes, with no prose and no localized comments.
    """
    cells = [prelude_cell(lang)]
    for ordinal, section in zip(section_numbers(source.sections), source.sections):
        for cell in section.cells:
            if cell.kind == "markdown":
                if cell.lang == lang:
                    text = fill_sections(fill_links(cell.source, config, lang), ordinal)
                    text = placeholders.fill(cell, text, values, used)
                    cells.append(nbformat.v4.new_markdown_cell(text, id=cell.id))
                continue
            metadata = {"tags": list(cell.tags)} if cell.tags else {}
            cells.append(nbformat.v4.new_code_cell(localize_code(cell.source, lang), id=cell.id, metadata=metadata))
            if "parameters" in cell.tags and overrides:
                cells.append(
                    nbformat.v4.new_code_cell(
                        parameters_source(overrides), id=INJECTED_ID, metadata={"tags": [INJECTED_ID]}
                    )
                )
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
) -> NotebookNode:
    """The `lang` notebook, without outputs: header, then each section's prose and shared code.

    `values`: what the run exposed for `{{run:...}}` placeholders (None: show their names); the
    values the prose quotes are recorded as `run_values` in the notebook's metadata.
    `quick`: mark it as a quick-mode build in its header.
    """
    used: dict[str, object] = {}
    cells = [header_cell(source, lang, config, quick)] + _cells(source, lang, overrides, config, values, used)
    metadata = {**build_metadata, "language": lang}
    if used:
        metadata[RUN_VALUES_KEY] = dict(sorted(used.items()))
    return _new_notebook(cells, metadata)


def compose_for_execution(
    source: NotebookSource, overrides: dict[str, object], lang: str | None = None
) -> NotebookNode:
    """The code cells alone, as they run once for every language (`LANG = None`).

    `lang` sets the prelude's LANG instead (tests that exec the cells in-process use "en").
    """
    cells = _cells(source, None, overrides)
    if lang is not None:
        cells[0] = nbformat.v4.new_code_cell(
            PRELUDE_LANG.sub(f'LANG = "{lang}"', prelude_source(None), count=1), id=PRELUDE_ID, metadata=cells[0].metadata
        )
    return _new_notebook(cells, {})


def code_sources(notebook: NotebookNode) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def comparable_code(notebook: NotebookNode) -> list[tuple[str, str]]:
    """(id, code without comments) of each code cell: equal in every language and in the executed notebook."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        code = strip_comments(cell.source)
        if cell.get("id") == PRELUDE_ID:
            code = re.sub(r"^LANG = .*$", "LANG = None", code, count=1, flags=re.M)
        found.append((cell.get("id", ""), code))
    return found


def notebook_language(notebook: NotebookNode) -> str | None:
    return notebook.metadata.get(layout.METADATA_KEY, {}).get("language")


def transplant(executed: NotebookNode, target: NotebookNode) -> None:
    """Copy outputs and execution counts of `executed`'s code cells into `target`'s, in order.

    Only the outputs of `target`'s language are copied (and the untagged ones). Refuses when the
    code cells differ, comments aside: outputs only belong to the code that produced them.
    """
    ours, theirs = comparable_code(target), comparable_code(executed)
    if ours != theirs:
        mismatch = next(
            (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs))
        )
        raise ValueError(
            f"cannot transplant outputs: code cell {mismatch + 1} differs "
            f"({len(ours)} code cells here, {len(theirs)} executed)"
        )
    runs = (c for c in executed.cells if c.cell_type == "code")
    for cell in target.cells:
        if cell.cell_type == "code":
            run = next(runs)
            lang = notebook_language(target)
            cell.outputs = outputs_for(run.outputs, lang) if lang else run.outputs
            cell.execution_count = run.execution_count
