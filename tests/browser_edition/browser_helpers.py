"""Shared helpers for the browser-edition tests: cached virtual environments, composing the notebook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from learning_notebooks.layout import built_path


HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NOTEBOOK = "infra-benchmark/kv-cache-browser"
LANGUAGES = ("en", "zh")
NUMPY_ONLY_REQUIREMENTS = HERE / "requirements-numpy-only.txt"
NUMPY_ONLY_VENV = Path(os.environ.get("NUMPY_ONLY_VENV", REPO / ".venv-numpy-only"))


def compose_notebooks(out: Path) -> dict[str, Path]:
    """Compose the notebook with the project's builder (no execution) into `out`; paths by language."""
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build-learning-notebooks.py"), "--only", NOTEBOOK,
         "--out", str(out)],
        check=True, cwd=REPO, capture_output=True, text=True,
    )
    series, name = NOTEBOOK.split("/")
    paths = {lang: built_path(out, series, name, lang) for lang in LANGUAGES}
    for path in paths.values():
        assert path.is_file(), f"the builder did not write {path}"
    return paths
