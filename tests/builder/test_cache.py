"""The execution key, the environment record and the verdict on a recorded run (pure functions)."""

from __future__ import annotations

import pytest

from learning_notebooks.cache import (
    BUILDER_FORMAT,
    Current,
    Previous,
    code_tokens,
    environment,
    environment_changes,
    execution_key,
    imported_modules,
    package_versions,
    verdict,
)

KEY_ARGS = dict(code=["x = 1"], parameters={}, builder_format=1)


def key(**changes):
    return execution_key(**{**KEY_ARGS, **changes})


def test_execution_key_is_pure_and_sensitive_to_each_input():
    assert key() == key()
    assert key().startswith("sha256:")
    variants = [
        key(code=["x = 2"]),
        key(code=["x = 1", "y = 2"]),
        key(code=["s = '''a\n'''"]),
        key(code=["s = '''a  \n'''"]),  # trailing spaces inside a string are code
        key(parameters={"QUICK": True}),
        key(parameters={"QUICK": "True"}),  # repr keeps the type
        key(builder_format=2),
    ]
    assert len({key(), *variants}) == len(variants) + 1


@pytest.mark.parametrize("same", [
    "x = 1  # a comment",
    "\n\nx = 1\n\n",
    "x   =   1",
    "# [en] a tagged comment\n# [zh] 注释\nx = 1",
])
def test_execution_key_ignores_comments_blank_lines_and_spacing(same):
    assert key(code=[same]) == key()


def test_code_tokens_keep_string_literals_whole_and_indentation_as_levels():
    assert code_tokens("if x:\n    s = '''a  \n'''") == code_tokens("if x:\n  s = '''a  \n'''  # c")
    assert ("STRING", "'''a  \n'''") in code_tokens("s = '''a  \n'''")
    assert ("STRING", 'f"{x!r:>4} y"') in code_tokens('s = f"{x!r:>4} y"')  # one token in any Python
    assert code_tokens("x = (") == (("SOURCE", "x = ("),)  # does not tokenize: the text itself


def test_execution_key_ignores_parameter_order():
    assert key(parameters={"a": 1, "b": 2}) == key(parameters={"b": 2, "a": 1})


def test_environment_changes_name_each_version_that_differs():
    recorded = environment({"numpy": "2", "torch": "2.13.0"}, "3.11")
    assert environment_changes(recorded, environment({"torch": "2.13.0", "numpy": "2"}, "3.11")) == []
    assert environment_changes(recorded, environment({"numpy": "2", "torch": "2.13.1", "scipy": "1"}, "3.12")) == [
        "python 3.11 → 3.12",
        "scipy not recorded → 1",
        "torch 2.13.0 → 2.13.1",
    ]


def test_imported_modules_and_versions():
    import numpy

    code = ["import numpy as np\nimport os.path", "from nbformat import v4\nfrom . import x", "def f(:"]
    assert imported_modules(code) == {"numpy", "os", "nbformat"}
    versions = package_versions({"numpy", "os", "nbformat", "surely_not_installed_pkg"})
    assert "os" not in versions
    assert versions["numpy"] == numpy.__version__
    assert versions["surely_not_installed_pkg"] == "missing"


# -- the verdict -----------------------------------------------------------------------------------

ENV = environment({"torch": "2.13.0"}, "3.11")
FILES = {"result.json": "ab"}


def record(**changes) -> dict:
    base = {"executed": True, "execution_key": "k", "parameters": {}, "builder_format": BUILDER_FORMAT,
            "quick": False, "environment": ENV, "run": "r1", "output_files": FILES}
    return {**base, **changes}


def files(en=None, zh=None, **intact) -> dict[str, Previous]:
    return {lang: Previous(f"hello.{lang}.ipynb", rec, **{"outputs_intact": True, "code_intact": True, **intact})
            for lang, rec in (("en", en if en is not None else record()), ("zh", zh if zh is not None else record()))}


CURRENT = Current("k", {}, ENV, False, FILES)


def test_a_whole_run_is_valid():
    v = verdict(files(), CURRENT)
    assert v.valid and v.drift == () and v.reusable == {"en", "zh"}


@pytest.mark.parametrize("previous, current, words", [
    (files(zh=record(run="r2")), CURRENT, "the languages hold different runs"),
    (files(), Current("k", {}, ENV, False, {"result.json": "cd"}), "its files differ from the ones the recorded run wrote"),
    (files(), Current("k", {}, ENV, False, {}), "its files differ"),
    (files(en=record(execution_key="old")), CURRENT, "hello.en.ipynb: stale: code changed since its run"),
    (files(en=record(execution_key="old", builder_format=2)), CURRENT, "built by an older builder (format 2"),
    (files(en=record(execution_key="old", parameters={"N": "1"})), CURRENT, "parameters changed"),
    (files(en=record(quick=True)), CURRENT, "hello.en.ipynb: a quick-mode build"),
    (files(en=record(executed=False)), CURRENT, "carries no outputs"),
    (files(outputs_intact=False), CURRENT, "outputs edited by hand"),
    (files(code_intact=False), CURRENT, "its code differs from what the sources compose"),
    ({**files(), "zh": Previous("hello.zh.ipynb", None)}, CURRENT, "hello.zh.ipynb: missing"),
])
def test_anything_but_one_whole_run_is_not_valid(previous, current, words):
    v = verdict(previous, current)
    assert not v.valid and any(words in problem for problem in v.problems), v.problems


def test_drift_is_read_from_every_language():
    drifted = environment({"torch": "2.12.0"}, "3.11")
    v = verdict(files(zh=record(environment=drifted)), CURRENT)
    assert v.valid and v.drift == ("torch 2.12.0 → 2.13.0",)


def test_each_language_that_holds_a_valid_run_may_keep_it_without_a_run():
    v = verdict({**files(), "zh": Previous("hello.zh.ipynb", None)}, CURRENT)
    assert v.reusable == {"en"}
    assert verdict(files(outputs_intact=False), CURRENT).edited == ("hello.en.ipynb", "hello.zh.ipynb")
