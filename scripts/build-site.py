#!/usr/bin/env python3
"""Build the website of the suite into _site/ from the committed, executed notebooks.

    bash scripts/dev.sh site           # the same as: python3 scripts/build-site.py
    python3 -m http.server --directory _site --bind 127.0.0.1 8000   # then open http://127.0.0.1:8000/

It never runs a notebook: it reads build/<series>/<notebook>.<lang>.ipynb (every notebook in every
language of notebooks_src/config.toml) and outputs/<series>/<notebook>/, and writes

    _site/index.html                    the landing page, in every language
    _site/<lang>/                       the book in one language (Sphinx, MyST-NB, sphinx-book-theme)
    _site/notebooks/<series>/...        the built notebooks, byte for byte (the download buttons)
    _site/outputs/<series>/<notebook>/  the files each notebook's run wrote
    _site/lite/                         the browser edition (JupyterLite; scripts/build-browser-site.py)
    _site/_mathjax/                     MathJax, served by the site itself

All or nothing: the site is built beside _site/ and swapped in when complete. The tools are pinned in
requirements-site.txt and installed into .venv-site/ (created on first use, recreated when that file
changes); this script itself needs only Python >= 3.11. The site's own text (book title, series
introductions, button labels) is in website/book.toml; the Sphinx configuration in website/conf.py.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WEBSITE = REPO / "website"
BOOK = WEBSITE / "book.toml"
GLOSSARY = REPO / "docs" / "glossary.md"
CONFIG = REPO / "notebooks_src" / "config.toml"
sys.path.insert(0, str(REPO / "src"))  # the builder's layout module: standard library only, no install needed
from learning_notebooks.layout import BUILD_DIR, OUTPUTS_DIR, built_name, is_staging  # noqa: E402


def _load_browser_site():
    spec = importlib.util.spec_from_file_location("build_browser_site", REPO / "scripts" / "build-browser-site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


browser_site = _load_browser_site()

COLAB_LINK = re.compile(
    r"https://colab\.research\.google\.com/github/(?P<repository>[^/\s)]+/[^/\s)]+)/blob/(?P<branch>[^/\s)]+)/"
    + re.escape(BUILD_DIR) + r"/(?P<series>[^/\s)]+)/(?P<file>[^/\s)#]+\.ipynb)"
)
# A Markdown link whose target is a built notebook beside this one: [text](kv-cache.en.ipynb#anchor).
LOCAL_NOTEBOOK_LINK = re.compile(r"\]\((?P<file>[\w.-]+\.ipynb)(?P<anchor>#[^)\s]*)?\)")
HEADER_ID = "header"
PRELUDE_TAG = "prelude"
MATHJAX_DIR = "_mathjax"
LITE_DIR = "lite"
NOTEBOOKS_DIR = "notebooks"


class SiteError(Exception):
    """A problem with the inputs of the site; one line for the reader."""


@dataclass
class Notebook:
    series: str
    name: str
    paths: dict[str, Path]                       # language -> build/<series>/<name>.<lang>.ipynb
    contents: dict[str, dict] = field(default_factory=dict, repr=False)  # language -> the notebook's JSON

    @property
    def page(self) -> str:
        return f"{self.series}/{self.name}"


# -- reading ---------------------------------------------------------------------------------------


def read_languages(config: Path = CONFIG) -> list[str]:
    return list(tomllib.loads(config.read_text(encoding="utf-8"))["languages"])


def read_book(path: Path = BOOK) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def discover(built: Path, languages: list[str]) -> list[Notebook]:
    """Every built notebook under `built/<series>/`, each in every language (else a SiteError)."""
    found: dict[tuple[str, str], dict[str, Path]] = {}
    for path in sorted(built.glob("*/*.ipynb")):
        if is_staging(path) or path.name.startswith("."):
            continue
        stem, _, lang = path.name[: -len(".ipynb")].rpartition(".")
        if lang not in languages or not stem:
            raise SiteError(f"{path}: not named <notebook>.<language>.ipynb with a language of {languages}")
        found.setdefault((path.parent.name, stem), {})[lang] = path
    notebooks = []
    for (series, name), paths in sorted(found.items()):
        missing = [lang for lang in languages if lang not in paths]
        if missing:
            raise SiteError(f"{built / series / built_name(name, missing[0])} is missing (its twins are built)")
        notebooks.append(Notebook(series, name, paths))
    if not notebooks:
        raise SiteError(f"no built notebooks under {built}/<series>/; build them first: bash scripts/dev.sh build")
    for notebook in notebooks:
        for lang, path in notebook.paths.items():
            try:
                notebook.contents[lang] = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise SiteError(f"{path}: not a notebook ({error})") from None
    return notebooks


def in_book_order(notebooks: list[Notebook], book: dict) -> list[Notebook]:
    """Series in alphabetical order; in each, the notebooks of its `order` first, then the others."""
    def key(notebook: Notebook):
        order = book.get("series", {}).get(notebook.series, {}).get("order", [])
        return (notebook.series, order.index(notebook.name) if notebook.name in order else len(order), notebook.name)
    return sorted(notebooks, key=key)


def source_text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def header_cell(notebook: dict) -> dict | None:
    cells = notebook.get("cells", [])
    return next((cell for cell in cells if cell.get("id") == HEADER_ID), None)


def title_of(notebook: dict, fallback: str) -> str:
    """The notebook's title: the first `# ` heading of its header cell (or of its first Markdown cell)."""
    cells = [header_cell(notebook)] + [c for c in notebook.get("cells", []) if c.get("cell_type") == "markdown"]
    for cell in filter(None, cells):
        for line in source_text(cell).splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return fallback


def colab_url(notebook: dict, file_name: str) -> str | None:
    """The Colab link of the notebook's header for this very file, if it has one (the builder writes none
    while no real repository is configured: README, "Colab links")."""
    header = header_cell(notebook)
    if header is None:
        return None
    for match in COLAB_LINK.finditer(source_text(header)):
        if match["file"] == file_name:
            return match.group(0)
    return None


# -- the site's copy of a notebook ------------------------------------------------------------------


def link_rewriter(page_series: str, page_lang: str, pages: set[str]):
    """Rewrite links to built notebooks of the suite into links to their pages on the site.

    Relative links to a built file (`kv-cache.en.ipynb`, valid beside the file in build/; the builder
    writes `{{colab:...}}` prose links so while no repository is configured) become the site's page of
    that notebook (a document link Sphinx checks, or the other language's page). Other links, Colab
    links to a real repository among them, are kept.
    """
    def target(series: str, file: str, anchor: str) -> str | None:
        stem, _, lang = file[: -len(".ipynb")].rpartition(".")
        if f"{series}/{stem}" not in pages or not lang:
            return None
        if lang == page_lang:
            prefix = "" if series == page_series else f"../{series}/"
            return f"{prefix}{stem}.ipynb{anchor}"
        return f"../../{lang}/{series}/{stem}.html{anchor}"

    def local(match: re.Match) -> str:
        new = target(page_series, match["file"], match["anchor"] or "")
        return f"]({new})" if new else match.group(0)

    def rewrite(text: str) -> str:
        return LOCAL_NOTEBOOK_LINK.sub(local, text)
    return rewrite


def for_site(notebook: dict, *, series: str, lang: str, pages: set[str], note: str | None = None) -> dict:
    """The site's copy of a built notebook (the downloads stay the built files, untouched).

    - the header cell keeps its title only: the site's buttons replace its links and badge;
    - the prelude cell (tag `prelude`: LANG and the say()/say_table() helpers) is hidden: its input,
      or the whole cell when it has no output;
    - links to other built notebooks lead to their pages on the site;
    - `note` (Markdown), if given, becomes a note under the title.
    """
    notebook = json.loads(json.dumps(notebook))
    rewrite = link_rewriter(series, lang, pages)
    cells = []
    for cell in notebook.get("cells", []):
        if cell.get("id") == HEADER_ID:
            title = next((line for line in source_text(cell).splitlines() if line.startswith("# ")), "")
            if note:  # in the header cell, so that cells keep their numbers (Sphinx's messages use them)
                title += "\n\n```{note}\n" + note.strip() + "\n```"
            cells.append({**cell, "source": title.strip()})
            continue
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if PRELUDE_TAG in tags:
            hide = "remove-input" if cell.get("outputs") else "remove-cell"
            if hide not in tags:
                tags.append(hide)
        if cell.get("cell_type") == "markdown":
            cell["source"] = rewrite(source_text(cell))
        cells.append(cell)
    notebook["cells"] = cells
    return notebook


# -- the search dictionary ---------------------------------------------------------------------------

CJK = re.compile(r"[\u3400-\u9fff]")


def glossary_terms(glossary: Path) -> list[str]:
    """The Chinese terms of docs/glossary.md (second column), for the search's word splitter (jieba).

    Without them a term jieba does not know (键值缓存, 写时复制, ...) may be indexed only in pieces.
    """
    terms: list[str] = []
    if not glossary.is_file():
        return terms
    for line in glossary.read_text(encoding="utf-8").splitlines():
        columns = [column.strip() for column in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(columns) < 2:
            continue
        for term in re.split(r"[/、，,；;（）()\s]+|\*\*", columns[1]):
            term = term.strip("`*")
            if len(term) >= 2 and CJK.search(term) and term not in terms:
                terms.append(term)
    return terms


# -- staging one language ----------------------------------------------------------------------------


def notebook_links(notebook: Notebook, lang: str, outputs: Path, ui: dict, browser: set[str]) -> dict:
    """Where a page's buttons lead, as paths from the site's root (or a Colab URL)."""
    file_name = built_name(notebook.name, lang)
    downloads = [{"path": f"{NOTEBOOKS_DIR}/{notebook.series}/{file_name}", "label": ui["download_notebook"]}]
    run_files = outputs / notebook.series / notebook.name
    if run_files.is_dir():
        downloads += [{"path": f"{OUTPUTS_DIR}/{notebook.series}/{notebook.name}/{path.name}", "label": path.name}
                      for path in sorted(run_files.iterdir()) if path.is_file()]
    return {
        "colab": colab_url(notebook.contents[lang], file_name),
        "browser": f"{LITE_DIR}/notebooks/index.html?path={file_name}" if notebook.page in browser else None,
        "downloads": downloads,
    }


def index_page(book: dict, lang: str, notebooks: list[Notebook]) -> str:
    """The book's front page in one language: its introduction, and each series with its notebooks
    (a numbered list here; a hidden table of contents gives the sidebar's navigation)."""
    lines = [f"# {book['title'][lang]}", "", book["intro"][lang].strip(), ""]
    for series in dict.fromkeys(notebook.series for notebook in notebooks):
        info = book.get("series", {}).get(series, {})
        title = info.get("title", {}).get(lang, series)
        members = [notebook for notebook in notebooks if notebook.series == series]
        lines += [f"## {title}", ""]
        if info.get("intro", {}).get(lang):
            lines += [info["intro"][lang].strip(), ""]
        lines += [f"1. [{title_of(n.contents[lang], n.name)}]({n.page}.ipynb)" for n in members] + [""]
        lines += ["```{toctree}", f":caption: {title}", ":hidden:", ""]
        lines += [notebook.page for notebook in members] + ["```", ""]
    return "\n".join(lines)


def stage_language(src: Path, lang: str, *, book: dict, languages: list[str], notebooks: list[Notebook],
                   outputs: Path, browser: set[str], glossary: Path) -> None:
    """Write the Sphinx source folder of one language: index.md, the notebooks, _book.json."""
    ui = book["ui"][lang]
    pages = {notebook.page for notebook in notebooks}
    src.mkdir(parents=True)
    (src / "index.md").write_text(index_page(book, lang, notebooks), encoding="utf-8")
    page_links = {}
    for notebook in notebooks:
        note = ui["browser_note"] if notebook.page in browser else None
        copy = for_site(notebook.contents[lang], series=notebook.series, lang=lang, pages=pages, note=note)
        target = src / notebook.series / f"{notebook.name}.ipynb"
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(copy, ensure_ascii=False, indent=1), encoding="utf-8")
        page_links[notebook.page] = notebook_links(notebook, lang, outputs, ui, browser)
    search_dict = None
    if book["languages"][lang]["sphinx"].startswith("zh"):
        terms = glossary_terms(glossary)
        if terms:
            search_dict = "_search_dict.txt"
            (src / search_dict).write_text("".join(f"{term}\n" for term in terms), encoding="utf-8")
    data = {
        "language": lang,
        "title": book["title"][lang],
        "footer": html.escape(ui["license"]),
        "search_dict": search_dict,
        "other_languages": [{"code": other, "name": book["languages"][other]["name"]}
                            for other in languages if other != lang],
        "ui": ui,
        "pages": page_links,
    }
    (src / "_book.json").write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")


# -- the landing page ---------------------------------------------------------------------------------


def landing_page(book: dict, languages: list[str], notebooks: list[Notebook], browser: set[str]) -> str:
    """_site/index.html: the series in every language, side by side, linking into each book."""
    e = html.escape
    columns = []
    for lang in languages:
        ui, html_lang = book["ui"][lang], book["languages"][lang]["html"]
        parts = [f'<section class="language" lang="{html_lang}">',
                 f'<h1><a href="{lang}/index.html">{e(book["title"][lang])}</a></h1>',
                 f"<p>{e(book['intro'][lang].strip())}</p>"]
        for series in dict.fromkeys(notebook.series for notebook in notebooks):
            info = book.get("series", {}).get(series, {})
            parts.append(f"<h2>{e(info.get('title', {}).get(lang, series))}</h2>")
            if info.get("intro", {}).get(lang):
                parts.append(f"<p>{e(info['intro'][lang].strip())}</p>")
            parts.append("<ol>")
            for notebook in (n for n in notebooks if n.series == series):
                title = title_of(notebook.contents[lang], notebook.name)
                item = f'<a href="{lang}/{notebook.page}.html">{e(title)}</a>'
                if notebook.page in browser:
                    file_name = built_name(notebook.name, lang)
                    item += (f' <a class="run" href="{LITE_DIR}/notebooks/index.html?path={file_name}">'
                             f"{e(ui['landing_browser'])}</a>")
                parts.append(f"<li>{item}</li>")
            parts.append("</ol>")
        parts.append(f'<p class="license">{e(ui["license"])}</p></section>')
        columns.append("\n".join(parts))
    title = " · ".join(book["title"][lang] for lang in languages)
    template = (WEBSITE / "landing.html").read_text(encoding="utf-8")
    return template.replace("{{title}}", e(title)).replace("{{columns}}", "\n".join(columns))


# -- building -----------------------------------------------------------------------------------------


def mathjax_folder(python: Path) -> Path:
    code = "import jupyter_server_mathjax, pathlib; print(pathlib.Path(jupyter_server_mathjax.__file__).parent / 'static')"
    return Path(subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip())


def sphinx_command(python: Path, src: Path, out: Path, sphinx_language: str) -> list[str]:
    return [str(python), "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-c", str(WEBSITE),
            "-D", f"language={sphinx_language}", "-d", str(out.parent / "doctrees"), str(src), str(out)]


def built_paths(text: str, src: Path, built: Path, lang: str) -> str:
    """Sphinx's messages name the staged copies (gone when the build fails) and MyST-NB's line numbers
    (cell * 10000 + line): name the built file and its cell (counted from 1, as the copy keeps them)."""
    return re.sub(re.escape(str(src)) + r"/([^/\s:]+)/([^/\s:]+)\.ipynb(?::(\d+))?",
                  lambda m: str(built / m[1] / built_name(m[2], lang))
                  + (f", cell {int(m[3]) // 10000}" if m[3] and int(m[3]) >= 10000 else ""), text)


def build(built: Path, outputs: Path, out: Path, env: Path) -> dict:
    """Build the whole site into `out` (replaced when complete). Returns a summary."""
    started = time.monotonic()
    book, languages = read_book(), read_languages()
    for lang in languages:
        for section in ("title", "intro", "ui"):
            if lang not in book[section]:
                raise SiteError(f"{BOOK}: [{section}] has no text for the language '{lang}'")
    notebooks = in_book_order(discover(built, languages), book)
    python = browser_site.ensure_site_venv(env)
    # The browser edition, when its notebooks are among those built (a partial build/ may lack them).
    browser = {notebook.page for notebook in notebooks} & set(browser_site.NOTEBOOKS)
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    jobs = []
    try:
        site = scratch / "site"
        site.mkdir()
        for lang in languages:
            src = scratch / f"src-{lang}"
            stage_language(src, lang, book=book, languages=languages, notebooks=notebooks, outputs=outputs,
                           browser=browser, glossary=GLOSSARY)
            html_out = scratch / f"build-{lang}" / "html"
            command = sphinx_command(python, src, html_out, book["languages"][lang]["sphinx"])
            log = open(scratch / f"sphinx-{lang}.log", "w+", encoding="utf-8")
            jobs.append((lang, html_out, log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)))
        if browser:
            browser_site.build_site(built, site / LITE_DIR, env)
        failed = []
        for lang, html_out, log, process in jobs:
            if process.wait() != 0:
                log.seek(0)
                messages = built_paths(log.read().strip(), scratch / f"src-{lang}", built, lang)
                failed.append(f"sphinx-build ({lang}) failed:\n{messages}")
        if failed:
            raise SiteError("\n".join(failed))
        for lang, html_out, _, _ in jobs:
            html_out.rename(site / lang)
            (site / lang / ".buildinfo").unlink(missing_ok=True)
            shutil.rmtree(site / lang / "_sources", ignore_errors=True)  # empty: html_copy_source is off
        shutil.copytree(mathjax_folder(python), site / MATHJAX_DIR)
        for notebook in notebooks:
            target = site / NOTEBOOKS_DIR / notebook.series
            target.mkdir(parents=True, exist_ok=True)
            for path in notebook.paths.values():
                shutil.copyfile(path, target / path.name)
            run_files = outputs / notebook.series / notebook.name
            if run_files.is_dir():
                shutil.copytree(run_files, site / OUTPUTS_DIR / notebook.series / notebook.name)
        (site / "index.html").write_text(landing_page(book, languages, notebooks, browser), encoding="utf-8")
        (site / ".nojekyll").write_text("")  # GitHub Pages: serve _static/, _mathjax/ as they are
        if out.exists():
            out.rename(scratch / "old")
        site.rename(out)
    finally:
        for _, _, log, process in jobs:  # on an error elsewhere (or Ctrl-C), no Sphinx is left running
            if process.poll() is None:
                process.terminate()
                process.wait()
            log.close()
        shutil.rmtree(scratch, ignore_errors=True)
    size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    return {"notebooks": len(notebooks), "languages": languages, "seconds": time.monotonic() - started,
            "megabytes": size / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--built", type=Path, default=REPO / BUILD_DIR, help="built notebooks (default: build/)")
    parser.add_argument("--outputs", type=Path, default=REPO / OUTPUTS_DIR,
                        help="the runs' files (default: outputs/)")
    parser.add_argument("--out", type=Path, default=REPO / "_site", help="site folder to (re)create (default: _site/)")
    parser.add_argument("--venv", type=Path, default=browser_site.SITE_VENV,
                        help="virtual environment for the site's tools (default: .venv-site/)")
    args = parser.parse_args(argv)
    try:
        summary = build(args.built, args.outputs, args.out, args.venv)
    except SiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"Built {args.out}: {summary['notebooks']} notebooks in {', '.join(summary['languages'])}, "
          f"{summary['megabytes']:.0f} MB, in {summary['seconds']:.0f} s.")
    print(f"Open it: python3 -m http.server --directory {args.out} --bind 127.0.0.1 8000, "
          "then http://127.0.0.1:8000/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
