"""Parsing section files and manifests: every bad input names its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from learning_notebooks.errors import SourceError
from learning_notebooks.sources import check_pairing, load_config, load_notebook, marker_lines, read_section

LANGS = ("en", "zh")

GOOD = '''# %% [markdown] lang="en"
# Hello

# %% [markdown] lang="zh"
# 你好

# %% tags=["parameters"]
N = 1

# %%
print(N)
'''


def section(tmp_path: Path, text: str, name: str = "01_demo.py") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> SourceError:
    with pytest.raises(SourceError) as caught:
        read_section(section(tmp_path, text), LANGS)
    return caught.value


def test_marker_lines_are_one_based():
    assert marker_lines(GOOD) == [1, 4, 7, 10]


def test_good_section_cells(tmp_path):
    cells = read_section(section(tmp_path, GOOD), LANGS).cells
    assert [(c.kind, c.lang, c.line) for c in cells] == [
        ("markdown", "en", 1), ("markdown", "zh", 4), ("code", None, 7), ("code", None, 10),
    ]
    assert cells[2].tags == ("parameters",)
    assert cells[3].source == "print(N)"
    assert len({c.id for c in cells}) == 4


def test_ids_are_deterministic(tmp_path):
    first = [c.id for c in read_section(section(tmp_path, GOOD), LANGS).cells]
    second = [c.id for c in read_section(section(tmp_path, GOOD), LANGS).cells]
    assert first == second == ["01_demo-00", "01_demo-01", "01_demo-02", "01_demo-03"]


@pytest.mark.parametrize(
    "text, line, words",
    [
        # the Chinese twin is missing before a code cell
        ('# %% [markdown] lang="en"\n# a\n\n# %%\nx = 1\n', 1, "no 'zh' twin"),
        # an extra English cell: the second en where zh was expected
        ('# %% [markdown] lang="en"\n# a\n\n# %% [markdown] lang="en"\n# b\n\n# %% [markdown] lang="zh"\n# c\n', 1, "no 'zh' twin"),
        # out of order: zh before en
        ('# %% [markdown] lang="zh"\n# 乙\n\n# %% [markdown] lang="en"\n# b\n', 1, "without a preceding 'en'"),
        # the last cell of the file has no twin
        (GOOD + '\n# %% [markdown] lang="en"\n# trailing\n', 13, "no 'zh' twin"),
        # unknown language
        ('# %% [markdown] lang="fr"\n# bonjour\n', 1, "unknown language 'fr'"),
        # prose with no language at all
        ("# %% [markdown]\n# hello\n", 1, "without a language"),
        # malformed header: unquoted value
        ('# %% [markdown] lang=en\n# a\n', 1, "malformed cell header"),
        # a code cell may not carry a language
        ('# %% lang="en"\nx = 1\n', 1, "code cells are shared"),
        # unknown option
        ('# %% [markdown] lang="en" colour="red"\n# a\n', 1, "unknown cell option"),
        # code before the first marker
        ("x = 1\n\n# %%\ny = 2\n", 1, "before the first"),
    ],
)
def test_bad_sections_name_file_and_line(tmp_path, text, line, words):
    err = error_of(tmp_path, text)
    assert err.file.name == "01_demo.py"
    assert err.line == line
    assert words in err.message
    assert str(err).startswith(f"{err.file}:{line}: ")


def test_pairing_reports_the_cell_after_which_the_twin_is_missing(tmp_path):
    text = GOOD + '\n# %% [markdown] lang="en"\n# more\n\n# %%\nx = 2\n'
    err = error_of(tmp_path, text)
    assert err.line == 13


def test_pairing_with_three_languages(tmp_path):
    cells = read_section(section(tmp_path, GOOD), LANGS).cells
    with pytest.raises(SourceError, match="no 'fr' twin"):
        check_pairing(list(cells), ("en", "zh", "fr"))


def write_project(tmp_path: Path, manifest: str, files: dict[str, str]) -> Path:
    root = tmp_path / "notebooks_src"
    (root / "s" / "n").mkdir(parents=True)
    (root / "config.toml").write_text('languages = ["en", "zh"]\nrepository = "o/r"\nbranch = "main"\n')
    (root / "s" / "n" / "notebook.toml").write_text(manifest, encoding="utf-8")
    for name, text in files.items():
        (root / "s" / "n" / name).write_text(text, encoding="utf-8")
    return root


MANIFEST = 'sections = ["01_demo.py"]\n[title]\nen = "T"\nzh = "标题"\n[quick]\nN = 2\n'


def load(root: Path):
    return load_notebook(root, "s", "n", load_config(root))


def test_manifest_loads(tmp_path):
    source = load(write_project(tmp_path, MANIFEST, {"01_demo.py": GOOD}))
    assert source.titles == {"en": "T", "zh": "标题"}
    assert source.quick == {"N": 2}
    assert source.target == "s/n"


@pytest.mark.parametrize(
    "manifest, files, line, words",
    [
        ('sections = ["01_demo.py"\n[title]\n', {"01_demo.py": GOOD}, 2, "malformed TOML"),
        ('sections = ["01_demo.py"]\n[title]\nen = "T"\n', {"01_demo.py": GOOD}, 2, "no 'zh' title"),
        ('sections = ["01_demo.py", "02_gone.py"]\n[title]\nen = "T"\nzh = "T"\n', {"01_demo.py": GOOD}, 1, "does not exist"),
        ('sections = ["01_demo.py"]\n[title]\nen = "T"\nzh = "T"\n', {"01_demo.py": GOOD, "02_extra.py": GOOD}, None, "not listed"),
        ('sections = "01_demo.py"\n[title]\nen = "T"\nzh = "T"\n', {"01_demo.py": GOOD}, None, "must be a list"),
        ('[title]\nen = "T"\nzh = "T"\n', {"01_demo.py": GOOD}, None, "missing key 'sections'"),
        ('sections = ["01_demo.py"]\n[title]\nen = "T"\nzh = "T"\n[quick]\n"not valid" = 1\n', {"01_demo.py": GOOD}, 6, "not a name a Python variable"),
    ],
)
def test_bad_manifests(tmp_path, manifest, files, line, words):
    root = write_project(tmp_path, manifest, files)
    with pytest.raises(SourceError) as caught:
        load(root)
    assert caught.value.file.name == "notebook.toml"
    assert caught.value.line == line
    assert words in caught.value.message


def test_quick_needs_a_parameters_cell(tmp_path):
    root = write_project(tmp_path, MANIFEST, {"01_demo.py": GOOD.replace(' tags=["parameters"]', "")})
    with pytest.raises(SourceError, match="parameters"):
        load(root)


def test_two_parameters_cells_are_refused(tmp_path):
    manifest = MANIFEST.replace('["01_demo.py"]', '["01_demo.py", "02_more.py"]')
    root = write_project(tmp_path, manifest, {"01_demo.py": GOOD, "02_more.py": GOOD})
    with pytest.raises(SourceError, match="only one cell") as caught:
        load(root)
    assert (caught.value.file.name, caught.value.line) == ("02_more.py", 7)


@pytest.mark.parametrize(
    "manifest, line, words",
    [
        (MANIFEST + "[qiuck]\nN = 2\n", 7, "unknown key 'qiuck' (allowed: sections, unfolded, title, quick)"),
        (MANIFEST.replace("N = 2", "import = 1"), 6, "[quick] key 'import' is not a name a Python variable can have"),
        (MANIFEST.replace("N = 2", "N = 1979-05-27"), 6, "[quick] value of 'N' cannot be written as Python code"),
        (MANIFEST.replace("N = 2", "N = nan"), 6, "cannot be written as Python code"),
        (MANIFEST.replace('zh = "标题"', 'zh = "标题"\nfr = "Titre"'), 5, "[title] language 'fr' is not configured"),
    ],
)
def test_manifest_keys_and_values_are_checked_with_their_line(tmp_path, manifest, line, words):
    with pytest.raises(SourceError) as caught:
        load(write_project(tmp_path, manifest, {"01_demo.py": GOOD}))
    assert (caught.value.file.name, caught.value.line) == ("notebook.toml", line)
    assert words in caught.value.message


def test_unknown_config_keys_are_refused(tmp_path):
    root = write_project(tmp_path, MANIFEST, {"01_demo.py": GOOD})
    (root / "config.toml").write_text('languages = ["en", "zh"]\nrepository = "o/r"\nbranch = "main"\nbranh = "x"\n')
    with pytest.raises(SourceError, match="unknown key 'branh'") as caught:
        load(root)
    assert caught.value.line == 4


def test_a_byte_order_mark_gets_its_own_message(tmp_path):
    path = section(tmp_path, GOOD)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with pytest.raises(SourceError) as caught:
        read_section(path, LANGS)
    assert caught.value.line == 1 and "UTF-8 byte-order mark (BOM)" in caught.value.message


def test_a_section_leading_outside_notebooks_src_is_refused(tmp_path):
    root = write_project(tmp_path, MANIFEST, {})
    outside = tmp_path / "elsewhere.py"
    outside.write_text(GOOD, encoding="utf-8")
    (root / "s" / "n" / "01_demo.py").symlink_to(outside)
    with pytest.raises(SourceError, match="section '01_demo.py' is outside notebooks_src/") as caught:
        load(root)
    assert (caught.value.file.name, caught.value.line) == ("notebook.toml", 1)


def test_colab_placeholder_must_name_a_notebook(tmp_path):
    text = GOOD.replace("# 你好", "# 你好 {{colab:s/missing}}")
    root = write_project(tmp_path, MANIFEST, {"01_demo.py": text})
    with pytest.raises(SourceError, match="names no notebook") as caught:
        load(root)
    assert (caught.value.file.name, caught.value.line) == ("01_demo.py", 5)  # the placeholder's line
    ok = write_project(tmp_path / "ok", MANIFEST, {"01_demo.py": GOOD.replace("# 你好", "# 你好 {{colab:s/n}}")})
    assert "{{colab:s/n}}" in load(ok).sections[0].cells[1].source
