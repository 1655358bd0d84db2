"""The website in a real browser, offline: headless Chromium on the site served from 127.0.0.1, with
every request to another host refused (conftest.py).

One crawl visits every page of both languages (the landing page, each book's front page and search
page, every notebook's page), waits for MathJax, and records what each page did and shows; the tests
below each check one property over all those pages:

- every page loads with no failed request, no refused request (nothing from a CDN) and no script error;
- math is typeset (every formula rendered, no raw `$`, `\\(` or `\\[` left in the text) and every image
  loads (each notebook page shows as many figures as its notebook has PNG outputs);
- the language button leads to the twin page; the Colab button is the notebook header's own link, or
  absent while no repository is configured; the download links serve the built files byte for byte;
  the browser edition's button opens it; links within the site lead to files of the site;
- a search for an English term and for a Chinese term finds the right page, in its language only;
- the browser edition, with Pyodide's CDN unreachable, says so in the notebook's language.

Screenshots of two pages per language, of the search results and of the offline notices are kept
when a test fails (conftest.py).
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from conftest import REPO, build_site, open_page, run_site_build

MATH_TIMEOUT_MS = 60_000
JS_PAGE_STATE = r"""() => {
  const skip = "pre, code, script, style, [class*='MathJax']";
  const article = document.querySelector("article") || document.body;
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const raw = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (node.parentElement.closest(skip)) continue;
    if (/\$|\\\(|\\\[/.test(node.textContent)) raw.push(node.textContent.trim().slice(0, 100));
  }
  const math = [...document.querySelectorAll(".math.notranslate")];
  const hrefs = (selector) => [...document.querySelectorAll(selector)].map((a) => a.href);
  return {
    lang: document.documentElement.lang,
    h1: ((document.querySelector("article h1") || {}).textContent || "").replace(/[#¶]\s*$/, "").trim(),
    raw,
    math: math.length,
    untypeset: math.filter((e) => !e.querySelector(".MathJax, .MathJax_Display")).length,
    math_errors: document.querySelectorAll(".MathJax_Error, .merror").length,
    images: [...document.images].map((i) => ({ src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0 })),
    language: hrefs("a.site-button-language"),
    colab: hrefs("a.site-button-colab"),
    browser: hrefs("a.site-button-browser"),
    downloads: hrefs("a.site-download"),
    links: hrefs("a[href]"),
  };
}"""
# Resolves when MathJax has finished its work on the page (its queue runs the callback after the
# first typesetting, font loads included); true when every formula is then rendered.
MATH_SETTLED = """async (timeout) => {
  const formulas = () => [...document.querySelectorAll(".math.notranslate")];
  if (!formulas().length) return true;
  const deadline = Date.now() + timeout;
  while (!(window.MathJax && MathJax.Hub && MathJax.Hub.Queue)) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await new Promise((resolve) => MathJax.Hub.Queue(resolve));
  return formulas().every((e) => e.querySelector(".MathJax, .MathJax_Display"));
}"""


def settle_math(page) -> bool:
    return page.evaluate(MATH_SETTLED, MATH_TIMEOUT_MS)


@dataclass
class Book:
    languages: list[str]
    notebooks: list  # build_site.Notebook, in book order
    book: dict

    def html_lang(self, lang: str) -> str:
        return self.book["languages"][lang]["html"]


@pytest.fixture(scope="module")
def book() -> Book:
    languages = build_site.read_languages()
    data = build_site.read_book()
    notebooks = build_site.in_book_order(build_site.discover(REPO / "build", languages), data)
    return Book(languages, notebooks, data)


def site_pages(book: Book) -> list[str]:
    pages = ["index.html"]
    for lang in book.languages:
        pages += [f"{lang}/index.html", f"{lang}/search.html"]
        pages += [f"{lang}/{notebook.page}.html" for notebook in book.notebooks]
    return pages


@pytest.fixture(scope="module")
def served(site, serve):
    return serve(site)


@pytest.fixture(scope="module")
def crawl(served, context, book, shots) -> dict:
    """Every page visited once: {site path: its state (JS_PAGE_STATE) and log}."""
    screenshot = {f"{lang}/index.html" for lang in book.languages}
    screenshot |= {f"{lang}/{book.notebooks[0].page}.html" for lang in book.languages}
    visits = {}
    started = time.monotonic()
    for path in site_pages(book):
        page, log = open_page(context)
        page.goto(f"{served.base}/{path}", wait_until="load")
        settled = settle_math(page)
        state = {**page.evaluate(JS_PAGE_STATE), "math_settled": settled}
        if path in screenshot:
            page.screenshot(path=str(shots / (path.replace("/", "_") + ".png")))
        page.close()
        visits[path] = {**state, "log": log}
    print(f"\ncrawled {len(visits)} pages in {time.monotonic() - started:.1f} s")
    return visits


def problems(crawl: dict, check) -> list[str]:
    return [f"{path}: {issue}" for path, visit in crawl.items() for issue in check(path, visit)]


def test_every_page_loads_with_no_failed_request(crawl):
    found = problems(crawl, lambda path, v: [f"failed {u}" for u in v["log"].failed]
                     + [f"refused (another host) {u}" for u in v["log"].blocked]
                     + [f"script error {e}" for e in v["log"].errors])
    assert not found, "\n".join(found)


def test_math_is_typeset(crawl):
    found = problems(crawl, lambda path, v: (
        ["MathJax did not finish within a minute"] * (not v["math_settled"])
        + [f"{v['untypeset']} of {v['math']} formulas not typeset"] * bool(v["untypeset"])
        + [f"{v['math_errors']} MathJax errors"] * bool(v["math_errors"])
        + [f"raw TeX in the text: {text!r}" for text in v["raw"]]))
    assert not found, "\n".join(found)
    assert sum(visit["math"] for visit in crawl.values()) > 100, "the notebooks' formulas were not found at all"


def figure_outputs(notebook: dict) -> int:
    """Figures among the outputs: matplotlib's PNGs and the browser edition's SVGs (it has no matplotlib)."""
    return sum(bool({"image/png", "image/svg+xml"} & set(output.get("data", {})))
               for cell in notebook["cells"] for output in cell.get("outputs", []))


def test_every_image_loads(crawl, book):
    found = problems(crawl, lambda path, v: [f"image did not load: {i['src']}" for i in v["images"] if not i["ok"]])
    assert not found, "\n".join(found)
    for notebook in book.notebooks:
        for lang in book.languages:
            shown = [i for i in crawl[f"{lang}/{notebook.page}.html"]["images"] if "/_images/" in i["src"]]
            assert len(shown) == figure_outputs(notebook.contents[lang]), f"{lang}/{notebook.page}: figures missing"


def twin(path: str, other: str) -> str:
    """`en/x/y.html` in the language `other`: `zh/x/y.html`."""
    return f"{other}/{path.split('/', 1)[1]}"


def test_language_switch_leads_to_the_twin_page(crawl, served, book):
    for path, visit in crawl.items():
        if path == "index.html":
            continue
        lang = path.split("/", 1)[0]
        others = [other for other in book.languages if other != lang]
        assert visit["language"] == [f"{served.base}/{twin(path, other)}" for other in others], path
        assert visit["lang"] == book.html_lang(lang), path
        for other in others:
            assert crawl[twin(path, other)]["lang"] == book.html_lang(other)
    for notebook in book.notebooks:
        for lang in book.languages:
            assert crawl[f"{lang}/{notebook.page}.html"]["h1"] == build_site.title_of(notebook.contents[lang], "?")


def test_language_button_navigates(served, context, book):
    page, log = open_page(context)
    first = book.notebooks[0].page
    page.goto(f"{served.base}/{book.languages[0]}/{first}.html")
    for lang in book.languages[1:] + book.languages[:1]:
        assert settle_math(page)  # leave no request cut short
        page.click(f"a.site-button-language[hreflang='{lang}']")
        page.wait_for_url(f"{served.base}/{lang}/{first}.html")
        assert page.evaluate("document.documentElement.lang") == book.html_lang(lang)
    assert settle_math(page)
    page.close()
    assert not log.failed and not log.blocked and not log.errors, log


def test_colab_button_is_the_headers_own_link(crawl, book):
    """The Colab button is the header's link for this file, and absent when the header has none (no
    repository configured: the builder writes no badge and links prose to the built files)."""
    for notebook in book.notebooks:
        for lang in book.languages:
            expected = build_site.colab_url(notebook.contents[lang], f"{notebook.name}.{lang}.ipynb")
            assert crawl[f"{lang}/{notebook.page}.html"]["colab"] == ([expected] if expected else [])
    if not any(build_site.colab_url(notebook.contents[lang], f"{notebook.name}.{lang}.ipynb")
               for notebook in book.notebooks for lang in book.languages):
        for path, visit in crawl.items():
            assert not [link for link in visit["links"] if urlsplit(link).hostname == "colab.research.google.com"], path


def test_download_links_serve_the_built_files(crawl, served, book):
    for notebook in book.notebooks:
        run_files = sorted(path for path in (REPO / "outputs" / notebook.series / notebook.name).glob("*"))
        for lang in book.languages:
            expected = [f"{served.base}/notebooks/{notebook.series}/{notebook.name}.{lang}.ipynb"]
            expected += [f"{served.base}/outputs/{notebook.series}/{notebook.name}/{path.name}" for path in run_files]
            downloads = crawl[f"{lang}/{notebook.page}.html"]["downloads"]
            assert downloads == expected
            originals = [notebook.paths[lang]] + run_files
            for url, original in zip(downloads, originals):
                with urllib.request.urlopen(url) as response:
                    assert response.read() == original.read_bytes(), url


def test_browser_edition_button(crawl, served, book):
    for notebook in book.notebooks:
        for lang in book.languages:
            expected = []
            if notebook.page in build_site.browser_site.NOTEBOOKS:
                expected = [f"{served.base}/lite/notebooks/index.html?path={notebook.name}.{lang}.ipynb"]
            assert crawl[f"{lang}/{notebook.page}.html"]["browser"] == expected


def test_links_within_the_site_lead_to_its_files(crawl, served, site, book):
    missing = set()
    for path, visit in crawl.items():
        for link in visit["links"]:
            if link.startswith(served.base + "/"):
                target = urlsplit(link).path.lstrip("/") or "index.html"
                if not (site / target).is_file():
                    missing.add(f"{path} -> {target}")
    assert not missing, sorted(missing)
    landing = {urlsplit(link).path.lstrip("/") for link in crawl["index.html"]["links"]}
    assert {f"{lang}/{notebook.page}.html" for lang in book.languages for notebook in book.notebooks} <= landing


SEARCHES = [  # (language, term, the page that must come first)
    ("en", "paged", "infra-benchmark/kv-cache-serving"),
    ("en", "GQA", "infra-benchmark/kv-cache-architectures"),
    ("zh", "写时复制", "infra-benchmark/kv-cache-serving"),
    ("zh", "滑动窗口", "infra-benchmark/kv-cache-architectures"),
]


SEARCH_DONE = {"en": "Search finished", "zh": "搜索完成"}  # the summary, in the book's language


def search(page, base: str, lang: str, term: str) -> list[str]:
    """The pages Sphinx's search lists for `term` in the `lang` book, best first (site paths)."""
    page.goto(f"{base}/{lang}/search.html?q={quote(term)}")
    summary = page.wait_for_function(
        "() => (document.querySelector('#search-results .search-summary') || {}).textContent", timeout=30_000)
    links = page.eval_on_selector_all("#search-results ul.search li > a", "els => els.map((a) => a.href)")
    if links:
        assert summary.json_value().startswith(SEARCH_DONE[lang]), summary.json_value()
    return [urlsplit(link).path.lstrip("/").removesuffix(".html") for link in links]


@pytest.mark.parametrize("lang, term, expected", SEARCHES)
def test_search_finds_the_right_page(served, context, lang, term, expected, shots):
    page, log = open_page(context)
    found = search(page, served.base, lang, term)
    page.screenshot(path=str(shots / f"search-{lang}-{expected.rsplit('/', 1)[1]}.png"))
    page.close()
    assert found and found[0] == f"{lang}/{expected}", found
    assert not log.failed and not log.blocked and not log.errors, log


def test_search_stays_in_its_language(served, context):
    """Negative control: a Chinese term in the English book, and a made-up word, find nothing."""
    page, _ = open_page(context)
    assert search(page, served.base, "en", "写时复制") == []
    assert search(page, served.base, "zh", "qzxvk") == []
    page.close()


OFFLINE_TITLE = {"en": "Python cannot start here right now.", "zh": "目前无法在这里启动 Python。"}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_browser_edition_says_it_is_offline(served, context, site, book, lang, shots):
    """Pyodide's CDN is unreachable (every other host is refused): within seconds the page says so,
    in the notebook's language, over the notebook it has opened."""
    notebook = next(n for n in book.notebooks if n.page in build_site.browser_site.NOTEBOOKS)
    config = json.loads((site / "lite" / "jupyter-lite.json").read_text())["jupyter-config-data"]
    pyodide = config["litePluginSettings"]["@jupyterlite/pyodide-kernel-extension:kernel"]["pyodideUrl"]
    page, log = open_page(context)
    started = time.monotonic()
    page.goto(f"{served.base}/lite/notebooks/index.html?path={notebook.name}.{lang}.ipynb")
    notice = page.wait_for_selector("#pyodide-offline", timeout=60_000)
    seconds = time.monotonic() - started
    title = build_site.title_of(notebook.contents[lang], "?")
    page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)  # the notebook is open
    page.screenshot(path=str(shots / f"browser-edition-offline-{lang}.png"))
    text, notice_lang = notice.inner_text(), notice.get_attribute("lang")
    page.close()
    print(f"\nbrowser edition ({lang}): offline notice after {seconds:.1f} s")
    assert text.startswith(OFFLINE_TITLE[lang]) and urlsplit(pyodide).hostname in text
    assert notice_lang == book.html_lang(lang)
    assert {urlsplit(url.split(" ")[0]).hostname for url in log.blocked} <= {urlsplit(pyodide).hostname}, log.blocked
    assert not log.failed, log.failed


def test_browser_edition_says_so_when_the_cdn_hangs(served, chromium, book):
    """A network that swallows the request (no answer, no error): the notice comes after the check's
    time limit (8 s) instead of never."""
    notebook = next(n for n in book.notebooks if n.page in build_site.browser_site.NOTEBOOKS)
    context = chromium.new_context()
    hanging = []
    context.route("**/*", lambda route: route.continue_() if urlsplit(route.request.url).hostname == "127.0.0.1"
                  else hanging.append(route))  # never answered
    page = context.new_page()
    started = time.monotonic()
    page.goto(f"{served.base}/lite/notebooks/index.html?path={notebook.name}.zh.ipynb")
    notice = page.wait_for_selector("#pyodide-offline", timeout=60_000)
    seconds = time.monotonic() - started
    assert notice.inner_text().startswith(OFFLINE_TITLE["zh"])
    print(f"\nbrowser edition, CDN hanging: notice after {seconds:.1f} s")
    assert hanging, "no request was held"
    context.close()


def test_browser_edition_is_quiet_when_pyodide_answers(served, chromium, book):
    """Negative control: with the CDN answering (a stand-in response), no notice appears."""
    notebook = next(n for n in book.notebooks if n.page in build_site.browser_site.NOTEBOOKS)
    context = chromium.new_context()
    context.route("**/*", lambda route: route.continue_() if urlsplit(route.request.url).hostname == "127.0.0.1"
                  else route.fulfill(status=200, content_type="text/javascript", body="export {};"))
    page = context.new_page()
    page.goto(f"{served.base}/lite/notebooks/index.html?path={notebook.name}.en.ipynb")
    page.wait_for_function("() => document.documentElement.dataset.pyodideCheck", timeout=60_000)
    assert page.evaluate("document.documentElement.dataset.pyodideCheck") == "reachable"
    assert page.query_selector("#pyodide-offline") is None
    context.close()


def demo_notebook(lang: str, repository: str) -> dict:
    """A small built notebook whose header names `repository` (as the builder writes a real one)."""
    colab = f"https://colab.research.google.com/github/{repository}/blob/main/build/demo"
    other = "zh" if lang == "en" else "en"
    header = (f"# Demo ({lang})\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
              f"({colab}/a.{lang}.ipynb) &nbsp; [{other}](a.{other}.ipynb) ([Colab]({colab}/a.{other}.ipynb))")
    return {"cells": [{"cell_type": "markdown", "id": "header", "metadata": {}, "source": header},
                      {"cell_type": "markdown", "id": "prose", "metadata": {}, "source": "Some prose, $x^2$."}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_colab_button_with_a_real_repository(tmp_path, serve, context, book):
    """With a real repository in its header (a small site of one notebook), a page has a Colab button
    whose target is the header's link for that very file."""
    built = tmp_path / "build" / "demo"
    built.mkdir(parents=True)
    for lang in book.languages:
        (built / f"a.{lang}.ipynb").write_text(json.dumps(demo_notebook(lang, "octo-org/kv-notes")))
    out = tmp_path / "_site"
    result = run_site_build(out, "--built", str(tmp_path / "build"), "--outputs", str(tmp_path / "none"))
    assert result.returncode == 0, result.stderr
    server = serve(out)
    page, log = open_page(context)
    for lang in book.languages:
        page.goto(f"{server.base}/{lang}/demo/a.html")
        assert settle_math(page)
        colab = page.eval_on_selector_all("a.site-button-colab", "els => els.map((a) => a.href)")
        assert colab == [f"https://colab.research.google.com/github/octo-org/kv-notes/blob/main/build/demo/a.{lang}.ipynb"]
    page.close()
    assert not log.failed and not log.blocked and not log.errors, log
