"""The repository's own notebooks: they build and run in quick mode, and the committed build/ is current."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import nbformat
import pytest

from learning_notebooks.cli import main
from learning_notebooks.files import digest_tree
from learning_notebooks.layout import BUILD_DIR, METADATA_KEY, built_path, outputs_dir
from learning_notebooks.sources import discover

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = [f"{series}/{name}" for series, name in discover(REPO / "notebooks_src")]
BUILT = sorted((REPO / BUILD_DIR).glob("*/*.ipynb"))
MEMORY_ADDRESS = re.compile(r" at 0x[0-9a-f]{6,}")


def build(*args: str) -> tuple[int, str]:
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        code = main(["--root", str(REPO), *args])
    return code, log.getvalue()


@pytest.fixture(scope="module")
def quick_build(tmp_path_factory) -> tuple[int, str, Path]:
    """Every notebook built and run in quick mode by the real command, two at a time (`--jobs 2`)."""
    out = tmp_path_factory.mktemp("quick_build")
    code, log = build("--execute", "--quick", "--jobs", "2", "--out", str(out))
    return code, log, out


def test_every_notebook_builds_in_quick_mode(quick_build):
    code, log, _ = quick_build
    assert code == 0, log
    assert all(f"{target}: executed" in log for target in NOTEBOOKS), log


@pytest.mark.parametrize("target", NOTEBOOKS)
def test_notebook_builds_and_runs_in_quick_mode(target, quick_build):
    code, log, out = quick_build
    assert code == 0, log
    series, name = target.split("/")
    for lang in ("en", "zh"):
        notebook = nbformat.read(built_path(out, series, name, lang), as_version=4)
        assert notebook.metadata[METADATA_KEY]["quick"] is True
        errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert errors == []
    written = digest_tree(outputs_dir(out, series, name))
    assert written == notebook.metadata[METADATA_KEY]["output_files"]
    if target == "infra-benchmark/kv-cache":
        results = json.loads((outputs_dir(out, series, name) / "results.json").read_text())
        assert results["quick"] is True and results["notebook"] == target
        assert {"environment", "config", "equivalence", "negative_controls", "timing"} <= results.keys()
        assert "peer" not in results                     # moved to infra-benchmark/kv-cache-hf-gpt2
        assert len(results["equivalence"]["configs"]) == 12
        assert all(control["detected"] for control in results["negative_controls"].values())
    if target == "infra-benchmark/kv-cache-hf-gpt2":
        results = json.loads((outputs_dir(out, series, name) / "results.json").read_text())
        assert results["quick"] is True and results["notebook"] == target
        assert results["peer"]["agrees"] is True and all(t["caught"] for t in results["peer"]["traps"].values())


def test_committed_build_is_current():
    code, log = build("--check", "--strict-env")  # as CI: a differing environment is a failure here
    assert code == 0, log


def test_every_notebook_ships_in_every_language():
    assert {p.name.split(".")[0] for p in BUILT} == {t.split("/")[1] for t in NOTEBOOKS}
    assert len(BUILT) == 2 * len(NOTEBOOKS)


@pytest.mark.parametrize("path", BUILT, ids=lambda p: p.name)
def test_built_notebook_is_valid_and_clean(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata[METADATA_KEY]["executed"] is True
    text = path.read_text(encoding="utf-8")
    assert not MEMORY_ADDRESS.search(text)
    assert str(REPO) not in text
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.get("name") == "stderr"], "a cell wrote to stderr (a warning?)"
