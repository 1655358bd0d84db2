"""Every exact-equality claim of the notebooks holds on any CPU, not only on the machine that built them.

The notebooks may assert bit-for-bit equality only where it holds by construction (docs/exact-equality.md):
the same call on the same inputs, pure data movement, integers and booleans. A claim that depends on how a
kernel rounds for a given layout or shape passes on one CPU and fails on another (the architectures
notebook once failed on an AMD EPYC after building on an Intel Xeon). This test makes such claims fail on
every machine: it runs each notebook that uses torch, in-process and in quick mode, under `LayoutNoise`
(tests/layout_noise.py), which perturbs the last bits of every layout- and shape-dependent kernel the way
another CPU might, deterministically per call. The notebooks must still pass, every assertion included.

The first tests check the mode itself, so that it cannot silently become a no-op: it changes a product
whose operand is a view rather than a copy, it leaves the same call on the same inputs and pure data
movement bit-identical, and it touches no integer result.
"""

from __future__ import annotations

import os
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layout_noise import PERTURBED, LayoutNoise, step_of  # noqa: E402
from learning_notebooks.sources import load_config, load_notebook  # noqa: E402
from notebook_code import SOURCES, code_cells  # noqa: E402

# Every notebook whose code uses torch (the browser edition is NumPy only: its two exact claims are an
# index-and-add and a boolean mask, see docs/exact-equality.md).
TORCH_NOTEBOOKS = [
    "infra-benchmark/kv-cache",
    "infra-benchmark/kv-cache-hf-gpt2",
    "infra-benchmark/kv-cache-serving",
    "infra-benchmark/kv-cache-architectures",
    "infra-benchmark/kv-cache-reuse",
]


# ---- the mode itself -----------------------------------------------------------------------------------

def qk(t: int, contiguous: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q [1, 4, t, 16] and the keys, as a transposed view of a projection or as its contiguous copy."""
    gen = torch.Generator().manual_seed(t)
    q = torch.randn(1, 4, t, 16, generator=gen)
    k = torch.randn(1, t, 4, 16, generator=gen).transpose(1, 2)         # [1, 4, t, 16], a view
    return q, (k.contiguous() if contiguous else k)


def test_a_view_and_its_copy_round_differently_under_the_mode():
    """The AMD EPYC case: `q @ k.T` with k a view, and with k.contiguous(). Without the mode this CPU may
    or may not round them apart; under it, most lengths do."""
    differ = 0
    lengths = range(1, 25)
    for t in lengths:
        q, k_view = qk(t, contiguous=False)
        _, k_copy = qk(t, contiguous=True)
        assert torch.equal(k_view, k_copy)
        with LayoutNoise():
            by_view, by_copy = q @ k_view.transpose(-2, -1), q @ k_copy.transpose(-2, -1)
        torch.testing.assert_close(by_view, by_copy)                     # the same numbers, within rounding
        differ += not torch.equal(by_view, by_copy)
    assert differ >= len(lengths) // 2, differ


def test_shapes_and_batch_sizes_round_differently_under_the_mode():
    """A row computed in a batch of 1 and in a batch of 2 (or in a chunk of 5 and of 8 rows)."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 8, 64, generator=gen), torch.randn(64, 64, generator=gen)
    with LayoutNoise():
        alone, batched = x[:1] @ w, x @ w
        five, eight = x[0, :5] @ w, x[0] @ w
    assert not torch.equal(alone[0], batched[0]) or not torch.equal(five, eight[:5])
    torch.testing.assert_close(alone[0], batched[0])


def test_the_same_call_on_the_same_inputs_is_bit_identical():
    q, k = qk(5, contiguous=False)
    with LayoutNoise() as noise:
        first = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        again = torch.softmax(q.clone() @ k.transpose(-2, -1), dim=-1)   # a fresh copy: the same layout
    assert torch.equal(first, again)
    assert noise.calls == {"matmul": 2, "softmax": 2}


def test_data_movement_and_integers_are_untouched():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 8, generator=gen)
    index = torch.tensor([4, 0, 2])
    ids = torch.randint(0, 9, (4, 4), generator=gen)
    moves = {
        "clone": lambda: x.clone(), "contiguous": lambda: x.transpose(0, 1).contiguous(),
        "index": lambda: x[:, index], "gather": lambda: x.gather(1, index.view(1, 3, 1).expand(3, 3, 8)),
        "cat": lambda: torch.cat((x, x), dim=1), "slice": lambda: x[:, 1:4],
        "scatter": lambda: torch.zeros(3, 5, 8).index_copy(1, index, x[:, :3]),
        "to_fp64": lambda: x.double(), "int_matmul": lambda: ids @ ids, "int_sum": lambda: ids.sum(-1),
        "mask": lambda: x > 0,
    }
    plain = {name: move() for name, move in moves.items()}
    with LayoutNoise() as noise:
        noisy = {name: move() for name, move in moves.items()}
    assert all(torch.equal(plain[name], noisy[name]) for name in moves)
    assert noise.changed == {}


def test_every_perturbed_kernel_is_perturbed_somewhere():
    """Each name in PERTURBED changes the result of some call (a factor of 0 for every call would hide it)."""
    names = set(PERTURBED.values())
    changed = {name for name in names if any(step_of(name, (torch.empty(n, 8),), {}) for n in range(1, 9))}
    assert changed == names
    with LayoutNoise() as noise:
        results = [torch.randn(n, 8).softmax(-1) for n in range(1, 9)]
    assert noise.changed.get("softmax", 0) > 0 and all(r.dtype == torch.float32 for r in results)


# ---- the notebooks under the mode ----------------------------------------------------------------------

def file_line(notebook: str, cell_id: str, line_in_cell: int) -> str:
    """`section file:line: statement` for a line of an executed code cell (tagged comment lines keep
    their line, so the count is the file's)."""
    series, name = notebook.split("/")
    for cell in load_notebook(SOURCES, series, name, load_config(SOURCES)).code_cells():
        if cell.id == cell_id:
            blank = len(cell.source) - len(cell.source.lstrip("\n"))
            line = cell.line + blank + line_in_cell
            return f"{cell.file.name}:{line}: {cell.file.read_text(encoding='utf-8').split(chr(10))[line - 1].strip()}"
    return f"{cell_id}:{line_in_cell}"


def run_under_noise(notebook: str, out_dir) -> LayoutNoise:
    """Exec the notebook's code cells in quick mode under LayoutNoise; a failure names its section file and line."""
    namespace: dict = {"__name__": "__notebook__"}
    noise = LayoutNoise()
    cells = code_cells(notebook, QUICK=True, OUTPUT_DIR=str(out_dir))
    try:
        with noise:
            for label, cell in cells:
                exec(compile(cell.source, f"<{cell.id}>", "exec", dont_inherit=True), namespace)
    except Exception as error:                                        # noqa: BLE001 - reported with its line
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<")]
        where = file_line(notebook, frames[-1].filename[1:-1], frames[-1].lineno) if frames else "?"
        pytest.fail(f"{notebook} fails under LayoutNoise at {where}\n"
                    f"{type(error).__name__}: {str(error)[:500]}", pytrace=False)
    finally:
        plt.close("all")
    return noise


@pytest.mark.parametrize("notebook", TORCH_NOTEBOOKS, ids=lambda n: n.split("/")[1])
def test_the_notebook_passes_when_kernels_round_as_on_another_cpu(notebook, tmp_path, capsys):
    noise = run_under_noise(notebook, tmp_path)
    # The mode was really at work: products and softmaxes were intercepted and most of them perturbed.
    assert noise.changed.get("linear", 0) > 100 and noise.changed.get("softmax", 0) > 10, noise.changed
