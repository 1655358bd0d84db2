"""Each reader sees one language in the code: an edition's say()/say_table() calls keep its own
texts only, a reader who runs it again sees only that language, and errors keep their lines."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest

from fixture_project import Project
from learning_notebooks.compose import compose, compose_for_execution, transplant
from learning_notebooks.errors import CodeDrift
from learning_notebooks.layout import BUILD_DIR
from learning_notebooks.localize import SAY_FUNCTIONS
from learning_notebooks.sources import load_config, load_notebook

REPO = Path(__file__).resolve().parents[2]
BUILT = sorted((REPO / BUILD_DIR).glob("*/*.ipynb"))
LANGS = ("en", "zh")


def say_keywords(notebook) -> list[set[str]]:
    """The keyword names of every say()/say_table() call in the notebook's code."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in SAY_FUNCTIONS:
                    found.append({k.arg for k in node.keywords})
    return found


@pytest.mark.parametrize("path", BUILT, ids=lambda p: p.name)
def test_every_built_edition_gives_say_its_own_language_only(path):
    notebook = nbformat.read(path, as_version=4)
    lang = notebook.metadata["learning_notebooks"]["language"]
    calls = say_keywords(notebook)
    assert calls and all(keywords == {lang} for keywords in calls), path.name


CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


@pytest.mark.parametrize("path", [p for p in BUILT if ".en." in p.name], ids=lambda p: p.name)
def test_the_code_of_every_english_edition_holds_no_chinese(path):
    """Not in say() texts, comments, strings, nor in a folded prose-values cell: a value the prose of
    only one language needs is a number or a code-like string, and each language's prose words it."""
    notebook = nbformat.read(path, as_version=4)
    bad = [f"cell {cell.id}: {line.strip()[:80]}" for cell in notebook.cells if cell.cell_type == "code"
           for line in cell.source.splitlines() if CJK.search(line)]
    assert bad == []


def rerun(notebook) -> str:
    """What a reader sees printed when running the edition's code again (outside a kernel, say() prints)."""
    out = io.StringIO()
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        for cell in notebook.cells:
            if cell.cell_type == "code":
                exec(compile(cell.source, cell.id, "exec", dont_inherit=True), namespace)
    return out.getvalue()


def said(notebook) -> list[str]:
    """The texts of the language-tagged outputs of a built edition."""
    return [o.data["text/markdown"] for c in notebook.cells if c.cell_type == "code"
            for o in c.outputs if o.get("metadata", {}).get("lang")]


def test_running_an_edition_again_shows_only_its_language(executed_tree: Project, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the fixture writes result.json into the working folder
    en, zh = executed_tree.read("en"), executed_tree.read("zh")
    printed = {"en": rerun(en), "zh": rerun(zh)}
    assert "The sum is 10." in printed["en"] and "总和是 10。" not in printed["en"]
    assert "总和是 10。" in printed["zh"] and "The sum is 10." not in printed["zh"]


@pytest.mark.parametrize("lang", LANGS)
def test_running_the_browser_edition_again_shows_only_its_language(lang, tmp_path, monkeypatch):
    """A real notebook (NumPy only, fast): none of the other language's texts is printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(REPO / BUILD_DIR / "infra-benchmark" / f"kv-cache-browser.{lang}.ipynb", as_version=4)
    other = nbformat.read(REPO / BUILD_DIR / "infra-benchmark" /
                          f"kv-cache-browser.{'zh' if lang == 'en' else 'en'}.ipynb", as_version=4)
    printed = rerun(notebook)
    assert all(text in printed for text in said(notebook))
    assert not [text for text in said(other) if text in printed]


def test_errors_keep_the_line_of_the_section_file_after_a_multi_line_say(project: Project):
    project.append_cell('say(en="one "\n        "two",\n    zh="一"\n       "二")\nassert False, "line check"\n')
    run = project.build("--execute")
    assert run.code == 1 and f"{project.line(5)}: AssertionError: line check" in run.last


def test_the_prelude_comes_after_the_opening_prose_hidden_and_tagged(executed_tree: Project):
    for lang in LANGS:
        cells = executed_tree.read(lang).cells
        first_code = next(i for i, c in enumerate(cells) if c.cell_type == "code")
        assert cells[first_code].id == "prelude" and cells[first_code - 1].cell_type == "markdown"
        assert first_code >= 2  # the header, then the introduction's prose
        assert cells[first_code].metadata["jupyter"]["source_hidden"] is True
        assert "remove-input" in cells[first_code].metadata["tags"]


SRC = Path(__file__).resolve().parents[1] / "fixtures" / "project" / "notebooks_src"


def executed_copy(notebook):
    for number, cell in enumerate(c for c in notebook.cells if c.cell_type == "code"):
        cell.execution_count = number + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"out {number}\n")]
    return notebook


def test_outputs_go_into_an_edition_whose_calls_lost_the_other_texts_but_never_into_other_code():
    config = load_config(SRC)
    source = load_notebook(SRC, "demo", "hello", config)
    executed = executed_copy(compose_for_execution(source, {}))
    for lang in LANGS:
        edition = compose(source, lang, config, {}, {})
        assert all(keywords == {lang} for keywords in say_keywords(edition))
        transplant(executed, edition)  # accepted: only the other language's texts differ
    drifted = compose(source, "en", config, {}, {})
    for cell in drifted.cells:
        cell.source = cell.source.replace("The sum is", "The total is") if cell.cell_type == "code" else cell.source
    with pytest.raises(CodeDrift):
        transplant(executed, drifted)  # its own text changed: not the code that ran


def test_hide_input_folds_the_code_once_whether_tagged_or_included():
    # nbformat requires unique tags: a `hide-input` cell of a section another notebook includes is folded once.
    from learning_notebooks.compose import code_metadata
    assert code_metadata(("hide-input",), True) == {"jupyter": {"source_hidden": True}, "tags": ["hide-input"]}
    assert code_metadata((), True) == {"jupyter": {"source_hidden": True}, "tags": ["hide-input"]}
    assert code_metadata(("hide-input",), False) == {"jupyter": {"source_hidden": True}, "tags": ["hide-input"]}
    assert code_metadata(("parameters",), False) == {"tags": ["parameters"]}
