"""Localized comments in code cells, language-tagged outputs and the prelude (pure parts)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat
import pytest

from learning_notebooks.compose import prelude_source
from learning_notebooks.errors import SourceError
from learning_notebooks.localize import (
    PairingError,
    check_comment_pairs,
    check_code_cell,
    localize_code,
    missing_twins,
    outputs_for,
    strip_comments,
)
from learning_notebooks.sources import read_section

LANGS = ("en", "zh")

CODE = '''# [en] Add the numbers.
# [en] Then check.
# [zh] 把数字加起来。
# [zh] 然后检查。
total = 1 + 2  # [B, T]
for i in range(2):
    # [en] inner
    # [zh] 内层
    total += i
text = """
# [en] not a comment: inside a string
"""'''


def test_each_language_keeps_its_comments_and_the_untagged_ones():
    en, zh = localize_code(CODE, "en"), localize_code(CODE, "zh")
    assert en.splitlines()[:3] == ["# Add the numbers.", "# Then check.", "total = 1 + 2  # [B, T]"]
    assert zh.splitlines()[:3] == ["# 把数字加起来。", "# 然后检查。", "total = 1 + 2  # [B, T]"]
    assert "    # inner" in en and "    # 内层" in zh and "内层" not in en
    assert "# [en] not a comment: inside a string" in en and "# [en] not a comment: inside a string" in zh


def test_executed_code_empties_tagged_lines_so_line_numbers_hold():
    executed = localize_code(CODE, None)
    assert len(executed.split("\n")) == len(CODE.split("\n"))
    assert "Add the numbers" not in executed and "把数字" not in executed
    assert executed.split("\n")[4] == "total = 1 + 2  # [B, T]"
    assert executed.split("\n")[:2] == ["#", "#"]  # not blank: IPython drops leading blank lines


def test_code_tokens_are_identical_across_languages():
    variants = {strip_comments(localize_code(CODE, lang)) for lang in ("en", "zh", None)}
    assert len(variants) == 1
    assert strip_comments(CODE) == strip_comments(CODE.replace("Add the numbers.", "Sum them up."))
    assert "# [en] not a comment" in strip_comments(CODE)  # string literals are code
    assert strip_comments(CODE) != strip_comments(CODE.replace("1 + 2", "1 + 3"))


@pytest.mark.parametrize(
    "code, row, words",
    [
        ("# [en] alone\nx = 1", 0, "no '# [zh]' twin"),
        ("# [zh] 只有中文\nx = 1", 0, "without a preceding '# [en]'"),
        ("# [en] a\n\n# [zh] 甲\nx = 1", 0, "no '# [zh]' twin"),  # a blank line separates them
        ("if True:\n    # [en] a\n# [zh] 甲\n    x = 1", 1, "no '# [zh]' twin"),  # different indentation
        ("# [en] a\n# [zh] 甲\n# [en] b\nx = 1", 2, "no '# [zh]' twin"),
        ("# [en] a\n# [en] b\n# [fr] c\n", 2, "unknown language 'fr'"),
        ("x = 1\n# [zh] 甲\n# [en] a\n", 1, "without a preceding '# [en]'"),
    ],
)
def test_unpaired_comments(code, row, words):
    with pytest.raises(PairingError) as caught:
        check_comment_pairs(code, LANGS)
    assert caught.value.row == row and words in str(caught.value)


def test_back_to_back_pairs_are_fine():
    check_comment_pairs("# [en] a\n# [zh] 甲\n# [en] b\n# [zh] 乙\nx = 1", LANGS)
    check_comment_pairs(CODE, LANGS)


def test_missing_twin_in_a_section_file_names_file_and_line(tmp_path: Path):
    path = tmp_path / "01_demo.py"
    path.write_text('# %% [markdown] lang="en"\n# Hi\n\n# %% [markdown] lang="zh"\n# 你好\n\n'
                    "# %%\nx = 1\n# [en] lonely comment\ny = 2\n", encoding="utf-8")
    with pytest.raises(SourceError) as caught:
        read_section(path, LANGS)
    assert (caught.value.file, caught.value.line) == (path, 9)
    assert str(caught.value).startswith(f"{path}:9: '# [en]' comment has no '# [zh]' twin")


def display(lang, text="t"):
    return nbformat.v4.new_output("display_data", data={"text/plain": text}, metadata={"lang": lang} if lang else {})


def test_outputs_kept_and_dropped_per_language():
    outputs = [nbformat.v4.new_output("stream", name="stdout", text="x\n"), display("en", "hello"), display("zh", "你好")]
    assert [o.get("text") or o.data["text/plain"] for o in outputs_for(outputs, "en")] == ["x\n", "hello"]
    assert [o.get("text") or o.data["text/plain"] for o in outputs_for(outputs, "zh")] == ["x\n", "你好"]


def test_missing_twins():
    full = [display(None), display("en"), display("zh")]
    assert missing_twins({"en": full, "zh": full}, LANGS) == []
    lonely = [display(None), display("en")]
    assert "without all their twins" in missing_twins({"en": lonely, "zh": lonely}, LANGS)[0]
    # built files: each notebook holds its own language only
    assert missing_twins({"en": outputs_for(full, "en"), "zh": outputs_for(full, "zh")}, LANGS) == []
    assert missing_twins({"en": outputs_for(full, "en"), "zh": [display(None)]}, LANGS) != []
    assert missing_twins({"en": [display("fr")], "zh": [display("fr")]}, LANGS) != []


def run_prelude(lang):
    namespace: dict = {}
    exec(prelude_source(lang), namespace)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace["say"](en="passed", zh="通过")
        namespace["say_table"]([["a|b", "1.00"]], en=["name", "value"], zh=["名称", "数值"])
    return namespace, out.getvalue()


def test_prelude_sets_lang_and_prints_outside_a_kernel():
    namespace, printed = run_prelude("zh")
    assert namespace["LANG"] == "zh"
    assert printed == "通过\n| 名称 | 数值 |\n| --- | --- |\n| a\\|b | 1.00 |\n"
    _, everything = run_prelude(None)
    assert "passed" in everything and "通过" in everything
    assert prelude_source("en").startswith("# The notebook's language") and "[zh]" not in prelude_source("en")
    assert prelude_source("zh").isascii() is False and "# [" not in prelude_source("zh")
    assert 'LANG = "en"' in prelude_source("en") and "LANG = None" in prelude_source(None)


def test_say_must_name_every_language():
    check_code_cell('say(en="a", zh="甲")\nsay_table([["1"]], en=["n"], zh=["数"])\nsay(**texts)', LANGS)
    with pytest.raises(PairingError) as caught:
        check_code_cell('x = 1\nif x:\n    say_table([["1"]], en=["n"])', LANGS)
    assert caught.value.row == 2 and "say_table() without zh=" in str(caught.value)
