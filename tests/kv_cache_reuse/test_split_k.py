"""Section 7: split-K attention and its merge."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("splits", [1, 2, 5, 13, 40])
def test_split_k_equals_plain_attention_on_random_shapes(nb, splits):
    gen = torch.Generator().manual_seed(splits)
    q = torch.randn(3, 2, 1, 8, generator=gen, dtype=torch.float64)
    k, v = torch.randn(2, 3, 2, 40, 8, generator=gen, dtype=torch.float64)
    allowed = torch.rand(3, 1, 1, 40, generator=gen) < 0.7
    allowed[..., 0] = True
    ours = nb["split_k_attention"](q, k, v, allowed, splits)
    assert torch.allclose(ours, nb["masked_attention"](q, k, v, allowed), atol=1e-12, rtol=1e-12)


def test_merging_in_two_steps_or_in_another_order_gives_the_same_output(nb):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 1, 1, 4, generator=gen, dtype=torch.float64)
    k, v = torch.randn(2, 1, 1, 30, 4, generator=gen, dtype=torch.float64)
    allowed = torch.ones(1, 1, 1, 30, dtype=torch.bool)
    parts = [nb["attend_split"](q, ks, vs, a) for ks, vs, a in zip(k.tensor_split(6, -2), v.tensor_split(6, -2), allowed.tensor_split(6, -1))]
    merge = nb["merge_splits"]
    once = merge(*zip(*parts))
    # A merged group reports its own (output, maximum, sum), so merging is associative.
    def group(ps):
        o, m, l = zip(*ps)
        top = torch.stack(m).amax(0)
        total = sum(li * torch.exp(mi - top) for mi, li in zip(m, l))
        return merge(o, m, l), top, total
    twice = merge(*zip(group(parts[:2]), group(parts[2:])))
    reversed_order = merge(*zip(*reversed(parts)))
    assert torch.allclose(once, twice, atol=1e-14) and torch.allclose(once, reversed_order, atol=1e-14)


def test_a_fully_masked_split_weighs_nothing(nb):
    q = torch.ones(1, 1, 1, 2)
    k, v = torch.ones(2, 1, 1, 3, 2)
    o, m, l = nb["attend_split"](q, k, v, torch.zeros(1, 1, 1, 3, dtype=torch.bool))
    assert torch.equal(o, torch.zeros_like(o)) and torch.isinf(m).all() and (l == 0).all()


def test_the_grid_and_the_control(nb):
    rows, control = nb["SPLIT_K"], nb["SPLIT_K_CONTROL"]
    assert [r["splits"] for r in rows] == list(nb["SPLIT_COUNTS"]) and rows[-1]["splits"] == nb["SPLIT_KEYS"]
    assert rows[-1]["fully_masked"] == nb["SPLIT_PADDING"] and rows[0]["fully_masked"] == 0
    assert all(r["fp32"]["close"] and r["fp64"]["close"] and r["decoder"]["close"] for r in rows)
    assert all(r["fp64"]["max_abs_err"] < 1e-13 for r in rows)
    assert nb["SPLIT_K_CAUGHT"] == {n: n > 1 for n in nb["SPLIT_COUNTS"]}
    assert all(c["fp32"]["max_abs_err"] > 1e-2 for c in control[1:])
