#!/usr/bin/env python3
"""Build the static JupyterLite site of the browser edition (infra-benchmark/kv-cache-browser).

    python scripts/build-browser-site.py                # -> _site/ (not committed)
    python -m http.server --directory _site --bind 127.0.0.1 8000   # then open http://127.0.0.1:8000/

The site holds both language versions of the built notebook,
build/infra-benchmark/kv-cache-browser.en.ipynb and .zh.ipynb (run the notebook builder first).
The JupyterLite tools pinned in requirements-site.txt are installed into their own virtual
environment, .venv-site/, which is recreated only when requirements-site.txt changes (content hash).
In the browser the Pyodide kernel loads Pyodide and NumPy from a CDN when a notebook first runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from learning_notebooks.layout import BUILD_DIR, built_name  # the builder's layout (run with .venv's Python)

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements-site.txt"
NOTEBOOK = "infra-benchmark/kv-cache-browser"
LANGUAGES = ("en", "zh")
# The kernel that jupyterlite-pyodide-kernel registers; the site copies are pointed at it so they
# open with the in-browser kernel instead of asking for "python3".
PYODIDE_KERNELSPEC = {"name": "python", "display_name": "Python (Pyodide)", "language": "python"}


def bin_dir(env: Path) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin")


def requirements_hash(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def ensure_site_venv(env: Path, requirements: Path = REQUIREMENTS) -> Path:
    """Create `env` with the pinned JupyterLite tools unless it already matches `requirements`.

    Returns the path of its `jupyter` executable.
    """
    stamp = env / "requirements.sha256"
    wanted = requirements_hash(requirements)
    jupyter = bin_dir(env) / "jupyter"
    if stamp.is_file() and stamp.read_text().strip() == wanted and jupyter.exists():
        return jupyter
    if env.exists():
        shutil.rmtree(env)
    print(f"Creating {env} with {requirements.name} ...", flush=True)
    venv.EnvBuilder(with_pip=True).create(env)
    python = bin_dir(env) / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(requirements)],
        check=True,
    )
    stamp.write_text(wanted + "\n")
    return jupyter


def stage_notebooks(built: Path, contents: Path) -> list[str]:
    """Copy the built notebooks into `contents`, with the Pyodide kernelspec. Returns their names."""
    names = []
    for lang in LANGUAGES:
        series, name = NOTEBOOK.split("/")
        source = built / series / built_name(name, lang)
        if not source.is_file():
            sys.exit(
                f"error: {source} is missing. Build it first:\n"
                f"  python scripts/build-learning-notebooks.py --only {NOTEBOOK} --execute"
            )
        notebook = json.loads(source.read_text(encoding="utf-8"))
        notebook.setdefault("metadata", {})["kernelspec"] = dict(PYODIDE_KERNELSPEC)
        name = source.name
        (contents / name).write_text(json.dumps(notebook, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        names.append(name)
    return names


def build_site(built: Path, out: Path, env: Path) -> list[str]:
    jupyter = ensure_site_venv(env)
    out = out.resolve()
    if out.exists():
        shutil.rmtree(out)
    # `jupyter lite build` writes its state (.jupyterlite.doit.db) into the working directory:
    # run it in a scratch folder so the checkout stays clean.
    with tempfile.TemporaryDirectory(prefix="lite-build-") as scratch:
        work = Path(scratch)
        contents = work / "contents"
        contents.mkdir()
        names = stage_notebooks(built, contents)
        subprocess.run(
            [str(jupyter), "lite", "build", "--contents", str(contents), "--output-dir", str(out)],
            cwd=work,
            check=True,
        )
    listing = json.loads((out / "api" / "contents" / "all.json").read_text(encoding="utf-8"))
    listed = sorted(item["name"] for item in listing["content"])
    missing = [name for name in names if name not in listed]
    if missing:
        sys.exit(f"error: the site's contents index does not list {missing} (it lists {listed})")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--built", type=Path, default=REPO / BUILD_DIR,
                        help="folder holding infra-benchmark/kv-cache-browser.{en,zh}.ipynb (default: build/)")
    parser.add_argument("--out", type=Path, default=REPO / "_site", help="site folder to (re)create (default: _site/)")
    parser.add_argument("--venv", type=Path, default=REPO / ".venv-site",
                        help="virtual environment for the JupyterLite tools (default: .venv-site/)")
    args = parser.parse_args(argv)
    names = build_site(args.built, args.out, args.venv)
    print(f"Built {args.out} with {', '.join(names)}.")
    print(f"Serve it with: python -m http.server --directory {args.out} --bind 127.0.0.1 8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
