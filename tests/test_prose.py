"""Prose lint over every notebook source: things that render badly but no parser rejects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from learning_notebooks.sources import discover, load_config, load_notebook

SRC = Path(__file__).resolve().parents[1] / "notebooks_src"
CONFIG = load_config(SRC)
CJK = r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]"
SPLIT_CJK = re.compile(rf"{CJK}\n{CJK}")


@pytest.mark.parametrize("series, name", discover(SRC), ids=lambda v: str(v))
def test_chinese_paragraphs_are_not_split_between_characters(series, name):
    """Markdown renders a line break inside a paragraph as a space, which shows between Chinese characters."""
    notebook = load_notebook(SRC, series, name, CONFIG)
    bad = [
        f"{cell.file.name}:{cell.line}"
        for section in notebook.sections
        for cell in section.cells
        if cell.lang == "zh" and SPLIT_CJK.search(cell.source)
    ]
    assert bad == []


def test_the_lint_sees_a_split():
    assert SPLIT_CJK.search("第一行\n第二行") and not SPLIT_CJK.search("第一行\n\n第二段")


@pytest.mark.parametrize("series, name", discover(SRC), ids=lambda v: str(v))
def test_code_cells_are_ascii_so_figures_need_no_cjk_font(series, name):
    """Code is shared by both languages; ASCII plot labels render with matplotlib's default font
    in the Chinese notebook too (no missing-glyph boxes)."""
    notebook = load_notebook(SRC, series, name, CONFIG)
    bad = [f"{c.file.name}:{c.line}" for c in notebook.code_cells() if not c.source.isascii()]
    assert bad == []
