"""A committed notebook runs top to bottom in a fresh kernel, in an empty folder, with only torch,
numpy and matplotlib installed (no transformers, no file of this repository): what a reader gets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from venvs import cached_venv, clean_env, venv_python

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
READER_VENV = Path(os.environ.get("READER_VENV", REPO / ".venv-reader"))
RUNNER = REPO / "tests" / "run_notebook_in_venv.py"
BUILT = REPO / "build" / "infra-benchmark"


@pytest.fixture(scope="module")
def reader_python() -> Path:
    return venv_python(cached_venv(READER_VENV, HERE / "requirements-reader.txt"))


@pytest.mark.parametrize("name", ["kv-cache.en.ipynb", "kv-cache.zh.ipynb"])
def test_built_notebook_runs_in_an_empty_folder_without_the_repository(name, reader_python, tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    notebook = shutil.copy(BUILT / name, folder / name)
    report = tmp_path / "report.json"
    subprocess.run(
        [str(reader_python), str(RUNNER), str(notebook), str(report)],
        cwd=folder, env=clean_env(), check=True, timeout=900,
    )
    result = json.loads(report.read_text())
    assert result["errors"] == []
    assert "transformers" not in result["after"]["modules"]
    assert "transformers is not installed" in result["stdout"] + result["markdown"]  # section 10 says so, skips
    assert "peer" not in json.loads((folder / "results.json").read_text())
    assert sorted(p.name for p in folder.iterdir()) == sorted([name, "masks.png", "results.json", "timing.png"])


SERVING_FILES = ["masks.png", "memory_waste.png", "padding_mask.png", "pool_occupancy.png", "results.json",
                 "static_vs_cat_step.png"]


@pytest.mark.parametrize("name", ["kv-cache-serving.en.ipynb", "kv-cache-serving.zh.ipynb"])
def test_serving_notebook_runs_in_an_empty_folder_without_the_repository(name, reader_python, tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    notebook = shutil.copy(BUILT / name, folder / name)
    report = tmp_path / "report.json"
    subprocess.run(
        [str(reader_python), str(RUNNER), str(notebook), str(report)],
        cwd=folder, env=clean_env(), check=True, timeout=900,
    )
    result = json.loads(report.read_text())
    assert result["errors"] == []
    assert "transformers" not in result["after"]["modules"]
    results = json.loads((folder / "results.json").read_text())
    assert results["peer"] == {"skipped": "transformers is not installed: the appendix is skipped."}
    assert sorted(p.name for p in folder.iterdir()) == sorted([name, *SERVING_FILES])


@pytest.mark.parametrize("name", ["kv-cache-hf-gpt2.en.ipynb", "kv-cache-hf-gpt2.zh.ipynb"])
def test_companion_skips_in_an_empty_folder_without_transformers(name, reader_python, tmp_path):
    """The Hugging Face companion says why it skips, records the skip, and raises nothing."""
    folder = tmp_path / "empty"
    folder.mkdir()
    notebook = shutil.copy(BUILT / name, folder / name)
    report = tmp_path / "report.json"
    subprocess.run(
        [str(reader_python), str(RUNNER), str(notebook), str(report)],
        cwd=folder, env=clean_env(), check=True, timeout=900,
    )
    result = json.loads(report.read_text())
    assert result["errors"] == []
    assert "transformers" not in result["after"]["modules"]
    skip = {"en": "transformers is not installed", "zh": "没有安装 transformers"}[name.split(".")[1]]
    assert result["markdown"].count(skip) == 2                      # section 4 and the closing cell
    peer = json.loads((folder / "results.json").read_text())["peer"]
    assert peer == {"skipped": "transformers is not installed, so the comparison with Hugging Face GPT-2 is skipped."}
    assert sorted(p.name for p in folder.iterdir()) == sorted([name, "masks.png", "results.json"])
