"""Localized comments in code cells, language-tagged outputs and the prelude (pure parts)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat
import pytest

from learning_notebooks.cache import code_tokens
from learning_notebooks.compose import prelude_source
from learning_notebooks.errors import SourceError
from learning_notebooks.localize import (
    PairingError,
    check_comment_pairs,
    check_say_calls,
    edition_code,
    localize_comments,
    missing_twins,
    outputs_for,
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
    en, zh = localize_comments(CODE, "en"), localize_comments(CODE, "zh")
    assert en.splitlines()[:3] == ["# Add the numbers.", "# Then check.", "total = 1 + 2  # [B, T]"]
    assert zh.splitlines()[:3] == ["# 把数字加起来。", "# 然后检查。", "total = 1 + 2  # [B, T]"]
    assert "    # inner" in en and "    # 内层" in zh and "内层" not in en
    assert "# [en] not a comment: inside a string" in en and "# [en] not a comment: inside a string" in zh


def test_executed_code_empties_tagged_lines_so_line_numbers_hold():
    executed = localize_comments(CODE, None)
    assert len(executed.split("\n")) == len(CODE.split("\n"))
    assert "Add the numbers" not in executed and "把数字" not in executed
    assert executed.split("\n")[4] == "total = 1 + 2  # [B, T]"
    assert executed.split("\n")[:2] == ["#", "#"]  # not blank: IPython drops leading blank lines


def test_code_tokens_are_identical_across_languages():
    variants = {str(code_tokens(localize_comments(CODE, lang))) for lang in ("en", "zh", None)}
    assert len(variants) == 1
    assert code_tokens(CODE) == code_tokens(CODE.replace("Add the numbers.", "Sum them up."))
    assert ("STRING", '"""\n# [en] not a comment: inside a string\n"""') in code_tokens(CODE)  # strings are code
    assert code_tokens(CODE) != code_tokens(CODE.replace("1 + 2", "1 + 3"))


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
    assert "[zh]" not in prelude_source("en") and "[en]" not in prelude_source("en")
    assert prelude_source("zh").isascii() is False and "# [" not in prelude_source("zh")
    assert 'LANG = "en"' in prelude_source("en") and "LANG = None" in prelude_source(None)


def test_say_must_name_every_language_as_a_keyword():
    check_say_calls('say(en="a", zh="甲")\nsay_table([["1"]], en=["n"], zh=["数"])', LANGS)
    for code, row, words in [
        ('x = 1\nif x:\n    say_table([["1"]], en=["n"])', 2, "say_table() without zh="),
        ('say(**texts)', 0, "say() with **texts or *args"),
        ('say(*pair)', 0, "say() with **texts or *args"),
        ('say("a", zh="甲")', 0, "say() takes only one keyword argument per language"),
        ('say_table(en=["n"], zh=["数"])', 0, "say_table() takes the rows, then"),
        ('say(en="a", zh="甲", fr="b")', 0, "keyword 'fr' is not a configured language"),
    ]:
        with pytest.raises(PairingError) as caught:
            check_say_calls(code, LANGS)
        assert caught.value.row == row and words in str(caught.value), code


SAID = '''x = 1
say(en=f"The sum is {x}.", zh=f"总和是 {x}。")
say(en=f"a "
       f"b",
    zh=f"甲"
       f"乙")
say_table(rows, en=["a", "b"],
          zh=["甲", "乙"])
say(
    en="a",
    zh="乙",
)
assert x, say(en="no", zh="不")
obj.say(en="a", zh="甲")  # not the prelude's say: left alone
y = 2'''


def test_each_edition_keeps_its_own_texts_as_if_written_in_one_language():
    en, zh = edition_code(SAID, "en"), edition_code(SAID, "zh")
    assert en.split("\n")[:4] == ["x = 1", 'say(en=f"The sum is {x}.")', 'say(en=f"a "', '       f"b")']
    assert zh.split("\n")[1:4] == ['say(zh=f"总和是 {x}。")', 'say(zh=f"甲"', '       f"乙")']
    assert 'say_table(rows, zh=["甲", "乙"])' in zh and 'say_table(rows, en=["a", "b"])' in en
    assert 'say(\n    en="a"\n)' in en and 'say(\n    zh="乙",\n)' in zh
    for lang, code in (("en", en), ("zh", zh)):
        assert "\n\n" not in code  # no blank line where a text was
        compile(code, lang, "exec")
        assert code.split("\n")[-1] == "y = 2" and 'obj.say(en="a", zh="甲")' in code
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in en.replace('obj.say(en="a", zh="甲")', ""))
    assert "en=" not in zh.replace('obj.say(en="a", zh="甲")', "")


def test_the_language_neutral_code_keeps_the_line_count():
    assert len(edition_code(SAID, None).split("\n")) == len(SAID.split("\n"))


def test_every_edition_and_the_executed_code_share_their_language_neutral_tokens():
    neutral = {str(code_tokens(edition_code(code, None))) for code in (SAID, edition_code(SAID, "en"),
                                                                       edition_code(SAID, "zh"))}
    assert len(neutral) == 1
    assert code_tokens(edition_code(SAID, None)) != code_tokens(edition_code(SAID.replace("x = 1", "x = 2"), None))
