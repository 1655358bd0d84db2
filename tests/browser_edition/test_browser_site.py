"""The JupyterLite site of the browser edition builds, and a headless Chromium lists both notebooks.

The site is built with scripts/build-browser-site.py (JupyterLite tools in the cached .venv-site/)
into a pytest tmp folder, from the committed build/infra-benchmark/kv-cache-browser.{en,zh}.ipynb
when both exist, otherwise from notebooks the builder composes into a tmp folder.

The browser test serves the site from an http.server on 127.0.0.1 (a free port, stopped at the end),
opens /lab/index.html in Debian's headless chromium (driven by selenium through Debian's chromedriver),
and polls the live page until the JupyterLab app has rendered its file browser: both notebooks must be listed, and the
launcher must offer the in-browser "Python (Pyodide)" kernel. Without chromium the test is skipped
locally and fails in CI (CI=true); scripts/install-browser-test-deps.sh installs it.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from browser_helpers import LANGUAGES, NOTEBOOK, REPO, compose_notebooks
from venvs import in_ci

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
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


@pytest.fixture()
def browser(tmp_path):
    """Headless Debian chromium driven through Debian's chromedriver (selenium; nothing downloaded)."""
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        message = f"{CHROMIUM} or {CHROMEDRIVER} not found; run scripts/install-browser-test-deps.sh"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def texts(driver, css: str, attribute: str | None = None) -> list[str]:
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        return [(e.get_attribute(attribute) if attribute else e.text).strip() for e in driver.find_elements("css selector", css)]
    except StaleElementReferenceException:  # the app re-rendered under us: read again next poll
        return []


def test_headless_chromium_lists_both_notebooks(served, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    base, requested = served
    browser.get(f"{base}/lab/index.html")
    # The JupyterLab app renders the file browser client-side; poll the live DOM (real time, not a
    # virtual-time budget, which a busy machine can exhaust before the app has fetched its files).
    WebDriverWait(browser, 240, poll_frequency=1).until(
        lambda d: set(NAMES) <= set(texts(d, ".jp-DirListing-itemText")),
        message=f"file browser never listed {NAMES}",
    )
    WebDriverWait(browser, 120, poll_frequency=1).until(
        lambda d: "Python (Pyodide)" in texts(d, ".jp-LauncherCard", "title"),
        message="the launcher never offered the Python (Pyodide) kernel",
    )
    assert any(path.startswith("/api/contents/all.json") for path in requested), requested
