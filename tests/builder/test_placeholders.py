"""Prose that quotes the run: `{{run:KEY:FORMAT}}` filled from the cells tagged prose-values."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixture_project import Project
from learning_notebooks.errors import SourceError
from learning_notebooks.files import notebook_bytes
from learning_notebooks.placeholders import check_prose, check_values_private, fill, run_values


def test_placeholders_are_filled_in_each_language_and_recorded(executed_tree: Project):
    p = executed_tree
    assert p.prose("en")[-1] == "The run found a total of 10, 2.00 per step."
    assert p.prose("zh")[-1] == "运行得到的总和是 10，平均每步 2.00。"
    for lang in ("en", "zh"):
        assert p.meta(lang)["run_values"] == {"sums.mean": 2.0, "sums.total": 10}


def test_the_three_placeholders_fill_in_one_pass_and_name_their_line():
    text = "## {{section}}. Runs\nsee {{colab:demo/hello}}\n{{run:a.b:.1f}} and {{run:c}}"
    filled = fill(text, Path("x.py"), 7, section=3, link=lambda target: f"<{target}>",
                  values={"a.b": 2.25, "c": "ok"})
    assert filled == "## 3. Runs\nsee <demo/hello>\n2.2 and ok"
    assert fill(text, Path("x.py"), 7, section=1, link=str, values=None).endswith("[run:a.b] and [run:c]")
    with pytest.raises(SourceError) as caught:
        fill(text, Path("x.py"), 7, section=1, link=str, values={"a.b": 1.0})
    assert (caught.value.line, "expose no value 'c'" in str(caught.value)) == (9, True)


@pytest.mark.parametrize("text, words", [
    ("{{run:x:>99999999999}}", "width and precision of a format are at most 100"),
    ("{{run:x:.500f}}", "at most 100"),
    ("{{colab:demo/nope}}", "names no notebook"),
    ("{{colab:demo}}", "malformed placeholder"),
    ("{{run:x}", "malformed placeholder"),
])
def test_prose_placeholders_are_checked_before_anything_runs(text, words):
    with pytest.raises(SourceError) as caught:
        check_prose(f"a\n{text}", Path("x.py"), 3, {"demo/hello"}, has_values=True)
    assert caught.value.line == 4 and words in str(caught.value)


def test_a_huge_format_width_is_one_line_before_anything_runs(project: Project):
    project.edit("02_compute.py", "{{run:sums.mean:.2f}}", "{{run:sums.mean:>99999999999}}")
    run = project.build("--execute")
    assert run.code == 2 and run.log.count("\n") == 1 and "executing" not in run.log
    assert run.last.startswith(f"error: {project.notebook / '02_compute.py'}:24: {{{{run:sums.mean:>99999999999}}}}")


def test_a_prose_edit_quotes_the_cached_run(executed: Project):
    project = executed
    project.edit("02_compute.py", "{{run:sums.mean:.2f}} per step", "{{run:sums.mean:.1f}} per step on average")
    run = project.build("--execute")
    assert "demo/hello: cached" in run.log
    assert project.prose("en")[-1] == "The run found a total of 10, 2.0 per step on average."


def test_a_missing_value_is_an_error_with_file_and_line(executed: Project):
    project = executed
    project.edit("02_compute.py", "{{run:sums.mean:.2f}} per step", "{{run:sums.median:.2f}} per step")
    for args in ([], ["--execute"], ["--execute", "--force"]):
        run = project.build(*args)
        assert run.code == 2, run.log
        assert f"{project.notebook / '02_compute.py'}:24: {{{{run:sums.median}}}}: the 'prose-values' cells expose " \
            "no value 'sums.median'" in run.log


def test_a_build_without_outputs_shows_names_not_stale_numbers(executed: Project):
    project = executed
    project.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) + 1 - 1")
    assert "no outputs" in project.build().log
    assert project.prose("en")[-1] == "The run found a total of [run:sums.total], [run:sums.mean] per step."
    assert "run_values" not in project.meta("zh")


def test_the_editions_leave_the_values_cell_out_and_carry_its_values(executed: Project):
    """The reader's edition shows the prose and the lesson's code, not the cell that feeds the prose:
    its values travel in the metadata, under the outputs' digest."""
    for lang in ("en", "zh"):
        notebook = executed.read(lang)
        assert not [c for c in notebook.cells if c.cell_type == "code" and "sums" in c.source and "{" in c.source]
        assert "prose-values" not in str([c.metadata for c in notebook.cells])


def test_check_verifies_the_quoted_values(executed: Project):
    project = executed
    notebook = project.read("en")
    notebook.metadata["learning_notebooks"]["run_values"]["sums.total"] = 11
    project.built("en").write_bytes(notebook_bytes(notebook))
    run = project.build("--check")
    assert run.code == 1 and "hello.en.ipynb: outputs edited by hand" in run.log, run.log

    project.build("--execute")
    assert project.build("--check").code == 0
    text = project.built("zh").read_text(encoding="utf-8").replace("运行得到的总和是 10", "运行得到的总和是 12")
    project.built("zh").write_text(text, encoding="utf-8")
    assert "hello.zh.ipynb: stale" in project.build("--check").log


@pytest.mark.parametrize(
    "old, new, line, words",
    [
        ("{{run:sums.total}}, ", "{{run:sums total}}, ", 24, "malformed placeholder"),
        ('{"sums": {"total": total, "mean": total / STEPS}}', 'values = {"sums": {"total": total}}', 29,
         "must end with an expression"),
        ('# %% tags=["prose-values"]', "# %%", 24, "no code cell is tagged 'prose-values'"),
    ],
)
def test_bad_placeholders_are_reported_before_anything_runs(project: Project, old, new, line, words):
    project.edit("02_compute.py", old, new)
    run = project.build("--execute")
    assert run.code == 2 and f"02_compute.py:{line}: " in run.log and words in run.log, run.log
    assert "executing" not in run.log


def result_cell(cell_id: str, text: str) -> dict:
    return {"id": cell_id, "cell_type": "code", "outputs": [
        {"output_type": "execute_result", "data": {"text/plain": text}, "metadata": {}, "execution_count": 1}]}


@pytest.mark.parametrize(
    "texts, words",
    [
        (["{'sums': {'total': [10], 'mean': 1.0}}"], "value of 'sums.total' is a list"),
        (["{'sums': {'total': 10}, 'sums.total': 1}"], "is not an identifier"),
        (["None"], "must end with a dict expression"),
        (["<object at 0x7f>"], "is not a dict of plain values"),
        (["{'sums': {'total': 10}}", "{'sums': {'total': 0}}"], "'prose-values' key 'sums.total' is defined twice"),
    ],
)
def test_bad_values_name_the_cell(texts, words):
    producers = {f"c{i}": (Path("x.py"), 10 * (i + 1)) for i in range(len(texts))}
    with pytest.raises(SourceError) as caught:
        run_values(producers, [result_cell(f"c{i}", text) for i, text in enumerate(texts)])
    assert words in str(caught.value) and caught.value.line == 10 * len(texts)


def test_a_value_that_does_not_fit_its_format_names_the_placeholder(executed: Project):
    executed.edit("02_compute.py", "{{run:sums.mean:.2f}}", "{{run:sums.total:.2s}}")
    run = executed.build()
    assert run.code == 2 and run.last.startswith(f"error: {executed.notebook / '02_compute.py'}:24: ")
    assert "cannot format 10" in run.last


VALUES = ("total = 10\ndef share(x):\n    return x / total\n{'sums': {'share': share(5)}}", "prose-values", Path("a.py"), 20)


@pytest.mark.parametrize(
    "shown, line",
    [
        ("print(total)", 31),                          # a name only the hidden cell binds
        ("x = 1\nfor i in range(2):\n    share(i)", 33),  # a function it defines, used inside a loop
    ],
)
def test_shown_code_may_not_use_what_only_a_prose_values_cell_defines(shown, line):
    with pytest.raises(SourceError) as caught:
        check_values_private([VALUES, (shown, None, Path("b.py"), 30)])
    assert "readers do not see" in str(caught.value) and "a.py:20" in str(caught.value)
    assert (caught.value.file, caught.value.line) == (Path("b.py"), line)


@pytest.mark.parametrize(
    "cells",
    [
        [VALUES, ("total = 3\nprint(total)", None, Path("b.py"), 30)],          # shown code binds it too
        [("total = 10", None, Path("b.py"), 1), VALUES, ("print(total)", None, Path("b.py"), 30)],
        [VALUES, ("{'more': {'total': total}}", "prose-values", Path("c.py"), 40)],  # another hidden cell
        [VALUES, ("write(total)", "record", Path("c.py"), 40)],                 # the record may read it
    ],
)
def test_names_that_shown_code_binds_or_only_hidden_cells_read_pass(cells):
    check_values_private(cells)


def test_shown_code_may_not_use_what_only_a_record_cell_defines():
    record = ("RESULTS = {'total': 10}\nopen('r.json', 'w').write(str(RESULTS))", "record", Path("r.py"), 50)
    with pytest.raises(SourceError) as caught:
        check_values_private([record, ("print(RESULTS)", None, Path("b.py"), 60)])
    assert "only in the 'record' cell at r.py:50" in str(caught.value) and caught.value.line == 61


RECORD = ('# %%\nPath(OUTPUT_DIR, "result.json")', '# %% tags=["record"]\nPath(OUTPUT_DIR, "result.json")')


def test_a_record_cell_runs_once_and_no_edition_shows_it(project: Project):
    """The run writes its record (outputs/ gets result.json); the editions leave the cell out."""
    project.edit("02_compute.py", *RECORD)
    run = project.build("--execute")
    assert run.code == 0, run.log
    assert (project.outputs / "result.json").read_text() == '{"steps": 5, "total": 10}'
    for lang in ("en", "zh"):
        assert "result.json" not in project.code_text(lang) and "total = sum(range(STEPS))" in project.code_text(lang)
    assert project.build("--check").code == 0


def test_an_assert_in_a_record_cell_names_its_line_before_anything_runs(project: Project):
    project.edit("02_compute.py", *RECORD)
    project.edit("02_compute.py", 'Path(OUTPUT_DIR, "result.json")', 'assert total\nPath(OUTPUT_DIR, "result.json")')
    run = project.build("--execute")
    assert run.code == 2 and "executing" not in run.log, run.log
    assert run.last.startswith(f"error: {project.notebook / '02_compute.py'}:21: an assert in a cell tagged 'record'")
