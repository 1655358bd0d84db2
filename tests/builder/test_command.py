"""The real command, as a user runs it: the script entry point in a separate process."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixture_project import FIXTURE, Project

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-learning-notebooks.py"


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_help_describes_every_option(tmp_path):
    run = command("--help", cwd=tmp_path)
    assert run.returncode == 0
    for option in ("--only", "--lang", "--execute", "--quick", "--check", "--force", "--list", "--timeout", "--out",
                   "--jobs", "--strict-env", "--max-output-mb"):
        assert option in run.stdout


def test_python_dash_m_runs_the_command(tmp_path):
    run = subprocess.run([sys.executable, "-m", "learning_notebooks", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "--execute" in run.stdout


def descendants(pid: int) -> dict[int, str]:
    """Process id -> command line of every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = {}, [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            try:
                found[child] = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            queue.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_until(project: Project, text: str) -> subprocess.Popen:
    """Start `--execute` in `project`; return once a line of its stderr contains `text`."""
    process = subprocess.Popen([sys.executable, str(SCRIPT), "--execute"], cwd=project.root,
                               stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if text in line:
            break
    return process


def kernels_of(process: subprocess.Popen) -> list[int]:
    return [pid for pid, cmd in descendants(process.pid).items() if "ipykernel" in cmd]


def still_alive(pids: list[int], seconds: float = 10) -> list[int]:
    """The processes of `pids` still running after waiting up to `seconds` for them to end."""
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


def test_end_to_end_in_a_temporary_folder(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "project")
    project = Project(tmp_path / "project")
    out = tmp_path / "elsewhere"

    run = command("--only", "demo", "--execute", "--out", str(out), cwd=project.notebook)  # root found upwards
    assert run.returncode == 0, run.stderr
    assert "cell 3 of 5 (02_compute.py:9)" in run.stderr  # plain progress lines when not a terminal
    assert "demo/hello: executed" in run.stderr
    assert (out / "build" / "demo" / "hello.en.ipynb").exists()
    assert (out / "build" / "demo" / "hello.zh.ipynb").exists()
    assert (out / "outputs" / "demo" / "hello" / "result.json").exists()
    assert not (project.root / "build").exists()

    listing = command("--list", cwd=project.root)
    assert listing.returncode == 0 and listing.stdout.startswith("demo/hello\t2 sections\tHello fixture")
    assert command("--check", "--out", str(out), cwd=project.root).returncode == 0


def test_ctrl_c_stops_the_kernel_and_keeps_the_previous_build(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "project")
    project = Project(tmp_path / "project")
    assert command("--execute", cwd=project.root).returncode == 0
    before = {p: p.read_bytes() for p in (project.built("en"), project.built("zh"), project.outputs / "result.json")}
    project.append("02_compute.py", "\n# %%\nimport time\nprint('sleeping', flush=True)\ntime.sleep(120)\n")

    process = start_until(project, "cell 6 of 6")
    time.sleep(1.5)  # let the kernel enter the sleeping cell
    kernels = kernels_of(process)
    assert kernels, "the run's kernel was not found, so this test could not notice it surviving"
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "interrupted" in rest
    assert {p: p.read_bytes() for p in before} == before
    leftovers = [p for p in project.root.rglob("*") if p.name.startswith(".")]
    assert leftovers == []
    assert still_alive(kernels) == []  # the kernels this run started are gone


def test_sigterm_is_handled_like_sigint_and_exits_143(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "project")
    project = Project(tmp_path / "project")
    marker = (project.notebook / "02_compute.py").read_text(encoding="utf-8").count("\n") + 2
    project.append("02_compute.py", "\n# %%\nimport time\ntime.sleep(120)\n")
    process = start_until(project, f"(02_compute.py:{marker})")
    time.sleep(1.5)  # let the kernel enter the sleeping cell
    kernels = kernels_of(process)
    assert kernels
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 143
    assert rest.strip().splitlines() == [rest.strip().splitlines()[-1]]
    assert rest.startswith("interrupted:")
    assert not (project.root / "build").exists() and not (project.root / "outputs").exists()
    assert [p for p in project.root.rglob("*") if p.name.startswith(".")] == []
    assert still_alive(kernels) == []


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_kernel_start_up_gives_one_line(tmp_path, signum, code):
    shutil.copytree(FIXTURE, tmp_path / "project")
    project = Project(tmp_path / "project")
    process = start_until(project, "executing")
    process.send_signal(signum)  # the kernel is starting: no cell has run yet
    _, rest = process.communicate(timeout=60)
    assert process.returncode == code, rest
    assert "Traceback" not in rest
    assert [line for line in rest.splitlines() if not line.startswith("  demo/hello: cell")] == [
        rest.strip().splitlines()[-1]
    ]
    assert rest.strip().splitlines()[-1].startswith("interrupted:")
    assert not (project.root / "build").exists()


def test_two_builds_of_one_tree_never_interleave(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "project")
    project = Project(tmp_path / "project")
    marker = (project.notebook / "02_compute.py").read_text(encoding="utf-8").count("\n") + 2
    project.append("02_compute.py", "\n# %%\nimport time\ntime.sleep(3)\n")
    first = start_until(project, f"(02_compute.py:{marker})")
    second = command("--execute", "--force", cwd=project.root)
    _, rest = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, rest + second.stderr
    assert "waiting: another build holds" in second.stderr
    assert "demo/hello: executed" in second.stderr
    assert command("--check", cwd=project.root).returncode == 0
