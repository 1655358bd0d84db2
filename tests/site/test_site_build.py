"""The website's build (scripts/build-site.py), without a browser: what it writes, and the small
pure functions that turn a built notebook into the site's copy.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO, build_site, run_site_build


def built(name: str, lang: str) -> dict:
    return json.loads((REPO / "build" / "infra-benchmark" / f"{name}.{lang}.ipynb").read_text(encoding="utf-8"))


def notebook(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def markdown(source: str, id: str = "md") -> dict:
    return {"cell_type": "markdown", "id": id, "metadata": {}, "source": source}


def code(source: str, tags=(), outputs=(), id: str = "code") -> dict:
    return {"cell_type": "code", "id": id, "metadata": {"tags": list(tags)}, "source": source,
            "outputs": list(outputs), "execution_count": 1}


HEADER = markdown(
    "# A title\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    "(https://colab.research.google.com/github/{repo}/blob/main/build/s/a.en.ipynb) &nbsp; Also in "
    "[中文](a.zh.ipynb) ([Colab](https://colab.research.google.com/github/{repo}/blob/main/build/s/a.zh.ipynb))",
    id="header")


def header(repo: str) -> dict:
    return {**HEADER, "source": HEADER["source"].format(repo=repo)}


# -- the site's copy of a notebook ------------------------------------------------------------------


def test_header_keeps_its_title_only_and_the_prelude_is_hidden():
    source = notebook(header("octo/notes"), code("LANG = 'en'", tags=["prelude"], id="prelude"),
                      code("print(1)", tags=["prelude"], outputs=[{"output_type": "stream", "text": "1"}]),
                      markdown("Prose."))
    copy = build_site.for_site(source, series="s", lang="en", pages={"s/a"})
    assert [cell["source"] for cell in copy["cells"]][::3] == ["# A title", "Prose."]
    assert copy["cells"][1]["metadata"]["tags"] == ["prelude", "remove-cell"]   # no output: the whole cell
    assert copy["cells"][2]["metadata"]["tags"] == ["prelude", "remove-input"]  # its output stays
    assert source["cells"][0]["source"].startswith("# A title\n\n[![")           # the input is not changed


def test_a_note_goes_under_the_title():
    copy = build_site.for_site(notebook(header("o/n"), markdown("Prose.")), series="s", lang="en", pages=set(),
                               note="Needs **internet**.")
    assert [cell["source"] for cell in copy["cells"]] == ["# A title\n\n```{note}\nNeeds **internet**.\n```", "Prose."]


def test_sphinx_messages_name_the_built_file_and_cell(tmp_path):
    message = f"{tmp_path}/src-zh/s/a.ipynb:20004: WARNING: Non-consecutive header level increase"
    assert build_site.built_paths(message, tmp_path / "src-zh", Path("/repo/build"), "zh") == \
        "/repo/build/s/a.zh.ipynb, cell 2: WARNING: Non-consecutive header level increase"


@pytest.mark.parametrize("text, expected", [
    ("see [it](b.en.ipynb)", "see [it](b.ipynb)"),                                  # a built file beside it
    ("see [it](b.en.ipynb#part-2)", "see [it](b.ipynb#part-2)"),
    ("see [it](b.zh.ipynb)", "see [it](../../zh/s/b.html)"),                      # the other language's page
    ("see [it](c.en.ipynb)", "see [it](c.en.ipynb)"),                               # not a notebook of the site
    ("([Colab](https://colab.research.google.com/github/octo/notes/blob/main/build/t/d.en.ipynb))",
     "([Colab](https://colab.research.google.com/github/octo/notes/blob/main/build/t/d.en.ipynb))"),  # kept
])
def test_links_to_built_notebooks_lead_to_the_site(text, expected):
    rewrite = build_site.link_rewriter("s", "en", {"s/b", "t/d"})
    assert rewrite(text) == expected


def test_colab_url_is_the_headers():
    assert build_site.colab_url(notebook(header("octo/notes")), "a.en.ipynb") == \
        "https://colab.research.google.com/github/octo/notes/blob/main/build/s/a.en.ipynb"
    assert build_site.colab_url(notebook(header("octo/notes")), "a.zh.ipynb") == \
        "https://colab.research.google.com/github/octo/notes/blob/main/build/s/a.zh.ipynb"
    assert build_site.colab_url(notebook(markdown("# A title", id="header")), "a.en.ipynb") is None
    assert build_site.colab_url(notebook(), "a.en.ipynb") is None


def test_titles_come_from_the_built_headers():
    assert build_site.title_of(built("kv-cache", "zh"), "?").startswith("从零实现 KV 缓存")
    assert build_site.title_of(notebook(markdown("no heading")), "fallback") == "fallback"


def test_glossary_terms_feed_the_chinese_search():
    terms = build_site.glossary_terms(REPO / "docs" / "glossary.md")
    assert {"写时复制", "分页缓存", "预填充", "因果掩码"} <= set(terms)
    assert all(re.search(r"[\u3400-\u9fff]", term) and len(term) >= 2 for term in terms)
    assert build_site.glossary_terms(REPO / "no-such-file.md") == []


def test_book_order_puts_the_listed_notebooks_first():
    make = lambda name: build_site.Notebook("s", name, {})  # noqa: E731
    ordered = build_site.in_book_order([make("b"), make("z"), make("a"), make("c")], {"series": {"s": {"order": ["c", "a"]}}})
    assert [n.name for n in ordered] == ["c", "a", "b", "z"]


# -- the inputs: one clear line, nothing written ----------------------------------------------------


def test_a_missing_twin_stops_the_build_before_anything_is_written(tmp_path):
    series = tmp_path / "build" / "s"
    series.mkdir(parents=True)
    (series / "a.en.ipynb").write_text(json.dumps(notebook(markdown("# A"))))
    out = tmp_path / "_site"
    out.mkdir()
    (out / "keep.html").write_text("previous site")
    result = run_site_build(out, "--built", str(tmp_path / "build"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {series / 'a.zh.ipynb'} is missing (its twins are built)"
    assert [p.name for p in out.iterdir()] == ["keep.html"]


@pytest.mark.parametrize("name, message", [
    ("a.ipynb", "not named <notebook>.<language>.ipynb"),
    ("a.fr.ipynb", "not named <notebook>.<language>.ipynb"),
])
def test_a_stray_file_is_named(tmp_path, name, message):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / name).write_text("{}")
    with pytest.raises(build_site.SiteError, match=message):
        build_site.discover(tmp_path, ["en", "zh"])


# -- the built site ----------------------------------------------------------------------------------


class Assets(HTMLParser):
    """What a page loads: scripts, style sheets, images, frames (not the links a reader follows)."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "video", "audio") and attrs.get("src"):
            self.urls.append(attrs["src"])
        if tag == "link" and attrs.get("href") and attrs.get("rel") not in ("canonical", "alternate"):
            self.urls.append(attrs["href"])


def pages(site: Path) -> list[Path]:
    return [site / "index.html"] + sorted(site.glob("en/**/*.html")) + sorted(site.glob("zh/**/*.html"))


def test_site_layout(site):
    languages = build_site.read_languages()
    notebooks = build_site.discover(REPO / "build", languages)
    for nb in notebooks:
        for lang, path in nb.paths.items():
            assert (site / lang / nb.series / f"{nb.name}.html").is_file()
            assert (site / "notebooks" / nb.series / path.name).read_bytes() == path.read_bytes()
        for path in (REPO / "outputs" / nb.series / nb.name).glob("*"):
            assert (site / "outputs" / nb.series / nb.name / path.name).read_bytes() == path.read_bytes()
    for lang in languages:
        assert (site / lang / "index.html").is_file() and (site / lang / "searchindex.js").is_file()
    assert (site / "_mathjax" / "MathJax.js").is_file() and (site / ".nojekyll").is_file()
    assert (site / "lite" / "notebooks" / "index.html").is_file()
    assert not list(site.glob("*/_sources/*"))


def test_pages_load_nothing_from_other_hosts(site):
    """Every script, style sheet and image of every page is the site's own (no CDN, no web font)."""
    outside = {}
    for page in pages(site):
        parser = Assets()
        parser.feed(page.read_text(encoding="utf-8"))
        remote = [url for url in parser.urls if re.match(r"(https?:)?//", url)]
        if remote:
            outside[str(page.relative_to(site))] = remote
    assert not outside, outside
    css = [path for path in site.glob("*/_static/**/*.css") if re.search(r"url\(\s*['\"]?(https?:)?//", path.read_text())]
    assert not css, css


def test_prelude_and_header_badge_stay_out_of_the_pages(site):
    for page in site.glob("*/infra-benchmark/*.html"):
        html = page.read_text(encoding="utf-8")
        assert "def say_table" not in html and "LANG = " not in html, page
        assert "colab-badge.svg" not in html and "Generated from" not in html, page


def test_chinese_pages_are_indexed_by_word(site):
    index = (site / "zh" / "searchindex.js").read_text(encoding="utf-8")
    data = json.loads(index[index.index("(") + 1: index.rindex(")")])
    terms = set(data["terms"]) | set(data["titleterms"])  # a word of a page's title is filed there only
    assert {"写时复制", "分页缓存", "缓存", "掩码"} <= terms
