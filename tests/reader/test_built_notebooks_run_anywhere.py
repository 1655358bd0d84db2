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


# What each notebook leaves in its folder, and the sentence that says (in each language) that its
# Hugging Face part is skipped. No edition writes results.json: the cell that writes it is tagged
# `record`, so only the build runs it.
EXPECTED = {
    "kv-cache": {
        "files": ["cache_growth.png", "generation.png", "masks.png", "timing.png"],
        "skip": {"en": "transformers is not installed", "zh": "没有安装 transformers"},
    },
    "kv-cache-hf-gpt2": {
        "files": ["masks.png"],
        "skip": {"en": "transformers is not installed", "zh": "没有安装 transformers"},
    },
    "kv-cache-serving": {
        "files": ["block_table.png", "continuous_batching.png", "masks.png", "memory_use.png", "padding_mask.png",
                  "static_vs_cat_step.png"],
        "skip": {"en": "this section is skipped", "zh": "跳过本节"},
    },
    "kv-cache-architectures": {
        "files": ["gqa_heads.png", "masks.png", "memory.png", "quantized_cache_error.png", "sliding_window.png"],
        "skip": {"en": "referees are skipped", "zh": "裁判已跳过"},
    },
    "kv-cache-compression": {
        "files": ["cache_growth.png", "eviction_sweep.png", "mla_cost.png", "sinks_vs_dense.png"],
        "skip": {"en": "referee is skipped", "zh": "裁判已跳过"},
    },
    "kv-cache-reuse": {
        "files": ["masks.png", "prefix_hit_rate.png", "roofline.png", "speculative_calls.png"],
        "skip": {"en": "comparison with assisted generation is skipped", "zh": "跳过与辅助生成的比较"},
    },
}
LANGUAGES = ("en", "zh")


def run_edition(filename: str, reader_python: Path, tmp_path: Path) -> tuple[Path, Path, subprocess.Popen]:
    """Start one edition in an empty folder of its own, in a fresh process of the reader's environment."""
    folder = tmp_path / filename / "empty"
    folder.mkdir(parents=True)
    notebook = shutil.copy(BUILT / filename, folder / filename)
    report = tmp_path / filename / "report.json"
    process = subprocess.Popen([str(reader_python), str(RUNNER), str(notebook), str(report)], cwd=folder, env=clean_env())
    return folder, report, process


@pytest.mark.parametrize("name", EXPECTED)
def test_built_notebook_runs_in_an_empty_folder_without_the_repository(name, reader_python, tmp_path):
    """Each edition top to bottom, no error; transformers never imported; the skip said in the
    notebook's language; exactly the notebook's own files written. The editions run side by side (two
    processes, one thread each), as two readers would."""
    runs = {lang: run_edition(f"{name}.{lang}.ipynb", reader_python, tmp_path) for lang in LANGUAGES}
    for lang, (_, _, process) in runs.items():
        assert process.wait(timeout=900) == 0, f"{name}.{lang}.ipynb"
    for lang, (folder, report, _) in runs.items():
        filename = f"{name}.{lang}.ipynb"
        result = json.loads(report.read_text())
        assert result["errors"] == [], filename
        assert "transformers" not in result["after"]["modules"], filename
        assert EXPECTED[name]["skip"][lang] in result["stdout"] + result["markdown"], filename
        assert sorted(p.name for p in folder.iterdir()) == sorted([filename, *EXPECTED[name]["files"]]), filename
