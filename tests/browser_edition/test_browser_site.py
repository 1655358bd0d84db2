"""The browser edition's JupyterLite site builds with its documented command.

`python3 scripts/build-browser-site.py` is run as docs/browser-edition.md says, with a plain Python (the
one this virtual environment was made from, in a clean environment: no project package importable)
and `--out` pointing into a tmp folder. Its tools come from the cached .venv-site/.

In a browser, with Pyodide's CDN unreachable, the site says so: tests/site/test_site_browser.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from browser_helpers import LANGUAGES, NOTEBOOK, REPO
from venvs import clean_env

NAMES = [f"{NOTEBOOK.rsplit('/', 1)[1]}.{lang}.ipynb" for lang in LANGUAGES]


@pytest.fixture(scope="module")
def lite(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser-edition") / "lite"
    python = getattr(sys, "_base_executable", sys.executable)
    result = subprocess.run([python, "scripts/build-browser-site.py", "--out", str(out)],
                            cwd=REPO, env=clean_env(), capture_output=True, text=True)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert f"Built {out} with {', '.join(NAMES)}." in result.stdout
    return out


def test_the_documented_command_needs_no_project_package():
    python = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([python, "-c", "import nbformat"], env=clean_env(), capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{python} has the project's packages; it cannot show that the command needs none")
    result = subprocess.run([python, "scripts/build-browser-site.py", "--help"], cwd=REPO, env=clean_env(),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_site_holds_both_notebooks_with_the_pyodide_kernel(lite):
    listing = json.loads((lite / "api" / "contents" / "all.json").read_text(encoding="utf-8"))
    assert sorted(item["name"] for item in listing["content"]) == sorted(NAMES)
    for name in NAMES:
        notebook = json.loads((lite / "files" / name).read_text(encoding="utf-8"))
        assert notebook["metadata"]["kernelspec"]["name"] == "python"  # the Pyodide kernel's name
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        assert code and any("import numpy" in c["source"] for c in code)
        assert "colab-badge.svg" not in json.dumps(notebook)  # no image from another server
    config = json.loads((lite / "jupyter-lite.json").read_text(encoding="utf-8"))["jupyter-config-data"]
    assert config["appVersion"] == "0.8.6"
    assert (lite / "extensions" / "@jupyterlite" / "pyodide-kernel-extension").is_dir()
    assert not list(lite.rglob("*.js.map"))


def test_pyodide_url_is_the_kernels_own_and_every_app_checks_it(lite):
    config = json.loads((lite / "jupyter-lite.json").read_text(encoding="utf-8"))["jupyter-config-data"]
    url = config["litePluginSettings"]["@jupyterlite/pyodide-kernel-extension:kernel"]["pyodideUrl"]
    bundles = (lite / "extensions" / "@jupyterlite" / "pyodide-kernel-extension" / "static").glob("*.js")
    assert any(url in path.read_text(encoding="utf-8", errors="replace") for path in bundles), \
        f"{url} is not the kernel's default Pyodide URL"
    assert (lite / "pyodide-check.js").is_file()
    for app in ("notebooks", "lab", "tree"):
        assert '<script src="../pyodide-check.js" defer></script>' in (lite / app / "index.html").read_text()
