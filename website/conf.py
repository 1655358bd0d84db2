"""Sphinx configuration of the website, shared by every language.

scripts/build-site.py stages one source folder per language (an index page and the site's copies
of the built notebooks) and runs sphinx-build on it with `-c website -D language=...`. What differs
between languages and pages (titles, button targets, the search dictionary) comes from the
`_book.json` it writes into that folder; `_ext/site_pages.py` reads it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "Learning notebooks"
extensions = ["myst_nb", "site_pages"]
exclude_patterns = ["_book.json", "_search_dict.txt"]

# The notebooks are shown as executed by the builder; the site never runs them.
nb_execution_mode = "off"
# Outputs of say()/say_table() are Markdown (tables, code, math), parsed like the prose.
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath"]
# Links to sections of other pages, e.g. "kv-cache.ipynb#5-the-decoder".
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_js_files = [("site-translations.js", {"priority": 900})]  # after Sphinx's translations.js
html_copy_source = False          # the site offers the executed notebooks themselves (notebooks/)
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,  # replaced by the site's own buttons (site-buttons.html)
    "use_fullscreen_button": True,
    "article_header_end": ["site-buttons.html", "article-header-buttons.html"],
    "footer_content_items": ["extra-footer.html"],  # the licenses (from book.toml); no author line
}

# MathJax is served by the site itself (_site/_mathjax/, copied from the pinned jupyter-server-mathjax
# package by build-site.py): no CDN. Relative to _static/ of each language's folder. The package holds
# MathJax 2.7, the last version on PyPI (MathJax 3 and 4 are on npm only).
mathjax_path = "../../_mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
myst_update_mathjax = False      # its settings are MathJax 3's; ours follow
mathjax2_config = {
    "tex2jax": {
        # Only the math Sphinx marks up (class "math"); the rest of the page is left alone.
        "processClass": "math|tex2jax_process|mathjax_process",
        "ignoreClass": "tex2jax_ignore|mathjax_ignore|document",
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": True,
        "processEnvironments": False,
        "processRefs": False,
    },
    # The package ships the STIX-Web fonts only (as Jupyter's classic notebook uses them).
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None},
    "showMathMenu": False,
    "messageStyle": "none",
}
