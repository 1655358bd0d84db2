"""The real command, as a user runs it: the script entry point in a separate process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fixture_project import FIXTURE, Project

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-learning-notebooks.py"


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_help_describes_every_option(tmp_path):
    run = command("--help", cwd=tmp_path)
    assert run.returncode == 0
    for option in ("--only", "--lang", "--execute", "--quick", "--check", "--force", "--list", "--timeout", "--out"):
        assert option in run.stdout


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

    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--execute"], cwd=project.root, stderr=subprocess.PIPE, text=True
    )
    for line in process.stderr:
        if "cell 6 of 6" in line:
            break
    time.sleep(1.5)  # let the kernel enter the sleeping cell
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "interrupted" in rest
    assert {p: p.read_bytes() for p in before} == before
    leftovers = [p for p in project.root.rglob("*") if p.name.startswith(".")]
    assert leftovers == []
    kernels = subprocess.run(["pgrep", "-f", f"ipykernel_launcher.*{os.getpid()}"], capture_output=True)
    assert kernels.returncode == 1  # nothing left running that we started
