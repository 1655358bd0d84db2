"""The website's per-language settings and per-page buttons, from the `_book.json` of the build.

scripts/build-site.py writes `_book.json` into each language's staged source folder:

    {"language": "en", "title": "...", "footer": "...", "search_dict": "_search_dict.txt" | null,
     "other_languages": [{"code": "zh", "name": "中文", "title": "..."}],
     "ui": {label: text},
     "pages": {pagename: {"colab": url | null, "browser": site path | null,
                          "downloads": [{"path": site path, "label": text}]}}}

Site paths are relative to the site's root (`_site/`); each language's pages live in `_site/<lang>/`,
and a page's twin in another language has the same pagename there.
"""

from __future__ import annotations

import json
from pathlib import Path

BOOK_FILE = "_book.json"


def site_root(pagename: str) -> str:
    """The relative URL from a page of a language folder back to the site's root ("../", "../../")."""
    return "../" * (pagename.count("/") + 1)


def page_buttons(book: dict, pagename: str) -> list[dict]:
    """The buttons shown above a page: language switch, Colab, download, run in the browser."""
    ui, root = book["ui"], site_root(pagename)
    buttons = [
        {"kind": "language", "url": f"{root}{other['code']}/{pagename}.html", "text": other["name"],
         "title": ui["other_language_title"], "icon": "fas fa-language", "hreflang": other["code"]}
        for other in book["other_languages"]
    ]
    page = book["pages"].get(pagename)
    if page is None:
        return buttons
    if page.get("colab"):
        buttons.append({"kind": "colab", "url": page["colab"], "text": ui["colab"], "title": ui["colab_title"],
                        "icon": "fas fa-rocket"})
    if page.get("browser"):
        buttons.append({"kind": "browser", "url": root + page["browser"], "text": ui["browser"],
                        "title": ui["browser_title"], "icon": "fas fa-play"})
    if page.get("downloads"):
        buttons.append({"kind": "download", "text": ui["download"], "title": ui["download_title"],
                        "icon": "fas fa-download",
                        "items": [{"url": root + item["path"], "text": item["label"],
                                   "filename": item["path"].rsplit("/", 1)[-1]} for item in page["downloads"]]})
    return buttons


def read_book(app, config) -> None:
    book = json.loads((Path(app.srcdir) / BOOK_FILE).read_text(encoding="utf-8"))
    app.site_book = book
    config.html_title = book["title"]
    config.html_theme_options = {**config.html_theme_options, "extra_footer": book["footer"]}
    if book.get("search_dict"):
        config.html_search_options = {"dict": str(Path(app.srcdir) / book["search_dict"])}


def add_buttons(app, pagename, templatename, context, doctree) -> None:
    context["site_buttons"] = page_buttons(app.site_book, pagename)


def setup(app):
    app.connect("config-inited", read_book)
    app.connect("html-page-context", add_buttons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
