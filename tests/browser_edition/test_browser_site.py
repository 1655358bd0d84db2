"""The JupyterLite site of the browser edition builds, and a headless Chromium lists both notebooks.

The site is built with scripts/build-browser-site.py (JupyterLite tools in the cached .venv-site/)
into a pytest tmp folder, from the committed build/infra-benchmark/kv-cache-browser.{en,zh}.ipynb
when both exist, otherwise from notebooks the builder composes into a tmp folder.

The browser test serves the site from an http.server on 127.0.0.1 (a free port, stopped at the end),
opens /lab/index.html in Debian's headless chromium, lets the JupyterLab app render (--dump-dom with
a virtual-time budget), and reads the rendered file browser: both notebooks must be listed, and the
launcher must offer the in-browser "Python (Pyodide)" kernel. Without chromium the test is skipped
locally and fails in CI (CI=true); scripts/install-browser-test-deps.sh installs it.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from browser_helpers import LANGUAGES, NOTEBOOK, REPO, compose_notebooks
from venvs import in_ci

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
NAMES = [f"{NOTEBOOK.rsplit('/', 1)[1]}.{lang}.ipynb" for lang in LANGUAGES]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    committed = REPO / "build"
    if all((committed / f"{NOTEBOOK}.{lang}.ipynb").is_file() for lang in LANGUAGES):
        built = committed
    else:
        built = compose_notebooks(tmp_path_factory.mktemp("composed"))["en"].parents[1]
    out = tmp_path_factory.mktemp("site") / "_site"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build-browser-site.py"), "--built", str(built), "--out", str(out)],
        check=True, cwd=REPO, capture_output=True, text=True,
    )
    return out


def test_site_builds_with_both_notebooks(site):
    assert (site / "index.html").is_file() and (site / "lab" / "index.html").is_file()
    listing = json.loads((site / "api" / "contents" / "all.json").read_text(encoding="utf-8"))
    assert sorted(item["name"] for item in listing["content"]) == sorted(NAMES)
    for name in NAMES:
        notebook = json.loads((site / "files" / name).read_text(encoding="utf-8"))
        assert notebook["metadata"]["kernelspec"]["name"] == "python"  # the Pyodide kernel's name
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        assert code and any("import numpy" in "".join(c["source"]) for c in code)
    config = json.loads((site / "jupyter-lite.json").read_text(encoding="utf-8"))
    assert config["jupyter-config-data"]["appVersion"] == "0.8.6"
    assert (site / "extensions" / "@jupyterlite" / "pyodide-kernel-extension").is_dir()


class _Listing(html.parser.HTMLParser):
    """Collects the text of the file browser's entries and of the launcher's cards."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.items: list[str] = []
        self.cards: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag in ("br", "img", "input", "meta", "link", "path", "rect", "circle", "polygon"):
            return  # void (or usually self-closing) elements never get an end tag
        self.stack.append("item" if "jp-DirListing-itemText" in classes else "")
        if "jp-LauncherCard" in classes and attrs.get("title"):
            self.cards.append(attrs["title"])

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if tag in ("br", "img", "input", "meta", "link", "path", "rect", "circle", "polygon"):
            return
        if self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if "item" in self.stack and data.strip():
            self.items.append(data.strip())


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requested: list[str]

    def log_message(self, format, *args):  # keep pytest output clean, but remember what was fetched
        self.requested.append(self.path)


@pytest.fixture()
def served(site):
    requested: list[str] = []
    handler = functools.partial(type("Handler", (_QuietHandler,), {"requested": requested}), directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def dump_dom(url: str, profile: Path, budget_ms: int) -> str:
    """The DOM of `url` after chromium ran its scripts for `budget_ms` of virtual time."""
    if profile.exists():
        shutil.rmtree(profile)
    profile.mkdir()
    command = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
               f"--virtual-time-budget={budget_ms}", "--dump-dom", url]
    # Own process group, so chromium's helper processes go too if it has to be stopped.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, _ = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # any helper left behind by this chromium
        except ProcessLookupError:
            pass
    assert process.returncode == 0, f"chromium exited with {process.returncode}"
    return stdout


def test_headless_chromium_lists_both_notebooks(served, tmp_path):
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} not found; run scripts/install-browser-test-deps.sh"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    base, requested = served
    listing = _Listing()
    for budget_ms in (600_000, 1_200_000):  # a second, longer try if the app had not rendered yet
        listing = _Listing()
        listing.feed(dump_dom(f"{base}/lab/index.html", tmp_path / "chromium-profile", budget_ms))
        if all(name in listing.items for name in NAMES):
            break
    assert all(name in listing.items for name in NAMES), (
        f"file browser shows {listing.items}; expected {NAMES}"
    )
    assert "Python (Pyodide)" in listing.cards, f"launcher cards: {listing.cards}"
    assert any(path.startswith("/api/contents/all.json") for path in requested), requested
