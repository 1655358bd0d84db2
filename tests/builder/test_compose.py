"""Composition per language, parameter injection, transplanting outputs (pure parts)."""

from __future__ import annotations

import copy
from dataclasses import replace

import nbformat
import pytest

from learning_notebooks.compose import code_sources, comparable_code, compose, compose_for_execution, transplant
from learning_notebooks.errors import CodeDrift
from learning_notebooks.links import Links
from learning_notebooks.sources import load_config, load_notebook

from fixture_project import FIXTURE

SRC = FIXTURE / "notebooks_src"


@pytest.fixture(scope="module")
def config():
    return load_config(SRC)


@pytest.fixture(scope="module")
def source(config):
    return load_notebook(SRC, "demo", "hello", config)


def prose(notebook):
    return [c.source for c in notebook.cells[1:] if c.cell_type == "markdown"]


def test_each_language_gets_its_own_prose_and_all_code(source, config):
    en = compose(source, "en", config, {}, {})
    zh = compose(source, "zh", config, {}, {})
    assert prose(en) == [
        "## 1. Introduction\nWe add numbers.",
        "## 2. Compute\nThe sum of the first STEPS integers.",
        "The run found a total of [run:sums.total], [run:sums.mean] per step.",  # no run: names, not numbers
    ]
    assert prose(zh)[0].startswith("## 1. 简介") and prose(zh)[1].startswith("## 2. 计算")  # {{section}} filled
    assert comparable_code(en) == comparable_code(zh) == comparable_code(compose_for_execution(source, {}))
    assert 'LANG = "en"' in code_sources(en)[0] and "[zh]" not in code_sources(en)[0]
    assert 'LANG = "zh"' in code_sources(zh)[0]
    assert code_sources(en)[1:] != code_sources(zh)[1:]  # localized comments
    nbformat.validate(en)
    nbformat.validate(zh)


FIXTURE_LINKS = Links("example/fixture", "main")
COLAB_ZH = "https://colab.research.google.com/github/example/fixture/blob/main/build/demo/hello.zh.ipynb"


def test_header_has_title_other_language_colab_and_source(source, config):
    header = compose(source, "zh", config, {}, {}, links=FIXTURE_LINKS).cells[0].source
    assert header.startswith("# 你好，测试夹具\n")
    assert "其他语言版本：[English](hello.en.ipynb)" in header
    assert f"([Colab]({FIXTURE_LINKS.colab('demo', 'hello', 'en')}))" in header
    assert f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({COLAB_ZH})" in header
    assert "notebooks_src/demo/hello/" in header
    assert "快速模式" not in header
    assert "快速模式" in compose(source, "zh", config, {}, {"quick": True}, quick=True).cells[0].source


def test_without_a_repository_the_header_has_no_colab_badge_or_link(source, config):
    notebook = compose(source, "en", config, {}, {}, links=Links(None))
    header = notebook.cells[0].source
    assert header.split("\n")[2] == "Also in [中文](hello.zh.ipynb)"
    assert "colab" not in header.lower() and "colab" not in notebook.metadata["learning_notebooks"]
    assert compose(source, "en", config, {}, {}, links=FIXTURE_LINKS).metadata["learning_notebooks"]["colab"] == \
        "example/fixture@main"


def test_parameters_are_injected_after_the_parameters_cell(source):
    plain = compose_for_execution(source, {})
    quick = compose_for_execution(source, {"STEPS": 2})
    assert len(quick.cells) == len(plain.cells) + 1
    assert quick.cells[0].id == "prelude" and "LANG = None" in quick.cells[0].source
    assert "parameters" in quick.cells[1].metadata["tags"]
    assert quick.cells[2].id == "injected-parameters"
    assert "STEPS = 2" in quick.cells[2].source
    assert all(c.id != "injected-parameters" for c in plain.cells)


def test_cell_ids_are_stable_and_unique(source, config):
    one, two = compose(source, "en", config, {}, {}), compose(source, "en", config, {}, {})
    ids = [c.id for c in one.cells]
    assert ids == [c.id for c in two.cells]
    assert len(set(ids)) == len(ids)


def executed_copy(notebook):
    executed = copy.deepcopy(notebook)
    for number, cell in enumerate(c for c in executed.cells if c.cell_type == "code"):
        cell.execution_count = number + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"out {number}\n")]
    return executed


def test_transplant_copies_outputs_into_every_language(source, config):
    executed = executed_copy(compose_for_execution(source, {}))
    for lang in ("en", "zh"):
        notebook = compose(source, lang, config, {}, {})
        transplant(executed, notebook)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert [c.outputs[0].text for c in code] == [f"out {i}\n" for i in range(len(code))]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1))


def test_transplant_refuses_different_code(source, config):
    executed = executed_copy(compose_for_execution(source, {}))
    executed.cells[2].source += "\nprint('changed')"
    with pytest.raises(CodeDrift, match="code cell 2 differs"):  # the prelude aside
        transplant(executed, compose(source, "en", config, {}, {}))
    shorter = executed_copy(compose_for_execution(source, {}))
    shown = [i for i, c in enumerate(shorter.cells) if c.cell_type == "code" and "prose-values" not in c.metadata.get("tags", [])]
    del shorter.cells[shown[-1]]
    with pytest.raises(CodeDrift, match="differs"):
        transplant(shorter, compose(source, "en", config, {}, {}))


def test_colab_placeholders_in_prose_become_urls_in_each_language_or_paths(source, config):
    intro = source.sections[0]
    en, zh = intro.cells[:2]
    linked = replace(source, sections=(replace(intro, cells=(en, replace(zh, source="见 {{colab:demo/hello}}、"
                                                                                  "{{colab:other/nb}}"))),))
    notebook = compose(linked, "zh", config, {}, {}, links=FIXTURE_LINKS)
    assert notebook.cells[1].source == f"见 {COLAB_ZH}、" + FIXTURE_LINKS.colab("other", "nb", "zh")
    without = compose(linked, "zh", config, {}, {}, links=Links(None))
    assert without.cells[1].source == "见 hello.zh.ipynb、../other/nb.zh.ipynb"  # the built files, relative


def test_a_section_without_a_heading_continues_the_numbering_of_the_one_before():
    from pathlib import Path

    from learning_notebooks.compose import section_numbers
    from learning_notebooks.sources import Cell, Section

    def section(*texts):
        return Section(Path("x.py"), tuple(Cell("markdown", t, Path("x.py"), 1, "en") for t in texts))

    sections = (section("intro", "## 1. Setup"), section("the environment"), section("## {{section}}. Masks"),
                section("## {{section}}. Decoder"))
    assert section_numbers(sections) == [1, 1, 2, 3]
    assert section_numbers((section("no heading yet"), section("## {{section}}. First"))) == [1, 1]


def test_only_the_executed_notebook_has_the_prose_values_cell(source, config):
    """It runs once with the rest; no edition shows it (its values are in the edition's metadata),
    and the comparison of code between editions and the run leaves it aside."""
    executed = compose_for_execution(source, {})
    assert [c.source for c in executed.cells if "prose-values" in c.metadata.get("tags", [])] == [
        '{"sums": {"total": total, "mean": total / STEPS}}']
    for lang in ("en", "zh"):
        edition = compose(source, lang, config, {}, {}, values={"sums.total": 10, "sums.mean": 2.0})
        assert not any("sums" in c.source and "STEPS}}" in c.source for c in edition.cells if c.cell_type == "code")
        assert len(code_sources(edition)) == len(code_sources(executed)) - 1
        assert edition.metadata["learning_notebooks"]["run_values"] == {"sums.mean": 2.0, "sums.total": 10}
        assert comparable_code(edition) == comparable_code(executed)
