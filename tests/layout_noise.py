"""A perturbation mode that shows, on any CPU, where a notebook relies on rounding it does not control.

On a real machine the same floating-point computation can round differently when its inputs have
another layout or shape: a matrix multiply picks its blocking and summation order by shape, strides and
alignment (MKL on an AMD EPYC rounds `q @ k.T` differently for a transposed view and for its contiguous
copy at some lengths, and not on an Intel Xeon). A notebook that asserts bit-for-bit equality between
two such computations passes on one machine and fails on the next.

`LayoutNoise` is a `torch.overrides.TorchFunctionMode` that makes every such difference visible
everywhere. It intercepts the floating-point kernels whose rounding may depend on layout and shape
(`PERTURBED`: products, attention, softmax and normalizations, reductions)
and multiplies each floating result by `1 + k * eps(dtype)`, with `k` in -2..2 derived from a hash of
the call: the operation, and for each tensor argument its dtype, shape, strides and `data_ptr() % 64`
(PyTorch's CPU allocator aligns every fresh tensor to 64 bytes), and nothing else. So:

- the same call on the same inputs gives the same bits, as on any real machine (determinism);
- data movement (copy, view, index, gather/scatter, cat, clone) and integer or boolean results are
  never touched;
- two different paths to "the same" number (a view and a copy, 5 rows and 8, batch 1 and batch 2)
  usually get different factors, and then differ in the last bits, as they may on a reader's CPU.

An assertion of exact equality that survives a run under this mode holds by construction; one that
fails would fail on some machine. See docs/exact-equality.md.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

Tensor = torch.Tensor

# Canonical name of every intercepted callable. Aliases share a name, so that `x @ w`, `x.matmul(w)` and
# `torch.matmul(x, w)` on the same inputs are the same call.
PERTURBED: dict[object, str] = {}
for _name, _callables in {
    # Products: blocking, summation order and vector width are chosen by shape, strides and alignment.
    "matmul": (torch.matmul, Tensor.matmul, Tensor.__matmul__),
    "mm": (torch.mm, Tensor.mm),
    "mv": (torch.mv, Tensor.mv),
    "bmm": (torch.bmm, Tensor.bmm),
    "baddbmm": (torch.baddbmm, Tensor.baddbmm),
    "addmm": (torch.addmm, Tensor.addmm),
    "addbmm": (torch.addbmm, Tensor.addbmm),
    "linear": (F.linear,),
    "einsum": (torch.einsum,),
    "sdpa": (F.scaled_dot_product_attention,),
    # Normalizations and reductions: sums along a row, in an order the kernel picks.
    "softmax": (torch.softmax, Tensor.softmax, F.softmax),
    "log_softmax": (torch.log_softmax, Tensor.log_softmax, F.log_softmax),
    "layer_norm": (F.layer_norm,),
    "rms_norm": (F.rms_norm,),
    "sum": (torch.sum, Tensor.sum),
    "mean": (torch.mean, Tensor.mean),
    "norm": (torch.norm, Tensor.norm, torch.linalg.vector_norm),
    "cumsum": (torch.cumsum, Tensor.cumsum),
}.items():
    for _callable in _callables:
        PERTURBED[_callable] = _name

# Element-wise functions (exp, erf, GELU, cos, ...) are left alone: they compute each element on its own,
# with no sum whose order a kernel could choose. So are products whose inner dimension is 1 (an outer
# product, such as positions times frequencies): each result is one rounded multiplication. The position of
# the matrix whose last dimension is summed over, for each product:
CONTRACTED_ARGUMENT = {"matmul": 0, "mm": 0, "mv": 0, "bmm": 0, "linear": 0, "baddbmm": 1, "addmm": 1, "addbmm": 1}

STEPS = (-2, -1, 0, 1, 2)


def layouts(value) -> list:
    """What a kernel's rounding may depend on, for each tensor in an argument: dtype, shape, strides and
    alignment. Other arguments are left out, so that `F.gelu(x)` and `F.gelu(x, approximate="none")`
    are the same call."""
    if isinstance(value, Tensor):
        try:
            alignment = value.data_ptr() % 64
        except RuntimeError:                      # a tensor subclass without storage (CausalBias)
            alignment = None
        return [(type(value).__name__, str(value.dtype), tuple(value.shape), tuple(value.stride()), alignment)]
    if isinstance(value, (list, tuple)):
        return [key for v in value for key in layouts(v)]
    return []


def step_of(name: str, args: tuple, kwargs: dict) -> int:
    """k in -2..2 for this call: a pure function of the operation and its tensors' layouts (0 for a product
    that sums nothing)."""
    position = CONTRACTED_ARGUMENT.get(name)
    if position is not None and len(args) > position and isinstance(args[position], Tensor) and args[position].shape[-1:] == (1,):
        return 0
    key = (name, layouts(args), sorted((k, layouts(v)) for k, v in kwargs.items() if layouts(v)))
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return STEPS[int.from_bytes(digest, "little") % len(STEPS)]


def perturbed(result, step: int):
    """Floating tensors in `result` times 1 + step * eps(dtype); anything else unchanged."""
    if isinstance(result, Tensor) and result.is_floating_point() and step:
        return result * (1 + step * torch.finfo(result.dtype).eps)
    if isinstance(result, tuple) and not hasattr(result, "_fields") and step:
        parts = tuple(perturbed(r, step) for r in result)
        return parts if any(p is not r for p, r in zip(parts, result)) else result
    return result


class LayoutNoise(TorchFunctionMode):
    """Within `with LayoutNoise():`, layout- and shape-dependent kernels round as a different CPU might.

    `calls` counts the intercepted calls by name and `changed` those whose floating result was
    perturbed, so a test can check that the mode is not a no-op.
    """

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}
        self.changed: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = PERTURBED.get(func)
        if name is None:
            return result
        step = step_of(name, args, kwargs)
        self.calls[name] = self.calls.get(name, 0) + 1
        noisy = perturbed(result, step)
        if noisy is not result:
            self.changed[name] = self.changed.get(name, 0) + 1
        return noisy
