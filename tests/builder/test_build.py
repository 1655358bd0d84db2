"""The builder end to end on the fixture project: execution, cache, stability, --check, failures."""

from __future__ import annotations

import json

import nbformat
import pytest

from fixture_project import Project
from learning_notebooks.compose import comparable_code


def test_execute_writes_both_languages_and_outputs(executed_tree: Project):
    p = executed_tree
    for lang in ("en", "zh"):
        assert "total 10\n" in p.outputs_text(lang)
        nbformat.validate(p.read(lang))
        assert p.meta(lang)["executed"] is True
        assert p.meta(lang)["language"] == lang
    assert json.loads((p.outputs / "result.json").read_text()) == {"steps": 5, "total": 10}
    assert p.meta("en")["output_files"].keys() == {"result.json"}
    assert p.meta("en")["run"] == p.meta("zh")["run"] != ""  # one run for both languages


def test_both_languages_carry_identical_code_and_outputs(executed_tree: Project):
    en, zh = executed_tree.read("en"), executed_tree.read("zh")
    assert comparable_code(en) == comparable_code(zh)  # code tokens; comments and texts are localized
    untagged = lambda nb: [  # noqa: E731
        ([o for o in c.outputs if "lang" not in o.get("metadata", {})], c.execution_count) for c in nb.cells if c.cell_type == "code"
    ]
    assert untagged(en) == untagged(zh)


def test_no_volatile_metadata(executed_tree: Project):
    for lang in ("en", "zh"):
        text = executed_tree.built(lang).read_text(encoding="utf-8")
        for volatile in ('"execution": {', "iopub.", "shell.execute_reply", str(executed_tree.root), '"version": "3.'):
            assert volatile not in text
        assert text.endswith("}\n")


def test_cache_hit_then_miss_after_code_edit_then_hit_after_prose_edit(executed: Project):
    first = executed.built("en").read_bytes()
    hit = executed.build("--execute")
    assert "demo/hello: cached" in hit.log
    assert executed.built("en").read_bytes() == first

    executed.edit("01_intro.py", "We add numbers.", "We add whole numbers.")
    prose = executed.build("--execute")
    assert "demo/hello: cached" in prose.log
    assert "We add whole numbers." in executed.built("en").read_text(encoding="utf-8")
    assert executed.outputs_text("en") == executed.outputs_text("zh")
    assert "total 10\n" in executed.outputs_text("en")

    executed.edit("02_compute.py", 'print("total", total)', 'print("sum", total)')
    miss = executed.build("--execute")
    assert "demo/hello: executed" in miss.log
    assert "sum 10\n" in executed.outputs_text("zh")


def test_layout_and_comments_keep_the_key(executed: Project):
    executed.edit("02_compute.py", "total = sum(range(STEPS))", "total   =   sum( range(STEPS) )  # spaced out\n\n")
    assert "demo/hello: cached" in executed.build("--execute").log  # a string's own spaces: test_faults.py


def test_force_executes_despite_a_valid_cache(executed: Project):
    assert "demo/hello: executed" in executed.build("--execute", "--force").log


def test_build_without_execute_keeps_outputs_and_is_byte_stable(executed: Project):
    before = executed.tree()
    run = executed.build()
    assert run.code == 0 and "kept outputs" in run.log
    assert executed.tree() == before
    executed.build()
    assert executed.tree() == before


def test_code_change_without_execute_drops_outputs_and_says_how_to_run(executed: Project):
    executed.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) + 0")
    run = executed.build()
    assert run.code == 0
    assert "no outputs" in run.log and "stale: code changed" in run.log
    assert "--execute --only demo/hello" in run.log
    assert executed.outputs_text("en") == []
    assert executed.meta("en")["executed"] is False


def test_quick_mode_overrides_parameters_and_is_marked(project: Project):
    run = project.build("--execute", "--quick")
    assert run.code == 0, run.log
    assert "total 1\n" in project.outputs_text("en")  # STEPS = 2
    assert project.meta("en")["quick"] is True
    assert json.loads((project.outputs / "result.json").read_text())["steps"] == 2
    check = project.build("--check")
    assert check.code == 1 and "quick-mode build" in check.log


def test_check_passes_on_a_fresh_build_and_catches_staleness(project: Project, make):
    assert project.build("--check").code == 1  # nothing built yet
    p = make(executed=True)
    assert p.build("--check").code == 0

    p.edit("01_intro.py", "我们把数字加起来。", "我们把整数加起来。")
    stale = p.build("--check")
    assert stale.code == 1
    assert "hello.zh.ipynb: stale" in stale.log and "hello.en.ipynb" not in stale.log
    p.build()
    assert p.build("--check").code == 0

    p.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) * 1")
    code_change = p.build("--check")
    assert code_change.code == 1 and f"{p.built('en')}: stale: code changed since its run" in code_change.log


def test_check_catches_tampered_outputs_and_orphans(executed: Project):
    (executed.outputs / "result.json").write_text("{}")
    assert "files differ from the ones the recorded run wrote" in executed.build("--check").log
    run = executed.build("--execute")  # the run is not valid without its files: it runs again
    assert "demo/hello: executed" in run.log
    assert json.loads((executed.outputs / "result.json").read_text())["total"] == 10
    orphan = executed.root / "build" / "demo" / "old.en.ipynb"
    orphan.write_text("{}")
    run = executed.build("--check")
    assert run.code == 1 and "old.en.ipynb: no source produces it" in run.log


def test_lang_writes_one_language_when_the_run_is_valid(executed: Project):
    executed.edit("01_intro.py", "We add numbers.", "We add whole numbers.")
    executed.edit("01_intro.py", "我们把数字加起来。", "我们把整数加起来。")
    before = executed.built("zh").read_bytes()
    run = executed.build("--execute", "--lang", "en")
    assert run.code == 0 and "demo/hello: cached" in run.log
    assert "We add whole numbers." in executed.built("en").read_text(encoding="utf-8")
    assert executed.built("zh").read_bytes() == before


def test_failing_cell_names_file_line_notebook_section_and_keeps_the_old_build(executed: Project):
    before = executed.tree()
    executed.add_section("03_bug.py", FAILING)
    run = executed.build("--execute")
    assert run.code == 1
    assert run.last.startswith(f"error: {executed.notebook / '03_bug.py'}:10: ZeroDivisionError: division by zero")
    assert "notebook demo/hello, section 03_bug" in run.last
    assert "called from 03_bug.py:14" in run.last
    assert run.last.endswith("; the previous build is intact")
    assert executed.tree() == before
    assert executed.leftovers() == []


FAILING = '''
# %% [markdown] lang="en"
# ## 3. A bug

# %% [markdown] lang="zh"
# ## 3. 一个错误

# %%
def reciprocal(x):
    return 1 / x

# %%
ok = 1
reciprocal(0)
'''


def test_error_in_the_cell_itself_points_at_the_statement(project: Project):
    project.append_cell("x = 1\nassert x == 2, 'x is not 2'\n")
    run = project.build("--execute")
    assert run.code == 1
    assert f"{project.line(2)}: AssertionError: x is not 2" in run.log
    assert "called from" not in run.log


def test_timeout_stops_the_kernel_and_names_the_cell(project: Project):
    project.append_cell("import time\ntime.sleep(60)\n")
    run = project.build("--execute", "--timeout", "2")
    assert run.code == 1
    assert f"{project.line(1)}: CellTimeoutError" in run.log
    assert not project.built("en").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--only", "nope"], "unknown --only target 'nope'"),
        (["--only", "demo/nope"], "unknown --only target"),
        (["--lang", "fr"], "unknown --lang 'fr'"),
        (["--check", "--execute"], "do not combine"),
        (["--check", "--force"], "do not combine"),
        (["--jobs", "0"], "--jobs must be 1 or more"),
        (["--timeout", "-5"], "--timeout must be a whole number of seconds above 0"),
        (["--max-output-mb", "-1"], "--max-output-mb must be above 0"),
        (["--max-output-mb", "1e-7"], "at least one byte"),
        (["--max-output-mb", "nan"], "--max-output-mb must be above 0"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(project: Project, args, words):
    run = project.build("--execute", *args) if "--check" not in args else project.build(*args)
    assert run.code == 2
    assert run.log.count("\n") == 1 and words in run.log
    assert not (project.root / "build").exists()


def test_malformed_header_exits_2_before_anything_executes(project: Project):
    project.edit("02_compute.py", '# %% [markdown] lang="zh"', "# %% [markdown] lang=zh")
    run = project.build("--execute")
    assert run.code == 2
    assert run.log == f"error: {project.notebook / '02_compute.py'}:5: malformed cell header: 'lang=zh' " \
        '(write options as key="value", e.g. lang="en")\n'
    assert not (project.root / "build").exists() and not (project.root / "outputs").exists()


def test_only_selects_series_and_notebook(project: Project):
    assert project.build("--only", "demo", "--list").code == 0
    run = project.build("--only", "demo/hello")
    assert run.code == 0 and project.built("en").exists()


def test_written_files_are_readable_by_everyone(executed_tree: Project):
    for path in (executed_tree.built("en"), executed_tree.outputs / "result.json"):
        assert path.stat().st_mode & 0o444 == 0o444
    assert executed_tree.outputs.stat().st_mode & 0o555 == 0o555


def test_a_notebook_that_writes_nothing_gets_no_outputs_folder(executed: Project):
    executed.edit("02_compute.py", 'Path(OUTPUT_DIR, "result.json").write_text(', "print(")
    assert executed.build("--execute").code == 0
    assert not executed.outputs.exists()
    assert executed.build("--check").code == 0


def test_malformed_manifest_exits_2_with_one_line(project: Project):
    project.edit("notebook.toml", 'sections = ["01_intro.py", "02_compute.py"]', 'sections = ["01_intro.py", "02_compute.py"')
    run = project.build("--execute")
    assert run.code == 2
    assert run.log.startswith(f"error: {project.notebook / 'notebook.toml'}:3: malformed TOML")  # where tomllib notices
    assert run.log.count("\n") == 1
    assert not (project.root / "build").exists()
