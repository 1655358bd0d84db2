"""Subtle bugs injected into the architectures notebook's own code must stop it with its own assertions.

Each mutation edits the text of one section file (as a careless edit would): the notebook's model,
caches, rotation, quantizer or attention, never its negative controls (wrong on purpose) and never the
tests. Each replaced text must occur exactly once in its file, inside a code cell. The notebook's code
then runs in this process, and the run must end in an AssertionError raised by a statement of a notebook
section file, not by a test (or in the immediate error named in STOPPED_BY). A mutation that survives
means the notebook cannot see that bug.

Speed: the unmutated notebook (quick mode) runs once per session, section by section. Just before the
section a mutation edits, the process forks; the child runs the mutated section and everything after it,
and reports how it ended. The fork starts from exactly the state a full run would have reached, at the
cost of the mutated suffix only.

Every mutation runs without `transformers`: the notebook must catch it on its own, since a reader may lack
the package. The ones marked `hf` are mistakes that the Hugging Face cross-checks of sections 5 and 6
were written to see, most of them keeping the cached and the full path in agreement; they also run with
`transformers` (skipped where it is not installed), the environment of the build.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import select
import signal
import sys
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path

import jupytext
import pytest

from notebook_code import INJECTED_NAME, PRELUDE_NAME, SOURCES, code_cells, manifest_sections

from .conftest import NOTEBOOK

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the runner forks")

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
FOLDER = SOURCES / NOTEBOOK
CHILD_TIMEOUT_S = 600

# name: (section file, text to replace (must occur exactly once in that file), replacement, hf)
# `hf`: also run with transformers, whose cross-checks (sections 5 and 6) must catch it too.
MUTATIONS = {
    # ---- section 4: GQA, the layer cache, attention ------------------------------------------------
    "gqa: repeat_kv tiles (repeat) instead of interleaving": (
        "02_gqa.py",
        "return x.repeat_interleave(groups, dim=1)",
        "return x.repeat(1, groups, 1, 1)",
        True),
    "gqa: keys tiled (repeat) in the real path": (
        "02_gqa.py",
        "context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)",
        "context = step.attend(q, keys.repeat(1, groups, 1, 1), step.expand(values, groups), allowed)",
        True),
    "gqa: K and V tiled (repeat) in the real path": (
        "02_gqa.py",
        "context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)",
        "context = step.attend(q, keys.repeat(1, groups, 1, 1), values.repeat(1, groups, 1, 1), allowed)",
        True),
    "gqa: the cache stores K/V expanded to H heads": (
        "02_gqa.py",
        "        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]\n"
        "        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]\n"
        "        groups = self.heads // self.kv_heads\n"
        "        context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)\n",
        "        groups = self.heads // self.kv_heads\n"
        "        k, v = step.expand(k, groups), step.expand(v, groups)\n"
        "        keys, values, key_pos = layer_cache.update(k, v, step.positions)\n"
        "        allowed = step.mask_fn(step.positions, key_pos)\n"
        "        context = step.attend(q, keys, values, allowed)\n",
        False),
    "positions: new tokens numbered from 0 (missing offset)": (
        "02_gqa.py",
        "positions = self.positions_fn(cache[0].seen, new_len)",
        "positions = self.positions_fn(0, new_len)",
        False),
    "positions: offset = keys stored, not tokens seen": (
        "02_gqa.py",
        "positions = self.positions_fn(cache[0].seen, new_len)",
        "positions = self.positions_fn(cache[0].stored(), new_len)",
        False),
    "attention: heads merged without the transpose": (
        "02_gqa.py",
        "context.transpose(1, 2).reshape(batch, new_len, self.heads * self.head_dim)",
        "context.reshape(batch, new_len, self.heads * self.head_dim)",
        False),
    "rmsnorm: eps dropped": (
        "02_gqa.py",
        "torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)",
        "torch.rsqrt(h.pow(2).mean(-1, keepdim=True))",
        True),
    "swiglu: gate and up swapped": (
        "02_gqa.py",
        "F.silu(self.gate(x)) * self.up(x)",
        "F.silu(self.up(x)) * self.gate(x)",
        True),
    "full cache: reordered concatenation of K": (
        "02_gqa.py",
        "self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)",
        "self.k = k if self.k is None else torch.cat((k, self.k), dim=-2)",
        False),
    "full cache: in-place write into the cached V": (
        "02_gqa.py",
        "        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]\n",
        "        values[:, :, :1].mul_(1.001)\n"
        "        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]\n",
        False),
    "attention: scores divided by Dh, not sqrt(Dh)": (
        "02_gqa.py",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
        "scores = q @ k.transpose(-2, -1) / q.shape[-1]",
        False),
    "payload formula: K or V, not K and V": (
        "02_gqa.py",
        "return 2 * batch * length * layers * kv_heads * head_dim * bytes_per_element",
        "return batch * length * layers * kv_heads * head_dim * bytes_per_element",
        False),
    # ---- section 5: RoPE ---------------------------------------------------------------------------
    "rope: new chunk rotated at chunk-local positions": (
        "02_gqa.py",
        "return x if self.rotary is None else self.rotary(x, self.positions)",
        "return x if self.rotary is None else self.rotary(x, self.positions - self.positions[0])",
        False),
    "rope: V rotated too": (
        "02_gqa.py",
        "q, k = step.rotate(q), step.rotate(k)",
        "q, k, v = step.rotate(q), step.rotate(k), step.rotate(v)",
        True),
    "rope: K cached before rotation, rotated at read time by cache index": (
        "02_gqa.py",
        "        q, k = step.rotate(q), step.rotate(k)\n"
        "        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]\n",
        "        q = step.rotate(q)\n"
        "        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]\n"
        "        if step.rotary is not None:\n"
        "            keys = step.rotary(keys, torch.arange(keys.shape[-2]))\n",
        True),
    "rope: rotate_half sign flip": (
        "03_rope.py",
        "return torch.cat((-x[..., half:], x[..., :half]), dim=-1)",
        "return torch.cat((x[..., half:], -x[..., :half]), dim=-1)",
        True),
    "rope: frequencies theta^(-i/D) (missing factor 2)": (
        "03_rope.py",
        "torch.arange(0, head_dim, 2, dtype=angle_dtype) / head_dim",
        "torch.arange(0, head_dim // 2, dtype=angle_dtype) / head_dim",
        True),
    "rope: angle table interleaved, pairs are halves": (
        "03_rope.py",
        "angles = torch.cat((angles, angles), dim=-1)",
        "angles = angles.repeat_interleave(2, dim=-1)",
        True),
    # ---- section 6: sliding window and the ring buffer -------------------------------------------------
    "window: band one key too narrow": (
        "04_sliding_window.py",
        "(key_pos[None, :] > query_pos[:, None] - window)",
        "(key_pos[None, :] > query_pos[:, None] - window + 1)",
        True),
    "ring: one slot too few": (
        "04_sliding_window.py",
        "new_cache = (lambda: RingKV(window - 1)) if ring else FullKV",
        "new_cache = (lambda: RingKV(window - 2)) if ring else FullKV",
        False),
    "ring: one slot too many": (
        "04_sliding_window.py",
        "new_cache = (lambda: RingKV(window - 1)) if ring else FullKV",
        "new_cache = (lambda: RingKV(window)) if ring else FullKV",
        False),
    "ring: slot p % (slots + 1)": (
        "04_sliding_window.py",
        "slot = newest % self.slots",
        "slot = newest % (self.slots + 1)",
        False),
    "ring: writes the chunk before reading": (
        "04_sliding_window.py",
        "        old_k, old_v, old_pos = self.contents()\n"
        "        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)\n"
        "        key_pos = torch.cat((old_pos, positions))\n",
        "        newest = positions[-self.slots:]\n"
        "        self.k[:, :, newest % self.slots] = k[:, :, -len(newest):]\n"
        "        self.v[:, :, newest % self.slots] = v[:, :, -len(newest):]\n"
        "        self.positions[newest % self.slots] = newest\n"
        "        old_k, old_v, old_pos = self.contents()\n"
        "        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)\n"
        "        key_pos = torch.cat((old_pos, positions))\n",
        False),
    "ring: a long chunk writes its oldest positions": (
        "04_sliding_window.py",
        "newest = positions[-self.slots:]",
        "newest = positions[:self.slots]",
        False),
    "ring: a long chunk stores its oldest keys under its newest positions": (
        "04_sliding_window.py",
        "self.k[:, :, slot] = k[:, :, -len(newest):]",
        "self.k[:, :, slot] = k[:, :, :len(newest)]",
        False),
    "ring: keys paired with reordered positions": (
        "04_sliding_window.py",
        "key_pos = torch.cat((old_pos, positions))",
        "key_pos = torch.cat((positions, old_pos))",
        False),
    "ring: slots read in slot order, not oldest first": (
        "04_sliding_window.py",
        "        filled = filled[self.positions[filled].argsort()]\n",
        "",
        False),
    # ---- section 7: quantized caches -------------------------------------------------------------------
    "quant: K scales per token (wrong axis)": (
        "05_quantized_cache.py",
        "quantize(k_old, self.bits, dim=-2)",
        "quantize(k_old, self.bits, dim=-1)",
        False),
    "quant: V scales per channel (wrong axis)": (
        "05_quantized_cache.py",
        "quantize(v_old, self.bits, dim=-1)",
        "quantize(v_old, self.bits, dim=-2)",
        False),
    "quant: dequantize without the zero point": (
        "05_quantized_cache.py",
        "return codes.to(scale.dtype) * scale + low",
        "return codes.to(scale.dtype) * scale",
        False),
    "quant: full-precision window one position longer": (
        "05_quantized_cache.py",
        "while self.k_recent.shape[-2] >= self.residual + self.group:",
        "while self.k_recent.shape[-2] > self.residual + self.group:",
        False),
    "quant: truncation instead of rounding": (
        "05_quantized_cache.py",
        "codes = ((x - low) / scale).round()",
        "codes = ((x - low) / scale).floor()",
        False),
    "quant: step (max - min) / 2^b": (
        "05_quantized_cache.py",
        "scale = (high - low).clamp_min(1e-12) / (2 ** bits - 1)",
        "scale = (high - low).clamp_min(1e-12) / 2 ** bits",
        False),
    "quant: groups read after the window": (
        "05_quantized_cache.py",
        "keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)",
        "keys = torch.cat([self.k_recent] + [self.read(g) for g in self.k_groups], dim=-2)",
        False),
    "quant: a call reads its own keys after quantizing them": (
        "05_quantized_cache.py",
        "        keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)\n"
        "        values = torch.cat([self.read(g) for g in self.v_groups] + [self.v_recent], dim=-2)\n",
        "        while self.k_recent.shape[-2] >= self.residual + self.group:\n"
        "            k_old, self.k_recent = self.k_recent[:, :, :self.group], self.k_recent[:, :, self.group:]\n"
        "            v_old, self.v_recent = self.v_recent[:, :, :self.group], self.v_recent[:, :, self.group:]\n"
        "            k_codes, k_scale, k_low = quantize(k_old, self.bits, dim=-2)\n"
        "            v_codes, v_scale, v_low = quantize(v_old, self.bits, dim=-1)\n"
        "            self.k_groups.append((pack(k_codes, self.bits), k_scale, k_low))\n"
        "            self.v_groups.append((pack(v_codes, self.bits), v_scale, v_low))\n"
        "        keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)\n"
        "        values = torch.cat([self.read(g) for g in self.v_groups] + [self.v_recent], dim=-2)\n",
        False),
    # ---- section 8: fused attention --------------------------------------------------------------------
    "sdpa: is_causal=True in the real path": (
        "06_fused_attention.py",
        "attn_mask=causal_lower_right(q.shape[-2], k.shape[-2])",
        "is_causal=True",
        False),
    "sdpa: boolean mask passed as float (additive)": (
        "06_fused_attention.py",
        "return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)",
        "return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed.to(q.dtype))",
        False),
}


# Survivors: the notebook does not stop on these (without transformers). Strict xfail, so that a
# strengthened notebook must take them off this list. Before criterion 4 of section 4 (head by head),
# the RoPE formula check of section 5 and the half-step check of section 7, four mutations survived:
# keys tiled in the real path, the rotate_half sign flip, the frequencies without the factor 2, and the
# step (max - min) / 2^b. The first three were caught only by the Hugging Face cross-check.
NOT_YET_CAUGHT: set[str] = set()

# Swapping SwiGLU's gate and up projections gives a model of the same family: with random weights nothing
# inside the notebook can tell, only a referee with Llama's weight convention (the Llama cross-check of
# section 5, with transformers). Kept as a strict xfail without transformers: the limit, on record.
SEEN_ONLY_BY_THE_REFEREE = {"swiglu: gate and up swapped"}

# A mutation may stop the notebook with another error than an AssertionError when the failure is
# immediate and names the notebook's line: writing position 7 into slot 7 of a 7-slot ring fails torch's
# bounds check inside `RingKV.update`, before the slot layout asserted after the demo update can be read.
STOPPED_BY = {"ring: slot p % (slots + 1)": "IndexError"}


def section_texts() -> dict[str, str]:
    return {Path(entry).name: (FOLDER / entry).read_text(encoding="utf-8") for entry in manifest_sections(NOTEBOOK)}


def file_cells(text: str) -> list[str]:
    """The code cells of a section file's text, each padded with blank lines so that line numbers in a
    traceback are the file's."""
    headers = [i for i, line in enumerate(text.splitlines()) if line.startswith("# %%")]
    cells = jupytext.reads(text, fmt="py:percent").cells
    assert len(cells) == len(headers)
    padded = []
    for start, cell in zip(headers, cells):
        if cell.cell_type == "code":
            assert text.splitlines()[start + 1:start + 1 + len(cell.source.splitlines())] == cell.source.splitlines()
            padded.append("\n" * (start + 1) + cell.source)
    return padded


def mutated_cells(file: str, old: str, new: str) -> list[str]:
    text = section_texts()[file]
    assert text.count(old) == 1, f"{file}: the text to replace occurs {text.count(old)} times, not once: update the mutation"
    assert sum(old in c for c in file_cells(text)) == 1, f"{file}: the text to replace is not in a code cell"
    return file_cells(text.replace(old, new))


@contextmanager
def without_transformers():
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules) if name == "transformers" or name.startswith("transformers.")}
    sys.modules["transformers"] = None                                   # `import transformers` fails
    try:
        yield
    finally:
        del sys.modules["transformers"]
        sys.modules.update(hidden)


class Runner:
    """The unmutated notebook, run section by section in this process; forks a child per mutation."""

    def __init__(self, hf: bool, out_dir: Path):
        self.hf, self.out_dir = hf, out_dir
        self.cells = code_cells(NOTEBOOK, QUICK=True, OUTPUT_DIR=str(out_dir))
        self.files = [label for label, _ in self.cells if label not in (PRELUDE_NAME, INJECTED_NAME)]
        self.namespace: dict = {"__name__": "__notebook__"}
        self.next_cell = 0

    def advance_to(self, file: str) -> None:
        """Run the unmutated cells up to (not including) the first cell of `file`; start over if past it."""
        first = next(i for i, (label, _) in enumerate(self.cells) if label == file)
        if first < self.next_cell:
            self.namespace, self.next_cell = {"__name__": "__notebook__"}, 0
        while self.next_cell < first:
            label, cell = self.cells[self.next_cell]
            with without_transformers() if not self.hf and label == "01_setup_transformers.py" else nullcontext():
                exec(compile(cell.source, label, "exec", dont_inherit=True), self.namespace)
            self.next_cell += 1
        assert self.namespace["HAVE_HF"] is self.hf

    def run_mutated(self, file: str, cells: list[str]) -> dict:
        """Fork; the child runs the mutated `file` and every later cell. Returns how the child ended."""
        self.advance_to(file)
        texts = section_texts()
        order = list(texts)
        later = [(name, c) for name in order[order.index(file) + 1:] for c in file_cells(texts[name])]
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:                                                     # child
            os.close(read_end)
            report = {"outcome": "ran to the end"}
            try:
                sys.stdout = open(os.devnull, "w")
                for label, source in [(file, c) for c in cells] + later:
                    exec(compile(source, label, "exec", dont_inherit=True), self.namespace)
            except BaseException as error:                              # noqa: BLE001 - reported to the parent
                frames = traceback.extract_tb(error.__traceback__)
                notebook_frames = [f for f in frames if f.filename in set(self.files)]
                last = notebook_frames[-1] if notebook_frames else None
                report = {"outcome": type(error).__name__, "message": str(error)[:300],
                          "raised_in_notebook": bool(frames) and frames[-1].filename in set(self.files),
                          "where": f"{last.filename}:{last.lineno}" if last else None}
            finally:
                with os.fdopen(write_end, "wb") as pipe:
                    pickle.dump(report, pipe)
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            ready, _, _ = select.select([pipe], [], [], CHILD_TIMEOUT_S)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"outcome": "timeout"}
            report = pickle.load(pipe)
        os.waitpid(pid, 0)
        return report


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    made: dict[bool, Runner] = {}

    def get(hf: bool) -> Runner:
        if hf not in made:
            made[hf] = Runner(hf, tmp_path_factory.mktemp(f"mutations_hf_{hf}"))
        return made[hf]
    return get


def test_the_unmutated_notebook_runs_to_the_end_in_the_child(runners):
    """The control: the runner and the fork change nothing; from the earliest fork point, the child
    runs every later section to the end (without transformers)."""
    order = [Path(entry).name for entry in manifest_sections(NOTEBOOK)]
    first = min((file for file, _, _, _ in MUTATIONS.values()), key=order.index)
    cells = file_cells(section_texts()[first])
    assert runners(False).run_mutated(first, cells) == {"outcome": "ran to the end"}


def cases():
    order = [Path(entry).name for entry in manifest_sections(NOTEBOOK)]
    for hf in (False, True):
        for name, (file, _, _, needs_hf) in sorted(MUTATIONS.items(), key=lambda item: order.index(item[1][0])):
            if hf and not needs_hf:
                continue
            marks = [pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed")] if hf else []
            if name in NOT_YET_CAUGHT and not hf:
                marks.append(pytest.mark.xfail(strict=True, reason="survives: the notebook cannot see it yet"))
            if name in SEEN_ONLY_BY_THE_REFEREE and not hf:
                marks.append(pytest.mark.xfail(strict=True, reason="only the Hugging Face referee can see it"))
            yield pytest.param(name, hf, id=f"{name} [{'with' if hf else 'without'} transformers]", marks=marks)


@pytest.mark.parametrize("name, hf", list(cases()))
def test_injected_bug_stops_the_notebook(runners, name, hf):
    file, old, new, _ = MUTATIONS[name]
    report = runners(hf).run_mutated(file, mutated_cells(file, old, new))
    print(name, report)
    assert report["outcome"] == STOPPED_BY.get(name, "AssertionError") and report["raised_in_notebook"], report


