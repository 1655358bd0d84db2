"""The browser edition (infra-benchmark/kv-cache-browser) needs NumPy and the standard library only.

- its code cells import nothing else (static check with ast);
- it executes, through a real kernel, in a virtual environment that has NumPy but not torch
  (.venv-numpy-only/, cached by the hash of requirements-numpy-only.txt), and at run time loads no
  other third-party module;
- its assertions hold for other values of the section-5 knobs HISTORY and CHUNK;
- its functions (the masks, the toy layer, the figure, the exercises' window mask) keep their
  properties on inputs the notebook does not use.

The notebook's own bugs, injected into its section files, are in test_browser_bugs.py.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

from xml.etree import ElementTree

import nbformat
import numpy as np
import pytest

from browser_helpers import HERE, NOTEBOOK, NUMPY_ONLY_REQUIREMENTS, NUMPY_ONLY_VENV, REPO, compose_notebooks
from venvs import cached_venv, clean_env, venv_python
from learning_notebooks.compose import comparable_code
from notebook_code import code_cells, run_notebook_code
from learning_notebooks.cache import imported_modules

ALLOWED_TOP_LEVEL = set(sys.stdlib_module_names) | {"numpy"}
# Modules that the kernel machinery itself may load lazily while running cells; never the notebook's.
KERNEL_SIDE = {"IPython", "ipykernel", "jupyter_client", "jupyter_core", "zmq", "tornado", "traitlets",
               "comm", "debugpy", "psutil", "matplotlib_inline", "prompt_toolkit", "pygments", "jedi",
               "parso", "executing", "asttokens", "stack_data", "pure_eval", "decorator", "wcwidth",
               "pexpect", "ptyprocess", "nest_asyncio", "platformdirs", "dateutil", "six", "packaging",
               "_pydevd_bundle", "_pydev_bundle", "pydevd", "_pydevd_frame_eval", "pydevd_plugins",
               "pydevd_file_utils", "_pydev_runfiles", "pydev_ipython", "pydevconsole", "pydevd_tracing"}


def imported_top_level(source: str) -> set[str]:
    names = imported_modules([source])  # the builder's own reading of imports (its cache key uses it)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
            "__import__", "import_module"
        ):
            raise AssertionError(f"dynamic import in the browser notebook: {ast.unparse(node)}")
    return names


def test_imports_are_numpy_and_stdlib_only():
    cells = code_cells(NOTEBOOK)
    assert cells, f"no code cells found for {NOTEBOOK}"
    found = {}
    for name, cell in cells:
        if name == "prelude.py":  # the builder's prelude: IPython's display when a kernel is there, else print
            continue
        for module in imported_top_level(cell.source):
            found.setdefault(module, name)
    outside = {module: where for module, where in found.items() if module not in ALLOWED_TOP_LEVEL}
    assert not outside, f"imports outside NumPy and the standard library: {outside}"
    assert "numpy" in found
    assert "torch" not in found and "matplotlib" not in found


def test_built_notebooks_share_the_same_code(tmp_path):
    """Both languages carry identical code cells (comments aside), and those cells parse (no magics)
    with the same imports."""
    paths = compose_notebooks(tmp_path)
    notebooks = {lang: nbformat.read(path, as_version=4) for lang, path in paths.items()}
    assert comparable_code(notebooks["en"]) == comparable_code(notebooks["zh"])
    for cell in notebooks["en"].cells:
        if cell.cell_type == "code" and cell.id != "prelude":
            assert imported_top_level(cell.source) <= ALLOWED_TOP_LEVEL


@pytest.fixture(scope="session")
def numpy_only_python():
    env = cached_venv(NUMPY_ONLY_VENV, NUMPY_ONLY_REQUIREMENTS)
    python = venv_python(env)
    check = subprocess.run(
        [str(python), "-c", "import importlib.util as u, numpy; print(u.find_spec('torch') is None, numpy.__version__)"],
        capture_output=True, text=True, env=clean_env(), check=True,
    )
    assert check.stdout.split() == ["True", "2.4.6"], f"unexpected environment in {env}: {check.stdout!r}"
    return python


def test_notebook_executes_with_numpy_but_without_torch(numpy_only_python, tmp_path):
    paths = compose_notebooks(tmp_path / "composed")
    report_path = tmp_path / "report.json"
    subprocess.run(
        [str(numpy_only_python), str(REPO / "tests" / "run_notebook_in_venv.py"), str(paths["en"]), str(report_path)],
        check=True, env=clean_env(), cwd=tmp_path,
    )
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert not report["errors"], report["errors"]
    env_prefix = str(NUMPY_ONLY_VENV.resolve())
    for probe in (report["before"], report["after"]):
        assert probe["prefix"] == env_prefix, f"the kernel did not run in {env_prefix}: {probe['prefix']}"
        assert probe["torch_importable"] is False
    assert report["runner_torch_importable"] is False

    loaded = set(report["after"]["modules"]) - set(report["before"]["modules"])
    third_party = {m.split(".")[0] for m in loaded} - ALLOWED_TOP_LEVEL - KERNEL_SIDE
    third_party = {m for m in third_party if not m.startswith("_")}
    assert not third_party, f"the notebook loaded modules outside NumPy and the standard library: {third_party}"
    assert "torch" not in {m.split(".")[0] for m in report["after"]["modules"]}

    assert "Exercise 1 checked" in report["markdown"]                         # said through say()
    seconds = report["notebook_seconds"]
    print(f"\nkv-cache-browser: {report['code_cells']} code cells ran in {seconds:.2f} s "
          f"({report['wall_seconds_with_kernel_start']:.2f} s with kernel start-up)")
    assert seconds < 10, f"the browser notebook took {seconds:.1f} s; it should take well under a few seconds"


KNOBS = re.compile(r"^HISTORY = \d+(?P<h>.*)\nCHUNK = \d+(?P<c>.*)$", re.M)


@pytest.mark.parametrize("history, chunk", [(0, 1), (0, 5), (1, 1), (10, 3), (37, 11), (500, 12)])
def test_knobs_other_values(history, chunk):
    """Section 5's assertions, and section 6's comparison, hold for other history and chunk lengths."""
    namespace: dict = {"__name__": "__notebook__"}
    edited = 0
    for name, cell in code_cells(NOTEBOOK):
        source = cell.source
        if KNOBS.search(source):
            source = KNOBS.sub(lambda m: f"HISTORY = {history}{m['h']}\nCHUNK = {chunk}{m['c']}", source)
            edited += 1
        exec(compile(source, name, "exec"), namespace)
    assert edited == 1, "expected exactly one cell that sets HISTORY and CHUNK"
    assert namespace["HISTORY"] == history and namespace["CHUNK"] == chunk
    assert namespace["cached_out"].shape == (chunk, namespace["HEAD_DIM"])
    # Values other than section 4's draw its figure again, unless the grid is too large.
    assert (namespace["figure"] is None) == (history + chunk > 120 or chunk > 40)


@pytest.mark.parametrize("lang, history, chunk, expected, absent", [
    ("zh", -1, 2, "`HISTORY` 至少为 0，`CHUNK` 至少为 1", "must be at least"),
    ("en", 4, 0, "`HISTORY` must be at least 0 and `CHUNK` at least 1", "至少"),
    (None, 4, 0, "`HISTORY` must be at least 0 and `CHUNK` at least 1", None),   # the build's run: every language
    ("zh", 500, 13, "`HISTORY + CHUNK` 不能超过 512", "must not exceed"),
])
def test_try_it_cell_stops_in_the_readers_language(lang, history, chunk, expected, absent, capsys):
    """Out-of-range knobs stop the try-it cell; say() explains why in the notebook's language."""
    namespace: dict = {"__name__": "__notebook__"}
    with pytest.raises(ValueError):
        for name, cell in code_cells(NOTEBOOK, lang=lang):
            source = cell.source
            if KNOBS.search(source):
                source = KNOBS.sub(lambda m: f"HISTORY = {history}{m['h']}\nCHUNK = {chunk}{m['c']}", source)
            exec(compile(source, name, "exec"), namespace)
    assert namespace["LANG"] == lang
    last_lines = capsys.readouterr().out.strip().splitlines()[-2:]
    assert any(expected in line for line in last_lines), last_lines
    if absent:
        assert not any(absent in line for line in last_lines)


def test_try_it_assertions_explain_themselves_in_both_languages():
    """Each claim of the try-it cell is an `if` that says why in both languages, then raises AssertionError."""
    cell = next(cell for name, cell in code_cells(NOTEBOOK) if KNOBS.search(cell.source))
    claims = [node for node in ast.walk(ast.parse(cell.source)) if isinstance(node, ast.If)
              and any(isinstance(s, ast.Raise) and s.exc.func.id == "AssertionError" for s in node.body)]
    assert len(claims) == 2
    for claim in claims:
        say_call, raise_stmt = claim.body
        assert isinstance(say_call.value, ast.Call) and say_call.value.func.id == "say"
        assert {k.arg for k in say_call.value.keywords} == {"en", "zh"} and isinstance(raise_stmt, ast.Raise)


def test_a_failing_claim_is_explained(capsys):
    """Negative control: break the offset mask; the try-it cell stops and says which claim broke."""
    namespace: dict = {"__name__": "__notebook__"}
    with pytest.raises(AssertionError):
        for name, cell in code_cells(NOTEBOOK, lang="zh"):
            source = cell.source
            if KNOBS.search(source):
                source = source.replace("good = allowed_keys(HISTORY, CHUNK)", "good = upper_left_mask(HISTORY, CHUNK)")
            exec(compile(source, name, "exec"), namespace)
    assert capsys.readouterr().out.strip().splitlines()[-1] == "查询 $i$ 应当恰好能读取 $P + i + 1$ 个键。"


# ---- the notebook's functions on inputs it does not use --------------------------------------------------

@pytest.fixture(scope="module")
def nb() -> dict:
    return run_notebook_code(NOTEBOOK)


@pytest.mark.parametrize("past_len, new_len", [(0, 1), (0, 7), (1, 1), (3, 4), (9, 2), (40, 9), (500, 12)])
def test_offset_mask_properties(nb, past_len, new_len):
    """The lower-right (offset) mask and the upper-left triangle, for any cache and chunk length."""
    good, wrong = nb["allowed_keys"](past_len, new_len), nb["upper_left_mask"](past_len, new_len)
    query_pos, key_pos = past_len + np.arange(new_len), np.arange(past_len + new_len)
    assert good.shape == wrong.shape == (new_len, past_len + new_len)
    assert good.sum(axis=1).tolist() == list(range(past_len + 1, past_len + new_len + 1))
    assert wrong.sum(axis=1).tolist() == list(range(1, new_len + 1))
    assert good[-1].all() and not (good & (key_pos[None, :] > query_pos[:, None])).any()
    assert good[:, :past_len].all()                                   # every query reads the whole cache
    assert np.array_equal(good, wrong) == (past_len == 0)


@pytest.mark.parametrize("chunks", [[6], [1, 1, 1, 1, 1, 1], [2, 3, 1], [5, 1], [1, 5]])
def test_any_chunking_matches_the_full_pass(nb, chunks):
    """toy_forward on a sequence the notebook does not use, cut into chunks: the logits equal one full
    pass within the tolerance, and no call writes into the cache it was given."""
    ids = np.random.default_rng(11).integers(0, nb["VOCAB"], size=(2, sum(chunks)))
    full, _, _ = nb["toy_forward"](ids)
    cache, rows, start = None, [], 0
    for length in chunks:
        before = None if cache is None else (cache[0].copy(), cache[1].copy())
        logits, new_cache, _ = nb["toy_forward"](ids[:, start:start + length], cache=cache)
        if before is not None:
            assert np.array_equal(cache[0], before[0]) and np.array_equal(cache[1], before[1])
        cache, start = new_cache, start + length
        rows.append(logits)
    assert nb["close"](np.concatenate(rows, axis=1), full)
    assert cache[0].shape == (2, nb["HEADS"], sum(chunks), nb["HEAD_DIM"])


def test_restarted_positions_and_upper_left_mask_are_wrong_on_new_inputs(nb):
    ids = np.random.default_rng(12).integers(0, nb["VOCAB"], size=(1, 9))
    full, _, _ = nb["toy_forward"](ids)
    _, cache, _ = nb["toy_forward"](ids[:, :6])
    right, _, _ = nb["toy_forward"](ids[:, 6:], cache=cache)
    restarted, _, _ = nb["toy_forward"](ids[:, 6:], cache=cache, pos_start=0)
    upper_left, _, _ = nb["toy_forward"](ids[:, 6:], cache=cache, mask_fn=nb["upper_left_mask"])
    assert nb["close"](right, full[:, 6:])
    assert not nb["close"](restarted, full[:, 6:]) and not nb["close"](upper_left, full[:, 6:])


@pytest.mark.parametrize("past_len, new_len", [(4, 2), (0, 3), (37, 11), (200, 20)])
def test_mask_figure_is_valid_svg_with_one_green_cell_per_readable_key(nb, past_len, new_len):
    figure = nb["MaskFigure"](past_len, new_len)
    assert repr(figure) == f"MaskFigure({past_len}, {new_len})"         # no address in the built notebook
    root = ElementTree.fromstring(figure._repr_svg_())
    green = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == "#2e8b57"]
    expected = nb["allowed_keys"](past_len, new_len).sum() + nb["upper_left_mask"](past_len, new_len).sum()
    assert len(green) == expected
    # ASCII labels (the en dash of a range, written as an entity, aside): no CJK font needed.
    assert all(text.text.replace("\u2013", "").isascii() for text in root.iter("{http://www.w3.org/2000/svg}text"))


def test_the_built_notebooks_show_the_figure():
    for lang in ("en", "zh"):
        notebook = nbformat.read(REPO / "build" / "infra-benchmark" / f"kv-cache-browser.{lang}.ipynb", as_version=4)
        svgs = [out["data"]["image/svg+xml"] for cell in notebook.cells if cell.cell_type == "code"
                for out in cell.outputs if "image/svg+xml" in out.get("data", {})]
        # Section 4 draws it; section 5, at section 4's values, does not draw it a second time.
        assert len(svgs) == 1 and all("lower-right alignment" in svg for svg in svgs)


@pytest.mark.parametrize("past_len, new_len, window", [(6, 2, 3), (0, 5, 2), (10, 4, 1), (3, 3, 50)])
def test_window_mask_of_exercise_2(nb, past_len, new_len, window):
    mask = nb["window_keys"](past_len, new_len, window)
    query_pos = past_len + np.arange(new_len)
    assert mask.sum(axis=1).tolist() == [min(p + 1, window) for p in query_pos]
    assert all(np.flatnonzero(row).tolist() == list(range(max(0, p - window + 1), p + 1))
               for row, p in zip(mask, query_pos))
