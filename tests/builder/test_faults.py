"""Issue #16: the faults under which the builder of before broke a promise, one test each.

Every test drives the real command (in-process) on a copy of the fixture project, so it runs
against any version of the builder: each of them failed on the builder before the fix.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from fixture_project import Project
from learning_notebooks import compose, files


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def one_run(project: Project) -> None:
    """Both languages and outputs/ belong to one recorded run, and --check agrees."""
    recorded = [project.meta(lang)["output_files"] for lang in ("en", "zh")]
    on_disk = {p.relative_to(project.outputs).as_posix(): sha(p.read_bytes())
               for p in sorted(project.outputs.rglob("*")) if p.is_file()}
    assert recorded[0] == recorded[1] == on_disk
    check = project.build("--check")
    assert check.code == 0, check.log


# 1. kill -9 during the swap, then --execute.


class Killed(BaseException):
    """What the process sees of SIGKILL: nothing after it runs (no rollback, no clean-up)."""


def test_a_build_killed_during_the_swap_leaves_one_whole_run(executed: Project, monkeypatch):
    executed.append_cell("import uuid\nPath(OUTPUT_DIR, 'run.txt').write_text(uuid.uuid4().hex)\n")
    assert executed.build("--execute").code == 0
    english = executed.built("en")

    def kill_when_english_moves(source, target):
        if source == english:  # outputs/ of the new run is in place, the notebooks are the old ones
            raise Killed

    real = files._replace
    monkeypatch.setattr(files, "_replace", lambda source, target: (kill_when_english_moves(source, target),
                                                                    real(source, target)))
    monkeypatch.setattr(files.Transaction, "discard", lambda self: None)
    with pytest.raises(Killed):
        executed.build("--execute", "--force")
    monkeypatch.undo()

    run = executed.build("--execute")
    assert run.code == 0, run.log
    one_run(executed)


def test_outputs_that_are_not_the_recorded_runs_are_never_reused(executed: Project):
    (executed.outputs / "result.json").write_text('{"steps": 5, "total": 11}')
    run = executed.build("--execute")
    assert "demo/hello: executed" in run.log
    one_run(executed)


# 2. --lang en --execute after a code change.


def test_lang_after_a_code_change_rebuilds_every_language_from_the_new_run(executed: Project):
    executed.edit("02_compute.py", 'print("total", total)', 'print("sum", total)')
    run = executed.build("--execute", "--lang", "en")
    assert run.code == 0, run.log
    assert "every language is rebuilt from the new run" in run.log
    for lang in ("en", "zh"):
        assert "sum 10\n" in executed.outputs_text(lang)
    one_run(executed)


# 3. The execution key misses a code change.


def test_trailing_spaces_inside_a_string_are_a_code_change(executed: Project):
    executed.append_cell('s = """abc\n"""\nprint("len", len(s))\n')
    assert executed.build("--execute").code == 0
    executed.edit("02_compute.py", 's = """abc\n', 's = """abc   \n')
    run = executed.build("--execute")
    assert "demo/hello: executed" in run.log
    assert "len 7\n" in executed.outputs_text("en")


# 4. Environment drift is only read from the first language.


def test_drift_recorded_in_the_second_language_alone_fails_a_strict_check(executed: Project):
    path = executed.built("zh")
    notebook = json.loads(path.read_text(encoding="utf-8"))
    notebook["metadata"]["learning_notebooks"]["environment"]["packages"]["torch"] = "0.0.1"
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    check = executed.build("--check", "--strict-env")
    assert check.code == 1 and "torch 0.0.1 → not imported" in check.log


# 5. Tracebacks instead of one line.


def test_a_file_name_that_is_not_utf8_is_one_line(executed: Project):
    before = executed.tree()
    executed.append_cell("open(b'bad\\xff.txt', 'wb').write(b'x')\n")
    run = executed.build("--execute")
    assert run.code == 1 and "Traceback" not in run.log
    assert "names that are not UTF-8" in run.last and run.last.endswith("; the previous build is intact")
    assert executed.tree() == before


def test_a_format_width_of_gigabytes_is_one_line(project: Project):
    project.edit("02_compute.py", "{{run:sums.mean:.2f}}", "{{run:sums.mean:>99999999999}}")
    run = project.build("--execute")
    assert run.code == 2 and run.log.count("\n") == 1
    assert run.last.startswith(f"error: {project.notebook / '02_compute.py'}:24: ")


@pytest.fixture
def prelude_in_project(executed: Project, monkeypatch):
    """The builder's prelude.py inside the project (as in an editable install of this repository)."""
    copy = executed.root / "src" / "learning_notebooks" / "prelude.py"
    copy.parent.mkdir(parents=True)
    shutil.copy(compose.PRELUDE_FILE, copy)
    cached = getattr(compose, "_prelude", None)  # read once per process by the builder of now
    monkeypatch.setattr(compose, "PRELUDE_FILE", copy)
    if cached:
        cached.cache_clear()
    yield copy
    monkeypatch.undo()
    if cached:
        cached.cache_clear()


def test_a_cell_appending_to_the_builders_prelude_is_one_line(executed: Project, prelude_in_project):
    before = executed.tree()
    executed.append_cell(f"open({str(prelude_in_project)!r}, 'a').write('\\nx = 1\\n')\n")
    run = executed.build("--execute")
    assert run.code == 1 and "Traceback" not in run.log
    assert f"changed {prelude_in_project}" in run.last and "nothing was built" in run.last
    assert executed.tree() == before


# 6. A false "the previous build is intact".


def test_intact_is_said_only_when_it_is_true(executed: Project):
    zh = executed.built("zh")
    executed.append_cell(f"import os\nos.remove({str(zh)!r})\n")
    run = executed.build("--execute")
    assert run.code == 1
    assert f"removed {zh}" in run.last and "the previous build is intact" not in run.last


# 7. Smaller ones.


def test_a_section_symlinked_from_outside_notebooks_src_is_refused(project: Project, tmp_path):
    outside = tmp_path / "outside.py"
    shutil.copy(project.notebook / "02_compute.py", outside)
    (project.notebook / "02_compute.py").unlink()
    (project.notebook / "02_compute.py").symlink_to(outside)
    run = project.build()
    assert run.code == 2 and run.log.count("\n") == 1
    assert run.last.startswith(f"error: {project.notebook / 'notebook.toml'}:1: section '02_compute.py' is outside")


def test_check_with_out_creates_nothing(executed: Project, tmp_path):
    elsewhere = tmp_path / "not-there"
    assert executed.build("--check", "--out", str(elsewhere)).code == 1
    assert not elsewhere.exists()


def test_sys_exit_names_its_own_line(project: Project):
    project.append_cell("x = 1\nimport sys\nsys.exit(3)\n")
    run = project.build("--execute")
    assert run.code == 1 and f"{project.line(3)}: SystemExit: 3" in run.last


@pytest.mark.parametrize("args", [("--timeout", "-5"), ("--max-output-mb", "1e-7")])
def test_out_of_range_limits_are_refused(project: Project, args):
    run = project.build("--execute", *args)
    assert run.code == 2 and run.log.count("\n") == 1 and not project.built("en").exists()


def test_a_run_file_named_like_a_staging_file_is_kept_as_it_is(executed: Project):
    executed.append_cell("Path(OUTPUT_DIR, '.x.staging-1-old').write_text('mine')\n")
    assert executed.build("--execute").code == 0
    assert executed.build().code == 0
    assert (executed.outputs / ".x.staging-1-old").read_text() == "mine"
    one_run(executed)


@pytest.mark.parametrize("text, line, words", [
    ("\n[qiuck]\nSTEPS = 1\n", 10, "unknown key 'qiuck'"),
    ("", 9, "[quick] key 'import'"),
])
def test_manifest_mistakes_are_refused_before_a_kernel_starts(project: Project, text, line, words):
    project.append("notebook.toml", text)
    if not text:
        project.append("notebook.toml", "import = 1\n")
    run = project.build("--execute")
    assert run.code == 2 and "executing" not in run.log
    assert run.last.startswith(f"error: {project.notebook / 'notebook.toml'}:{line}: ") and words in run.last


def test_a_byte_order_mark_is_named(project: Project):
    path = project.notebook / "01_intro.py"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    run = project.build()
    assert run.code == 2 and run.last == f"error: {path}:1: starts with a UTF-8 byte-order mark (BOM): " \
        "save the file as UTF-8 without BOM"


def test_the_output_limit_stops_a_print_loop_while_it_runs(project: Project):
    project.append_cell("while True:\n    print('x' * 10_000)\n")
    run = project.build("--execute", "--max-output-mb", "1", "--timeout", "60")
    assert run.code == 1
    assert f"{project.line(1)}: OutputTooLarge" in run.last  # the cell


# 8. What the README promised: the whole project tree is compared.


def test_a_cell_writing_anywhere_in_the_project_fails_the_build(executed: Project):
    (executed.root / ".git" / "hooks").mkdir(parents=True)
    for folder in ("src", "tests", "docs"):
        (executed.root / folder).mkdir()
    targets = [executed.root / where for where in (".git/hooks/pre-commit", "src/extra.py", "tests/extra.py",
                                                    "docs/extra.md")]
    executed.append_cell("".join(f"open({str(target)!r}, 'w').write('x')\n" for target in targets))
    run = executed.build("--execute")
    assert run.code == 1 and all(f"created {target}" in run.last for target in targets)
