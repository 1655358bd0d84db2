"""Compose one language's notebook from the shared sources (pure: no I/O, no execution)."""

from __future__ import annotations

import nbformat
from nbformat import NotebookNode

from . import layout
from .sources import LINK_PLACEHOLDER, NotebookSource, ProjectConfig

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


def parameters_source(overrides: dict[str, object]) -> str:
    lines = ["# Parameters injected by build-learning-notebooks"]
    lines += [f"{name} = {value!r}" for name, value in overrides.items()]
    return "\n".join(lines)


def _cells(
    source: NotebookSource, lang: str | None, overrides: dict[str, object], config: ProjectConfig | None = None
) -> list[NotebookNode]:
    """Cells in order: code cells always, prose cells of `lang` only (none when lang is None)."""
    cells = []
    for section in source.sections:
        for cell in section.cells:
            if cell.kind == "markdown":
                if cell.lang == lang:
                    cells.append(nbformat.v4.new_markdown_cell(fill_links(cell.source, config, lang), id=cell.id))
                continue
            metadata = {"tags": list(cell.tags)} if cell.tags else {}
            cells.append(nbformat.v4.new_code_cell(cell.source, id=cell.id, metadata=metadata))
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
    *,
    quick: bool = False,
) -> NotebookNode:
    """The `lang` notebook, without outputs: header, then each section's prose and shared code.

    `quick`: mark it as a quick-mode build in its header.
    """
    cells = [header_cell(source, lang, config, quick)] + _cells(source, lang, overrides, config)
    return _new_notebook(cells, {**build_metadata, "language": lang})


def compose_for_execution(source: NotebookSource, overrides: dict[str, object]) -> NotebookNode:
    """The code cells alone, as they run once for every language."""
    return _new_notebook(_cells(source, None, overrides), {})


def code_sources(notebook: NotebookNode) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def transplant(executed: NotebookNode, target: NotebookNode) -> None:
    """Copy outputs and execution counts of `executed`'s code cells into `target`'s, in order.

    Refuses when the code cells differ: outputs only belong to the code that produced them.
    """
    ours, theirs = code_sources(target), code_sources(executed)
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
            cell.outputs = run.outputs
            cell.execution_count = run.execution_count
