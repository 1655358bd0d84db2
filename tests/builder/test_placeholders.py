"""Prose that quotes the run: `{{run:KEY:FORMAT}}` filled from the cells tagged prose-values."""

from __future__ import annotations

import nbformat
import pytest

from fixture_project import Project
from learning_notebooks.files import notebook_bytes


def read(path):
    return nbformat.read(path, as_version=4)


def prose(path) -> list[str]:
    return [c.source for c in read(path).cells[1:] if c.cell_type == "markdown"]


def meta(path) -> dict:
    return read(path).metadata["learning_notebooks"]


def test_placeholders_are_filled_in_each_language_and_recorded(executed_project: Project):
    p = executed_project
    assert prose(p.built("en"))[-1] == "The run found a total of 10, 2.00 per step."
    assert prose(p.built("zh"))[-1] == "运行得到的总和是 10，平均每步 2.00。"
    for lang in ("en", "zh"):
        assert meta(p.built(lang))["run_values"] == {"sums.mean": 2.0, "sums.total": 10}


def test_a_prose_edit_quotes_the_cached_run(project: Project):
    project.build("--execute")
    project.edit("02_compute.py", "{{run:sums.mean:.2f}} per step", "{{run:sums.mean:.1f}} per step on average")
    run = project.build("--execute")
    assert "demo/hello: cached" in run.log
    assert prose(project.built("en"))[-1] == "The run found a total of 10, 2.0 per step on average."


def test_a_missing_value_is_an_error_with_file_and_line(project: Project):
    project.build("--execute")
    project.edit("02_compute.py", "{{run:sums.mean:.2f}} per step", "{{run:sums.median:.2f}} per step")
    for args in ([], ["--execute"], ["--execute", "--force"]):
        run = project.build(*args)
        assert run.code == 2, run.log
        assert f"{project.notebook / '02_compute.py'}:24: {{{{run:sums.median}}}}: the 'prose-values' cells expose " \
            "no value 'sums.median'" in run.log


def test_a_build_without_outputs_shows_names_not_stale_numbers(project: Project):
    project.build("--execute")
    project.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) + 1 - 1")
    assert "no outputs" in project.build().log
    assert prose(project.built("en"))[-1] == "The run found a total of [run:sums.total], [run:sums.mean] per step."
    assert "run_values" not in meta(project.built("zh"))


def test_check_verifies_the_quoted_values(project: Project):
    project.build("--execute")
    notebook = read(project.built("en"))
    notebook.metadata["learning_notebooks"]["run_values"]["sums.total"] = 11
    project.built("en").write_bytes(notebook_bytes(notebook))
    run = project.build("--check")
    assert run.code == 1 and "hello.en.ipynb: prose values differ from the recorded run (sums.total)" in run.log

    project.build()
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


@pytest.mark.parametrize(
    "value, words",
    [
        ('{"sums": {"total": [total], "mean": 1.0}}', "value of 'sums.total' is a list"),
        ('{"sums": {"total": total, "mean": 1.0}, "sums.total": 1}', "is not an identifier"),
        ('{"sums": {"total": total, "mean": "n/a"}}', "cannot format 'n/a'"),
        ("None", "must end with a dict expression"),
    ],
)
def test_bad_values_name_the_cell(project: Project, value, words):
    project.edit("02_compute.py", '{"sums": {"total": total, "mean": total / STEPS}}', value)
    run = project.build("--execute")
    assert run.code == 2 and words in run.log, run.log
    assert "02_compute.py:2" in run.log  # the prose-values cell (29) or the placeholder (24)


def test_a_key_defined_by_two_cells_is_an_error(project: Project):
    project.append("02_compute.py", '\n# %% tags=["prose-values"]\n{"sums": {"total": 0}}\n')
    run = project.build("--execute")
    assert run.code == 2 and "'prose-values' key 'sums.total' is defined twice" in run.log
    assert "02_compute.py:32" in run.log
