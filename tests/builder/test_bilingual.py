"""Localized comments, language-tagged outputs and includes, end to end on the fixture project."""

from __future__ import annotations

import nbformat
import pytest

from fixture_project import Project
from learning_notebooks.errors import SourceError
from learning_notebooks.files import notebook_bytes
from learning_notebooks.sources import load_config, load_notebook


def test_each_language_shows_its_own_comments_and_outputs(executed_tree: Project):
    p = executed_tree
    assert p.displayed("en") == [("en", "The sum is 10.")]
    assert p.displayed("zh") == [("zh", "总和是 10。")]
    assert "# Gauss's formula checks the loop." in p.code_text("en") and "高斯" not in p.code_text("en")
    assert "# 用高斯公式检验循环的结果。" in p.code_text("zh") and "Gauss" not in p.code_text("zh")
    for lang in ("en", "zh"):
        assert "# [" not in p.code_text(lang)
        assert "# n (n - 1) / 2" in p.code_text(lang)  # untagged comments stay
        prelude = [c for c in p.read(lang).cells if c.id == "prelude"][0]
        assert f'LANG = "{lang}"' in prelude.source


def test_comment_edit_keeps_the_key_and_each_language_reuses_its_own_outputs(executed: Project):
    project = executed
    key = project.meta("en")["execution_key"]
    project.edit("02_compute.py", "# [zh] 用高斯公式检验循环的结果。", "# [zh] 用高斯求和公式检验循环。")
    project.edit("02_compute.py", "# n (n - 1) / 2", "# Gauss: n (n - 1) / 2")
    run = project.build("--execute")
    assert "demo/hello: cached" in run.log, run.log
    assert project.meta("zh")["execution_key"] == key
    assert "# 用高斯求和公式检验循环。" in project.code_text("zh")
    assert project.displayed("en") == [("en", "The sum is 10.")]  # reused from the en file
    assert project.displayed("zh") == [("zh", "总和是 10。")]  # reused from the zh file
    assert project.build("--check").code == 0


def test_a_missing_language_file_is_not_filled_from_the_other_language(executed: Project):
    project = executed
    project.built("en").unlink()
    run = project.build()
    assert "no outputs" in run.log
    assert project.displayed("en") == [] and project.displayed("zh") == [("zh", "总和是 10。")]
    again = project.build("--execute")
    assert "demo/hello: executed" in again.log
    assert project.displayed("en") == [("en", "The sum is 10.")]


def test_say_without_every_language_is_an_error_with_file_and_line(project: Project):
    project.edit("02_compute.py", 'say(en=f"The sum is {total}.", zh=f"总和是 {total}。")', 'say(en=f"The sum is {total}.")')
    run = project.build("--execute")
    assert run.code == 2 and "executing" not in run.log  # found before anything runs
    assert f"{project.notebook / '02_compute.py'}:18: say() without zh=" in run.log


def test_say_with_texts_it_cannot_tell_apart_is_an_error_with_file_and_line(project: Project):
    project.edit("02_compute.py", 'say(en=f"The sum is {total}.", zh=f"总和是 {total}。")', 'say(**{"en": "only English"})')
    run = project.build("--execute")
    assert run.code == 2 and "executing" not in run.log
    assert f"{project.notebook / '02_compute.py'}:18: say() with **texts or *args" in run.log


def test_an_output_without_its_twin_at_run_time_is_an_error_with_file_and_line(project: Project):
    project.edit("02_compute.py", 'say(en=f"The sum is {total}.", zh=f"总和是 {total}。")',
                 'from IPython.display import display\ndisplay({"text/plain": "en"}, raw=True, metadata={"lang": "en"})')
    run = project.build("--execute")
    assert run.code == 2 and "executing" in run.log
    assert f"{project.notebook / '02_compute.py'}:9: language-tagged outputs without all their twins" in run.log
    assert not project.built("en").exists()


def test_a_tagged_trailing_comment_is_an_error(project: Project):
    project.edit("02_compute.py", "# n (n - 1) / 2", "# [en] Gauss")
    run = project.build()
    assert run.code == 2
    assert f"{project.notebook / '02_compute.py'}:16: a localized comment ('# [xx] ...') must be on its own line" in run.log


def test_check_refuses_a_built_output_without_its_twin(executed: Project):
    project = executed
    notebook = project.read("zh")
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("metadata", {}).get("lang") != "zh"]
    project.built("zh").write_bytes(notebook_bytes(notebook))
    run = project.build("--check")
    assert run.code == 1
    assert f"{project.notebook / '02_compute.py'}:9: language-tagged outputs without all their twins" in run.log


# ---- includes -------------------------------------------------------------------------------------

BYE_MANIFEST = '''sections = [
    "01_bye.py",
    "../hello/02_compute.py",
]

[title]
en = "Bye"
zh = "再见"
'''

BYE_SECTION = '''# %% [markdown] lang="en"
# ## {{section}}. Bye

# %% [markdown] lang="zh"
# ## {{section}}. 再见

# %% tags=["parameters"]
STEPS = 3
OUTPUT_DIR = "."
'''


def add_bye(project: Project, manifest: str = BYE_MANIFEST) -> Project:
    folder = project.root / "notebooks_src" / "demo" / "bye"
    folder.mkdir()
    (folder / "notebook.toml").write_text(manifest, encoding="utf-8")
    (folder / "01_bye.py").write_text(BYE_SECTION, encoding="utf-8")
    return project


def bye(project: Project, lang: str):
    return project.root / "build" / "demo" / f"bye.{lang}.ipynb"


def test_an_included_section_is_copied_numbered_and_keyed(project: Project):
    add_bye(project)
    run = project.build("--only", "demo/bye", "--execute")
    assert run.code == 0, run.log
    zh = nbformat.read(bye(project, "zh"), as_version=4)
    prose = [c.source for c in zh.cells[1:] if c.cell_type == "markdown"]
    assert prose == ["## 1. 再见", "## 2. 计算\n前 STEPS 个整数之和。",
                     "> *共用的一节。* 本节取自[《你好，测试夹具》](hello.zh.ipynb)，完整的讲解在那里；如果已经读过，"
                     "可以直接跳到下一节。这里把本节的代码折叠了起来，但代码照常运行。",
                     "运行得到的总和是 3，平均每步 1.00。"]
    copied = [c for c in zh.cells if c.cell_type == "code" and "total = sum(range(STEPS))" in c.source]
    assert copied  # the code is copied in, folded (Jupyter, Colab) and behind a toggle on the site
    assert all(c.metadata["jupyter"]["source_hidden"] and "hide-input" in c.metadata["tags"] for c in copied)
    own = [c for c in zh.cells if c.cell_type == "code" and c.id.startswith("01_bye")]
    assert own and not any(c.metadata.get("jupyter") for c in own)  # the notebook's own code stays open
    assert ("en", "The sum is 3.") in [(o.metadata.get("lang"), o.data.get("text/markdown"))
                                      for c in nbformat.read(bye(project, "en"), as_version=4).cells
                                      if c.cell_type == "code" for o in c.outputs if o.output_type == "display_data"]
    ids = [c.id for c in zh.cells]
    assert "hello-02_compute-02" in ids and len(set(ids)) == len(ids)
    assert "demo/bye: cached" in project.build("--only", "demo/bye", "--execute").log
    project.edit("02_compute.py", "total = sum(range(STEPS))", "total = sum(range(STEPS)) + 0")  # hello's file
    assert "demo/bye: executed" in project.build("--only", "demo/bye", "--execute").log


def test_an_unfolded_include_is_shown_like_the_notebooks_own(project: Project):
    # A notebook that teaches an included section lists it under `unfolded`: its code stays open and
    # no shared-section note opens it; the code, and so the run, are the same.
    add_bye(project, BYE_MANIFEST.replace("[title]", 'unfolded = ["../hello/02_compute.py"]\n\n[title]'))
    run = project.build("--only", "demo/bye", "--execute")
    assert run.code == 0, run.log
    for lang in ("en", "zh"):
        edition = nbformat.read(bye(project, lang), as_version=4)
        copied = [c for c in edition.cells if c.cell_type == "code" and "total = sum(range(STEPS))" in c.source]
        assert copied and not any(c.metadata.get("jupyter") or "hide-input" in c.metadata.get("tags", [])
                                  for c in copied)
        assert not any(c.id.endswith("-shared") for c in edition.cells)
    assert project.build("--only", "demo/bye", "--check").code == 0


@pytest.mark.parametrize(
    "entry, words",
    [("../hello/09_gone.py", "is not listed in 'sections'"), ("01_bye.py", "this notebook's own")],
)
def test_a_bad_unfolded_entry_names_its_manifest_line(project: Project, entry, words):
    add_bye(project, BYE_MANIFEST.replace("[title]", f'unfolded = ["{entry}"]\n\n[title]'))
    src = project.root / "notebooks_src"
    with pytest.raises(SourceError) as caught:
        load_notebook(src, "demo", "bye", load_config(src))
    assert caught.value.file.name == "notebook.toml" and caught.value.line == 6
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "entry, line, words",
    [
        ("../hello/09_gone.py", 3, "does not exist"),
        ("../../../outside/01_x.py", 3, "outside notebooks_src/"),
        ("01_bye.py", 3, "listed twice in 'sections' (first at line 2)"),
        ("../bye/01_bye.py", 3, "listed twice"),
        ("../hello/not-a-section.py", 3, "must be named like 01_setup.py"),
    ],
)
def test_bad_includes_name_the_manifest_line(project: Project, entry, line, words):
    add_bye(project, BYE_MANIFEST.replace("../hello/02_compute.py", entry))
    src = project.root / "notebooks_src"
    with pytest.raises(SourceError) as caught:
        load_notebook(src, "demo", "bye", load_config(src))
    assert caught.value.file.name == "notebook.toml" and caught.value.line == line
    assert words in str(caught.value)
    run = project.build("--only", "demo/bye")
    assert run.code == 2 and f"notebook.toml:{line}:" in run.log


def test_an_error_below_localized_comments_names_the_line_of_the_section_file(project: Project):
    project.append("02_compute.py", "\n# %%\n# [en] This must fail.\n# [zh] 这里必须失败。\nassert total < 0, 'negative'\n")
    run = project.build("--execute")
    assert run.code == 1
    assert f"{project.notebook / '02_compute.py'}:35: AssertionError: negative" in run.log
