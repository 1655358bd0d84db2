"""Fixtures of the website's tests: the site built once per session, served on 127.0.0.1, a headless
Chromium that can reach nothing else, and screenshots kept when a test fails.

- `site`: `scripts/build-site.py --out <tmp>` run with the Python this virtual environment was made
  from and a clean environment (the command needs only Python >= 3.11; its tools live in .venv-site/),
  from the committed build/ and outputs/.
- `serve(folder)`: an http.server on 127.0.0.1 (a free port, stopped at the end).
- `chromium`: Debian's /usr/bin/chromium driven by playwright through its executable path (nothing
  downloaded). Without it the browser tests skip locally and fail in CI (CI=true);
  scripts/install-browser-test-deps.sh installs it.
- `offline_page(context)`: a page whose every request to a host other than 127.0.0.1 is refused and
  recorded, with its failed requests (network errors, HTTP >= 400) and uncaught script errors.

Screenshots: tests save PNGs under `shots` (a temporary folder); when a test that used it fails, they
are copied to test-output/site/ (or $SITE_TEST_OUTPUT) at the end of the run, and always with
SITE_SCREENSHOTS=1.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from venvs import clean_env, in_ci

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  # A second wall besides the page's request routing: no host name but 127.0.0.1 resolves.
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
OUTPUT = Path(os.environ.get("SITE_TEST_OUTPUT", REPO / "test-output" / "site"))


def load_script(name: str):
    """A script of scripts/ as a module (its file name has dashes)."""
    path = REPO / "scripts" / name
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_site = load_script("build-site.py")


def base_python() -> str:
    """The Python this virtual environment was made from: no project package installed in it."""
    return getattr(sys, "_base_executable", sys.executable)


def run_site_build(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([base_python(), str(REPO / "scripts" / "build-site.py"), "--out", str(out), *extra],
                          cwd=REPO, env=clean_env(), capture_output=True, text=True)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "_site"
    result = run_site_build(out)
    assert result.returncode == 0, f"the site build failed:\n{result.stdout}\n{result.stderr}"
    print(f"\n{result.stdout.strip()}")
    return out


@dataclass
class Server:
    base: str
    requested: list[str] = field(default_factory=list)


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a page left early
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def serve():
    servers = []

    def start(folder: Path) -> Server:
        server_info = Server("")

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format, *args):  # keep pytest's output clean; remember what was fetched
                server_info.requested.append(self.path)

        server = QuietServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        server_info.base = f"http://127.0.0.1:{server.server_address[1]}"
        return server_info

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def chromium():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} not found; run scripts/install-browser-test-deps.sh"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # playwright starts it with a fresh temporary profile (its own --user-data-dir), removed after.
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class PageLog:
    """What one page did: requests refused (other hosts), failed, and uncaught errors."""
    blocked: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme not in ("http", "https", "ws", "wss") or parts.hostname == "127.0.0.1"


@pytest.fixture(scope="module")
def context(chromium):
    """A fresh browser context (its own cache and storage) that refuses every host but 127.0.0.1."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    context.blocked = []

    def route(route):
        if is_local(route.request.url):
            route.continue_()
        else:
            context.blocked.append(route.request.url)
            route.abort("blockedbyclient")

    context.route("**/*", route)
    yield context
    context.close()


def open_page(context) -> tuple:
    """A new page of `context` and its PageLog (failed http(s) requests, HTTP errors, script errors)."""
    page = context.new_page()
    log = PageLog()

    def failed(request):
        if urlsplit(request.url).scheme in ("http", "https"):  # not about:blank (MathJax's font probe)
            target = log.failed if is_local(request.url) else log.blocked
            target.append(f"{request.url} ({request.failure})")

    page.on("requestfailed", failed)
    page.on("response", lambda response: response.status >= 400 and log.failed.append(f"{response.url} (HTTP {response.status})"))
    page.on("pageerror", lambda error: log.errors.append(str(error)))
    return page, log


SHOTS: list[Path] = []


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("screenshots")
    SHOTS.append(folder)
    return folder


def pytest_runtest_makereport(item, call):
    if call.when == "call" and call.excinfo is not None and "shots" in item.fixturenames:
        item.session.site_test_failed = True


def pytest_sessionfinish(session):
    keep = getattr(session, "site_test_failed", False) or os.environ.get("SITE_SCREENSHOTS") == "1"
    if keep and SHOTS and any(SHOTS[0].iterdir()):
        shutil.rmtree(OUTPUT, ignore_errors=True)
        shutil.copytree(SHOTS[0], OUTPUT)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter:
            reporter.write_line(f"screenshots of the website saved in {OUTPUT}")
