"""Issue #8: a build is all-or-nothing, outputs are never lost or forged, cells cannot reach outside.

One test (or a few) per defect of the issue, each on a copy of the fixture project.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal

import pytest

from fixture_project import Project
from learning_notebooks import files, plan as plan_module


def code_edit(project: Project) -> None:
    project.edit("02_compute.py", 'print("total", total)', 'print("sum", total)')


def on_call(monkeypatch, name: str, n: int, action) -> None:
    """Run `action(*args)` before the `n`-th call of `files.<name>` (then the real call, unless it raised).

    In a build that runs the fixture: `_write` 1 is outputs/'s result.json, 2 and 3 the English and
    Chinese notebooks, 4 the swap journal; `_replace` 1 puts the journal in place, then each target
    is moved aside (2, 4, 6: outputs/, English, Chinese) and its new version moved in (3, 5, 7).
    """
    real, calls = getattr(files, name), []

    def patched(*args):
        calls.append(args)
        if len(calls) == n:
            action(*args)
        real(*args)

    monkeypatch.setattr(files, name, patched)


def sigterm(*_) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def io_error(source, target):
    raise OSError(errno.EIO, "Input/output error", str(target))


# 1. A failed write leaves a mixed build.


def test_a_target_that_cannot_be_replaced_leaves_the_whole_old_build(executed: Project):
    zh = executed.built("zh")
    zh.unlink()
    zh.mkdir()  # as unwritable as it gets for root: a folder where the file goes
    (zh / "keep").write_text("x")
    before = executed.tree()
    code_edit(executed)
    run = executed.build("--execute")
    assert run.code == 1
    assert run.last == f"error: {zh}: is a directory, cannot replace it with a file; the previous build is intact"
    assert executed.tree() == before  # outputs/ and the English notebook too
    assert executed.leftovers() == []


def test_a_full_disk_while_staging_leaves_the_whole_old_build(executed: Project, monkeypatch):
    before = executed.tree()
    code_edit(executed)

    def full_disk(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    on_call(monkeypatch, "_write", 2, full_disk)
    run = executed.build("--execute")
    assert run.code == 1
    assert "No space left on device; the previous build is intact" in run.last
    assert run.log.count("\n") == run.log.count("\n", 0, run.log.rindex("error:")) + 1  # one line
    assert executed.tree() == before
    assert executed.leftovers() == []


def test_an_error_in_the_middle_of_the_swap_rolls_every_file_back(executed: Project, monkeypatch):
    before = executed.tree()
    code_edit(executed)
    on_call(monkeypatch, "_replace", 5, io_error)  # outputs/ is swapped in, the English notebook moved aside
    run = executed.build("--execute")
    assert run.code == 1 and "the previous build is intact" in run.last
    assert executed.tree() == before
    assert executed.leftovers() == []


def test_a_rollback_that_fails_too_does_not_claim_the_old_build_is_intact(executed: Project, monkeypatch):
    old = executed.tree()
    code_edit(executed)
    on_call(monkeypatch, "_replace", 5, io_error)  # the swap of the English notebook fails ...
    on_call(monkeypatch, "_replace", 6, io_error)  # ... and so does putting its old file back
    run = executed.build("--execute")
    assert run.code == 1
    assert "is intact" not in run.last and "the rollback failed too" in run.last
    backup, journal = sorted(executed.leftovers(), key=lambda p: p.name.startswith(".swap-journal"))
    assert str(backup) in run.last and backup.read_bytes() == old[executed.built("en")]
    assert not executed.built("en").exists()
    monkeypatch.undo()
    executed.edit("02_compute.py", 'print("sum", total)', 'print("total", total)')  # the old sources again
    again = executed.build("--execute")  # the next build rolls the swap back, whole: the old run is valid
    assert "rolled back an interrupted swap" in again.log and "demo/hello: cached" in again.log
    assert executed.leftovers() == [] and executed.tree() == old


# 2. Edited outputs spread and pass --check.


def edit_output(path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_outputs_edited_in_one_language_are_named_and_never_spread(executed: Project):
    edit_output(executed.built("en"), '"total 10\\n"', '"total 11\\n"')

    check = executed.build("--check")
    assert check.code == 1
    assert f"{executed.built('en')}: outputs edited by hand" in check.log
    assert "hello.zh.ipynb" not in check.log

    run = executed.build("--execute")
    assert run.code == 0 and "outputs edited by hand in hello.en.ipynb: not reused" in run.log
    for lang in ("en", "zh"):
        assert "total 10\n" in executed.outputs_text(lang)
        assert "total 11\n" not in executed.outputs_text(lang)
    assert executed.build("--check").code == 0


def test_outputs_edited_in_every_language_are_never_reused(executed: Project):
    for lang in ("en", "zh"):
        edit_output(executed.built(lang), '"total 10\\n"', '"total 11\\n"')
    check = executed.build("--check")
    assert check.code == 1
    for lang in ("en", "zh"):
        assert f"{executed.built(lang)}: outputs edited by hand" in check.log

    prose = executed.build()
    assert "demo/hello: no outputs" in prose.log
    assert f"no outputs: {executed.built('en')}: outputs edited by hand" in prose.log
    assert executed.outputs_text("zh") == []

    run = executed.build("--execute")
    assert "demo/hello: executed" in run.log and "total 10\n" in executed.outputs_text("zh")


# 3. Environment drift is not a code change.


def test_environment_drift_keeps_outputs_names_versions_and_warns_unless_strict(project: Project, monkeypatch):
    monkeypatch.setattr(plan_module.cache, "package_versions", lambda modules: {"torch": "2.13.0"})
    assert project.build("--execute").code == 0
    monkeypatch.setattr(plan_module.cache, "package_versions", lambda modules: {"torch": "2.13.1"})

    prose = project.build()
    assert prose.code == 0 and "demo/hello: kept outputs" in prose.log
    assert "torch 2.13.0 → 2.13.1" in prose.log and "code changed" not in prose.log
    assert "total 10\n" in project.outputs_text("en")

    check = project.build("--check")
    assert check.code == 0 and "environment differs from the recorded run: torch 2.13.0 → 2.13.1" in check.log
    strict = project.build("--check", "--strict-env")
    assert strict.code == 1
    assert "stale: demo/hello: environment differs from the recorded run: torch 2.13.0 → 2.13.1" in strict.log

    rerun = project.build("--execute")
    assert "demo/hello: executed" in rerun.log and "torch 2.13.0 → 2.13.1" in rerun.log
    assert project.build("--check", "--strict-env").code == 0


def test_check_names_the_reason_of_each_stale_file(executed: Project):
    code_edit(executed)
    check = executed.build("--check")
    assert f"{executed.built('en')}: stale: code changed since its run" in check.log
    prose = executed.build()
    assert "stale: code changed since its run" in prose.log and "it carries no outputs" in prose.log


# 4. Comment lines in code cells run as shell commands.


@pytest.mark.parametrize("line", ["# !touch {marker}", "# %env FOO=bar", "!touch {marker}", "%env FOO=bar",
                                  "# files = !ls"])
def test_magics_and_shell_escapes_are_refused_before_anything_runs(project: Project, tmp_path, line):
    marker = tmp_path / "created"
    project.append_cell(f"x = 1\n{line.format(marker=marker)}\n")
    run = project.build("--execute")
    assert run.code == 2
    assert run.log.startswith(f"error: {project.line(2)}: IPython magic or shell escape")
    assert not marker.exists() and not (project.root / "build").exists()


def test_syntax_errors_are_found_before_executing(project: Project):
    project.append_cell("x = 1\ny = (\n")
    run = project.build("--execute")
    assert run.code == 2 and "executing" not in run.log
    assert f"error: {project.line(2)}: SyntaxError" in run.log


def test_ordinary_comments_stay_comments(project: Project):
    project.append_cell("# 50% of the steps; see the README\nprint('ok')\n")
    assert project.build().code == 0  # checked before anything would run


# 5. Cells write anywhere.


@pytest.mark.parametrize("places", [["notebooks_src/demo/hello/extra.txt", "stray.txt"], ["build/demo/extra.txt"]])
def test_a_cell_writing_into_the_project_fails_the_build(executed: Project, places):
    before = executed.tree()
    targets = [executed.root / where for where in places]
    executed.append_cell("".join(f"open({str(target)!r}, 'w').write('x')\n" for target in targets))
    run = executed.build("--execute")
    assert run.code == 1
    assert all(f"created {target}" in run.last for target in targets) and "nothing was built" in run.last
    assert ("the previous build is intact" in run.last) == ("build/demo/extra.txt" not in places)  # only when true
    for target in targets:
        target.unlink()
    assert executed.tree() == before


def test_symlinks_a_cell_leaves_are_refused_not_followed(project: Project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for outputs/")
    project.append_cell(f"import os\nos.symlink({str(secret)!r}, 'link.txt')\n")
    run = project.build("--execute")
    assert run.code == 1
    assert "(symlinks, special files or names that are not UTF-8): link.txt" in run.last
    assert not project.outputs.exists() and not project.built("en").exists()


# 6. Signals (in-process; the kernel start-up case runs the real command in test_command.py).


def test_sigterm_while_staging_keeps_the_old_build_and_exits_143(executed: Project, monkeypatch):
    before = executed.tree()
    code_edit(executed)
    on_call(monkeypatch, "_write", 2, sigterm)
    run = executed.build("--execute")
    assert run.code == 143 and run.last == "interrupted: kernels stopped, staging removed; the previous build is intact"
    assert executed.tree() == before
    assert executed.leftovers() == []


def test_sigterm_during_the_swap_lets_it_finish_then_exits_143(executed: Project, monkeypatch):
    code_edit(executed)
    on_call(monkeypatch, "_replace", 2, sigterm)
    run = executed.build("--execute")
    assert run.code == 143
    assert run.last == ("interrupted: kernels stopped, staging removed; demo/hello holds its whole new build, "
                        "every other notebook its previous one")
    for lang in ("en", "zh"):  # the whole new build, never half of it
        assert "sum 10\n" in executed.outputs_text(lang)
    assert executed.leftovers() == []


def test_leftovers_of_a_killed_build_are_reported_by_check_and_removed_by_the_next_build(executed: Project):
    half = executed.root / "outputs" / "demo" / ".hello.staging-123-abc"
    half.mkdir()
    (half / "result.json").write_text("{")
    check = executed.build("--check")
    assert check.code == 1 and f"{half}: no source produces it" in check.log
    run = executed.build()
    assert f"removed a leftover of an interrupted build: {half}" in run.log
    assert not half.exists() and executed.build("--check").code == 0


# 7. Smaller ones.


def test_non_utf8_bytes_in_a_section_name_file_and_line(project: Project):
    path = project.notebook / "02_compute.py"
    line = path.read_bytes().split(b"\n").index(b"total = sum(range(STEPS))") + 1
    path.write_bytes(path.read_bytes().replace(b"total = sum", b"total = \xffsum"))
    run = project.build("--execute")
    assert run.code == 2 and run.log.count("\n") == 1
    assert run.log.startswith(f"error: {path}:{line}: not UTF-8 text: byte 0xff at column 9")


def test_non_utf8_bytes_in_config_name_file_and_line(project: Project):
    path = project.root / "notebooks_src" / "config.toml"
    path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    run = project.build()
    assert run.code == 2 and run.log.startswith(f"error: {path}:4: not UTF-8 text")


def test_a_marker_typo_names_its_line(project: Project):
    project.edit("02_compute.py", '# %% [markdown] lang="zh"', '# %%[markdown] lang="zh"')
    run = project.build()
    assert run.code == 2
    assert run.log.startswith(f"error: {project.notebook / '02_compute.py'}:5: malformed cell marker")


def test_invalid_toml_at_the_end_of_the_file_names_the_last_line(project: Project):
    project.append("notebook.toml", "extra =")
    run = project.build()
    assert run.code == 2 and run.log.startswith(f"error: {project.notebook / 'notebook.toml'}:9: malformed TOML")


def test_a_form_feed_in_a_comment_is_no_line_break(project: Project):
    project.append_cell("x = 1  # a comment\x0c    x = 2\nassert x == 1\nprint('x', x)\n")
    run = project.build("--execute")
    assert run.code == 0, run.log
    assert "x 1\n" in project.outputs_text("en")


def test_line_numbers_stay_right_after_u2028_and_blank_lines(project: Project):
    project.append_cell("\n\ns = 'a\u2028b'\nassert len(s) == 4, 'line check'\n")
    run = project.build("--execute")
    assert run.code == 1
    assert f"{project.line(4)}: AssertionError: line check" in run.log


def test_a_dead_kernel_names_the_statement(project: Project):
    project.append_cell("import os, signal\nx = 1\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    run = project.build("--execute")
    assert run.code == 1
    assert f"{project.line(3)}: DeadKernelError" in run.last


def test_check_sees_stray_files_with_and_without_only(executed: Project):
    strays = [
        executed.root / "build" / "demo" / ".hello.en.ipynb.tmp",
        executed.root / "build" / "demo" / "hello.en.ipynb.old",
        executed.root / "outputs" / "demo" / "extra" / "file.txt",
        executed.root / "outputs" / "other" / "file.txt",
        executed.root / "build" / "notes.txt",
    ]
    for path in strays:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    run = executed.build("--check")
    assert run.code == 1
    for path in (strays[0], strays[1], strays[2].parent, strays[3].parent, strays[4]):
        assert f"stale: {path}: no source produces it" in run.log
    only = executed.build("--check", "--only", "demo/hello")
    assert only.code == 1
    for path in (strays[0], strays[1]):
        assert f"stale: {path}: no source produces it" in only.log
    assert "notes.txt" not in only.log and "other" not in only.log
    series = executed.build("--check", "--only", "demo")
    assert f"{strays[2].parent}: no source produces it" in series.log


def test_outputs_over_the_limit_fail_the_build_with_the_cell(project: Project):
    project.append_cell("print('x' * 3_000_000)\n")
    run = project.build("--execute")
    assert run.code == 1
    assert f"{project.line(1)}: OutputTooLarge" in run.last
    assert not project.built("en").exists()
    assert project.build("--execute", "--max-output-mb", "10").code == 0


def test_a_lone_surrogate_is_printed_with_a_replacement_character(project: Project):
    project.append_cell("print('a\\ud800b')\n")
    run = project.build("--execute")
    assert run.code == 0, run.log
    assert "a\ufffdb\n" in project.outputs_text("en")
    text = project.built("en").read_text(encoding="utf-8")
    assert "Traceback" not in text and ".venv" not in text and "site-packages" not in text


# 8. Ecosystem.


JUPYTEXT_HEADER = """# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

"""


def test_a_jupytext_yaml_header_is_accepted_and_kept_out(executed: Project):
    before = executed.tree()
    path = executed.notebook / "01_intro.py"
    path.write_text(JUPYTEXT_HEADER + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert executed.build().code == 0
    assert executed.tree() == before


# --jobs


def test_a_parallel_build_equals_a_serial_one_byte_for_byte(project: Project, tmp_path):
    shutil.copytree(project.notebook, project.notebook.parent / "hello2")
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    one = project.build("--execute", "--jobs", "1", "--out", str(serial))
    two = project.build("--execute", "--jobs", "2", "--out", str(parallel))
    assert one.code == 0 and two.code == 0, two.log
    files_of = lambda root: {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}  # noqa: E731
    assert files_of(serial) == files_of(parallel)
    assert len(files_of(serial)) == 6  # two notebooks, two languages, one result.json each
