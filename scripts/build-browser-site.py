#!/usr/bin/env python3
"""Build the browser edition: a static JupyterLite site of infra-benchmark/kv-cache-browser.

    python3 scripts/build-browser-site.py          # -> _site/lite/ (not committed)
    python3 -m http.server --directory _site --bind 127.0.0.1 8000
    # then open http://127.0.0.1:8000/lite/notebooks/index.html?path=kv-cache-browser.en.ipynb

`bash scripts/dev.sh site` runs this as part of the whole website. Any Python >= 3.11 runs it: the
JupyterLite tools pinned in requirements-site.txt are installed into their own virtual environment,
.venv-site/ (created on first use, recreated when requirements-site.txt changes), and of this project
it reads only the builder's layout module (standard library only) and the built notebooks
build/infra-benchmark/kv-cache-browser.{en,zh}.ipynb (run the notebook builder first).

In the reader's browser the Pyodide kernel loads Pyodide and NumPy from the jsDelivr CDN (the URL is
written into the site's jupyter-lite.json); when that server cannot be reached, pyodide-check.js
(website/lite/, added to every app page) says so in the notebook's language within seconds.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # the builder's layout module: standard library only, no install needed
from learning_notebooks.layout import BUILD_DIR, built_name  # noqa: E402

REQUIREMENTS = REPO / "requirements-site.txt"
SITE_VENV = REPO / ".venv-site"
# The notebooks of the browser edition (they need NumPy and the standard library only).
NOTEBOOKS = ("infra-benchmark/kv-cache-browser",)
LANGUAGES = ("en", "zh")
# The JupyterLite apps the site ships: the notebook view the site's buttons open, JupyterLab and
# the file browser both link to.
APPS = ("notebooks", "lab", "tree")
# The kernel that jupyterlite-pyodide-kernel registers; the site copies are pointed at it so they
# open with the in-browser kernel instead of asking for "python3".
PYODIDE_KERNELSPEC = {"name": "python", "display_name": "Python (Pyodide)", "language": "python"}
PYODIDE_PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
# The header's "Open in Colab" badge: an image from Colab's server, the site's only request outside
# the CDN the kernel needs; the other-language and Colab text links stay.
COLAB_BADGE = re.compile(r"\[!\[[^\]]*\]\(https://colab\.research\.google\.com/assets/[^)]*\)\]\([^)]*\)(\s*&nbsp;)?\s*")
CHECK_SCRIPT = REPO / "website" / "lite" / "pyodide-check.js"


def bin_dir(env: Path) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin")


def site_python(env: Path) -> Path:
    return bin_dir(env) / ("python.exe" if os.name == "nt" else "python")


def requirements_stamp(requirements: Path) -> str:
    """What .venv-site was made from: the requirements' content and this Python's version."""
    return hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()


def ensure_site_venv(env: Path = SITE_VENV, requirements: Path = REQUIREMENTS) -> Path:
    """Create `env` with the pinned site tools unless it already matches `requirements`; its Python.

    The environment is built beside `env` and renamed into place, so an interrupted install never
    leaves a half-filled one that looks valid. Its tools are always run as `python -m ...`, which
    stays right after the rename (a script's first line would name the staging path).
    """
    stamp = env / "requirements.sha256"
    wanted = requirements_stamp(requirements)
    # Two builds at once (two test workers, or two terminals) must not both create it: the second waits
    # on a lock file beside `env`, then finds it made.
    with open(env.parent / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text().strip() == wanted and site_python(env).exists()):
            create_site_venv(env, requirements, wanted)
    return site_python(env)


def create_site_venv(env: Path, requirements: Path, wanted: str) -> None:
    """Build `env` beside itself and rename it into place (call it holding the lock)."""
    print(f"Creating {env} from {requirements.name} (first use, or the file changed) ...", flush=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{env.name}.building-", dir=env.parent))
    try:
        venv.EnvBuilder(with_pip=True).create(staging)
        subprocess.run(
            [str(site_python(staging)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(requirements)],
            check=True,
        )
        (staging / "requirements.sha256").write_text(wanted + "\n")
        if env.exists():
            shutil.rmtree(env)
        staging.rename(env)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def lite_names(notebook: str) -> list[str]:
    """File names of a notebook's copies in the site, one per language (`kv-cache-browser.en.ipynb`)."""
    return [built_name(notebook.rsplit("/", 1)[1], lang) for lang in LANGUAGES]


def joined(value):
    """A notebook's multi-line string (a list of lines on disk) as one string, as a Jupyter server sends it."""
    return "".join(value) if isinstance(value, list) else value


def for_lite(notebook: dict) -> dict:
    """The site's copy of a built notebook: the Pyodide kernelspec, no Colab badge image, and strings
    joined (JupyterLite serves the file as it is; JupyterLab's table of contents expects strings)."""
    notebook = json.loads(json.dumps(notebook))
    notebook.setdefault("metadata", {})["kernelspec"] = dict(PYODIDE_KERNELSPEC)
    for cell in notebook.get("cells", []):
        cell["source"] = joined(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            cell["source"] = COLAB_BADGE.sub("", cell["source"])
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = joined(output["text"])
            for mime, value in output.get("data", {}).items():
                output["data"][mime] = joined(value)
    return notebook


def stage_notebooks(built: Path, contents: Path) -> list[str]:
    """Copy the built notebooks into `contents` (see for_lite). Returns their names."""
    names = []
    for notebook_id in NOTEBOOKS:
        series, name = notebook_id.split("/")
        for lang in LANGUAGES:
            source = built / series / built_name(name, lang)
            if not source.is_file():
                sys.exit(
                    f"error: {source} is missing. Build it first:\n"
                    f"  bash scripts/dev.sh build --only {notebook_id}"
                )
            notebook = for_lite(json.loads(source.read_text(encoding="utf-8")))
            (contents / source.name).write_text(json.dumps(notebook, ensure_ascii=False, indent=1) + "\n",
                                                encoding="utf-8")
            names.append(source.name)
    return names


def pyodide_url(python: Path) -> str:
    """The Pyodide the pinned kernel was made for, on its CDN (the kernel's own default)."""
    code = ("from jupyterlite_pyodide_kernel.constants import PYODIDE_CDN_URL, PYODIDE_MJS; "
            "print(f'{PYODIDE_CDN_URL}/{PYODIDE_MJS}')")
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def lite_config(url: str) -> dict:
    """jupyter-lite.json of the site: the kernel's Pyodide URL written down, for pyodide-check.js to read."""
    return {
        "jupyter-lite-schema-version": 0,
        "jupyter-config-data": {"litePluginSettings": {PYODIDE_PLUGIN: {"pyodideUrl": url}}},
    }


def add_check_script(out: Path) -> list[Path]:
    """Load pyodide-check.js in every app page of the site; returns the pages changed."""
    shutil.copyfile(CHECK_SCRIPT, out / CHECK_SCRIPT.name)
    tag = f'<script src="../{CHECK_SCRIPT.name}" defer></script>\n'
    pages = []
    for app in APPS:
        page = out / app / "index.html"
        html = page.read_text(encoding="utf-8")
        if "</head>" not in html:
            sys.exit(f"error: {page} has no </head>; cannot add {CHECK_SCRIPT.name}")
        page.write_text(html.replace("</head>", tag + "</head>", 1), encoding="utf-8")
        pages.append(page)
    return pages


def build_site(built: Path, out: Path, env: Path = SITE_VENV) -> list[str]:
    """Build the JupyterLite site into `out` (replaced); returns the notebooks' file names in it."""
    python = ensure_site_venv(env)
    out = out.resolve()
    # `jupyter lite build` writes its state (.jupyterlite.doit.db) into the working directory:
    # run it in a scratch folder so the checkout stays clean.
    with tempfile.TemporaryDirectory(prefix="lite-build-") as scratch:
        work = Path(scratch)
        contents = work / "contents"
        contents.mkdir()
        names = stage_notebooks(built, contents)
        (work / "jupyter-lite.json").write_text(json.dumps(lite_config(pyodide_url(python)), indent=2) + "\n")
        staged = work / "site"
        command = [str(python), "-m", "jupyterlite_core", "build", "--contents", str(contents),
                   "--output-dir", str(staged), "--no-sourcemaps", "--no-unused-shared-packages"]
        for app in APPS:
            command += ["--apps", app]
        result = subprocess.run(command, cwd=work, capture_output=True, text=True)
        if result.returncode != 0:  # its output is noise when it succeeds (optional-package warnings)
            sys.exit(f"error: jupyter lite build failed:\n{result.stdout}{result.stderr}")
        listing = json.loads((staged / "api" / "contents" / "all.json").read_text(encoding="utf-8"))
        listed = sorted(item["name"] for item in listing["content"])
        missing = [name for name in names if name not in listed]
        if missing:
            sys.exit(f"error: the site's contents index does not list {missing} (it lists {listed})")
        add_check_script(staged)
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staged, out)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--built", type=Path, default=REPO / BUILD_DIR,
                        help="folder holding infra-benchmark/kv-cache-browser.{en,zh}.ipynb (default: build/)")
    parser.add_argument("--out", type=Path, default=REPO / "_site" / "lite",
                        help="site folder to (re)create (default: _site/lite/)")
    parser.add_argument("--venv", type=Path, default=SITE_VENV,
                        help="virtual environment for the site's tools (default: .venv-site/)")
    args = parser.parse_args(argv)
    names = build_site(args.built, args.out, args.venv)
    print(f"Built {args.out} with {', '.join(names)}.")
    root = args.out.resolve().parent
    print(f"Serve it with: python3 -m http.server --directory {root} --bind 127.0.0.1 8000\n"
          f"then open http://127.0.0.1:8000/{args.out.resolve().name}/notebooks/index.html?path={names[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
