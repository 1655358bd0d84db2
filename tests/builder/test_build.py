"""The builder end to end on the fixture project: execution, cache, stability, --check, failures."""

from __future__ import annotations

import json

import nbformat
import pytest

from fixture_project import Project
from learning_notebooks.compose import comparable_code


def outputs_text(path) -> list[str]:
    notebook = nbformat.read(path, as_version=4)
    return ["".join(o.get("text", "")) for c in notebook.cells if c.cell_type == "code" for o in c.outputs]


def metadata(path) -> dict:
    return nbformat.read(path, as_version=4).metadata["learning_notebooks"]


def test_execute_writes_both_languages_and_outputs(executed_project: Project):
    p = executed_project
    for lang in ("en", "zh"):
        assert "total 10\n" in outputs_text(p.built(lang))
        nbformat.validate(nbformat.read(p.built(lang), as_version=4))
        assert metadata(p.built(lang))["executed"] is True
        assert metadata(p.built(lang))["language"] == lang
    assert json.loads((p.outputs / "result.json").read_text()) == {"steps": 5, "total": 10}
    assert metadata(p.built("en"))["output_files"].keys() == {"result.json"}


def test_both_languages_carry_identical_code_and_outputs(executed_project: Project):
    en, zh = (nbformat.read(executed_project.built(lang), as_version=4) for lang in ("en", "zh"))
    assert comparable_code(en) == comparable_code(zh)  # code tokens; comments are localized
    untagged = lambda nb: [  # noqa: E731
        ([o for o in c.outputs if "lang" not in o.get("metadata", {})], c.execution_count) for c in nb.cells if c.cell_type == "code"
    ]
    assert untagged(en) == untagged(zh)


def test_no_volatile_metadata(executed_project: Project):
    for lang in ("en", "zh"):
        text = executed_project.built(lang).read_text(encoding="utf-8")
        for volatile in ('"execution": {', "iopub.", "shell.execute_reply", str(executed_project.root), '"version": "3.'):
            assert volatile not in text
        assert text.endswith("}\n")


def test_cache_hit_then_miss_after_code_edit_then_hit_after_prose_edit(project: Project):
    assert project.build("--execute").log.count("executed") == 1
    first = project.built("en").read_bytes()

    hit = project.build("--execute")
    assert "demo/hello: cached" in hit.log
    assert project.built("en").read_bytes() == first

    project.edit("01_intro.py", "We add numbers.", "We add whole numbers.")
    prose = project.build("--execute")
    assert "demo/hello: cached" in prose.log
    assert "We add whole numbers." in project.built("en").read_text(encoding="utf-8")
    assert outputs_text(project.built("en")) == outputs_text(project.built("zh"))
    assert "total 10\n" in outputs_text(project.built("en"))

    project.edit("02_compute.py", 'print("total", total)', 'print("sum", total)')
    miss = project.build("--execute")
    assert "demo/hello: executed" in miss.log
    assert "sum 10\n" in outputs_text(project.built("zh"))


def test_force_executes_despite_a_valid_cache(executed_project: Project):
    assert "demo/hello: executed" in executed_project.build("--execute", "--force").log


def test_build_without_execute_keeps_outputs_and_is_byte_stable(executed_project: Project):
    before = {lang: executed_project.built(lang).read_bytes() for lang in ("en", "zh")}
    run = executed_project.build()
    assert run.code == 0 and "kept outputs" in run.log
    after = {lang: executed_project.built(lang).read_bytes() for lang in ("en", "zh")}
    assert after == before
    executed_project.build()
    assert {lang: executed_project.built(lang).read_bytes() for lang in ("en", "zh")} == before


def test_code_change_without_execute_drops_outputs_and_says_how_to_run(project: Project):
    project.build("--execute")
    project.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) + 0")
    run = project.build()
    assert run.code == 0
    assert "no outputs" in run.log and "--execute --only demo/hello" in run.log
    assert outputs_text(project.built("en")) == []
    assert metadata(project.built("en"))["executed"] is False


def test_quick_mode_overrides_parameters_and_is_marked(project: Project):
    run = project.build("--execute", "--quick")
    assert run.code == 0, run.log
    assert "total 1\n" in outputs_text(project.built("en"))  # STEPS = 2
    assert metadata(project.built("en"))["quick"] is True
    assert json.loads((project.outputs / "result.json").read_text())["steps"] == 2
    check = project.build("--check")
    assert check.code == 1 and "quick-mode build" in check.log


def test_check_passes_on_a_fresh_build_and_catches_staleness(project: Project):
    assert project.build("--check").code == 1  # nothing built yet
    project.build("--execute")
    assert project.build("--check").code == 0

    project.edit("01_intro.py", "我们把数字加起来。", "我们把整数加起来。")
    stale = project.build("--check")
    assert stale.code == 1
    assert "hello.zh.ipynb: stale" in stale.log and "hello.en.ipynb" not in stale.log
    project.build()
    assert project.build("--check").code == 0

    project.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) * 1")
    code_change = project.build("--check")
    assert code_change.code == 1 and "hello.en.ipynb: stale" in code_change.log


def test_check_catches_tampered_outputs_and_orphans(project: Project):
    project.build("--execute")
    (project.outputs / "result.json").write_text("{}")
    assert "files differ" in project.build("--check").log
    project.build("--execute", "--force")
    orphan = project.root / "build" / "demo" / "old.en.ipynb"
    orphan.write_text("{}")
    run = project.build("--check")
    assert run.code == 1 and "old.en.ipynb: no source produces it" in run.log


def test_check_writes_nothing(project: Project):
    project.build("--check")
    assert not (project.root / "build").exists()


def test_lang_writes_one_language(project: Project):
    assert project.build("--execute", "--lang", "zh").code == 0
    assert project.built("zh").exists() and not project.built("en").exists()


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


def add_section(project: Project, name: str, text: str) -> None:
    (project.notebook / name).write_text(text, encoding="utf-8")
    project.edit("notebook.toml", '"02_compute.py"]', f'"02_compute.py", "{name}"]')


def test_failing_cell_names_file_line_notebook_section_and_keeps_the_old_build(project: Project):
    project.build("--execute")
    before = {p: p.read_bytes() for p in (project.built("en"), project.built("zh"), project.outputs / "result.json")}
    add_section(project, "03_bug.py", FAILING)
    run = project.build("--execute")
    assert run.code == 1
    message = run.log.strip().splitlines()[-1]
    assert message.startswith(f"error: {project.notebook / '03_bug.py'}:10: ZeroDivisionError: division by zero")
    assert "notebook demo/hello, section 03_bug" in message
    assert "called from 03_bug.py:14" in message
    assert {p: p.read_bytes() for p in before} == before
    leftovers = [p.name for p in project.root.rglob("*") if ".tmp" in p.name or ".new-" in p.name or ".old-" in p.name]
    assert leftovers == []


def test_error_in_the_cell_itself_points_at_the_statement(project: Project):
    project.append("02_compute.py", "\n# %%\nx = 1\nassert x == 2, 'x is not 2'\n")
    run = project.build("--execute")
    assert run.code == 1
    assert f"{project.notebook / '02_compute.py'}:34: AssertionError: x is not 2" in run.log
    assert "called from" not in run.log


def test_timeout_stops_the_kernel_and_names_the_cell(project: Project):
    project.append("02_compute.py", "\n# %%\nimport time\ntime.sleep(60)\n")
    run = project.build("--execute", "--timeout", "2")
    assert run.code == 1
    assert f"{project.notebook / '02_compute.py'}:33: CellTimeoutError" in run.log
    assert not project.built("en").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--only", "nope"], "unknown --only target 'nope'"),
        (["--only", "demo/nope"], "unknown --only target"),
        (["--lang", "fr"], "unknown --lang 'fr'"),
        (["--check", "--execute"], "do not combine"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(project: Project, args, words):
    run = project.build(*args)
    assert run.code == 2
    assert run.log.count("\n") == 1 and words in run.log


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


def test_written_files_are_readable_by_everyone(executed_project: Project):
    for path in (executed_project.built("en"), executed_project.outputs / "result.json"):
        assert path.stat().st_mode & 0o444 == 0o444
    assert executed_project.outputs.stat().st_mode & 0o555 == 0o555


def test_a_notebook_that_writes_nothing_gets_no_outputs_folder(project: Project):
    project.edit("02_compute.py", 'Path(OUTPUT_DIR, "result.json").write_text(', "print(")
    assert project.build("--execute").code == 0
    assert not project.outputs.exists()


def test_malformed_manifest_exits_2_with_one_line(project: Project):
    project.edit("notebook.toml", 'sections = ["01_intro.py", "02_compute.py"]', 'sections = ["01_intro.py", "02_compute.py"')
    run = project.build("--execute")
    assert run.code == 2
    assert run.log.startswith(f"error: {project.notebook / 'notebook.toml'}:3: malformed TOML")  # where tomllib notices
    assert run.log.count("\n") == 1
    assert not (project.root / "build").exists()
