"""Section 7: KIVI-style quantized caches."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_pack_unpack_round_trip(nb, bits):
    codes = torch.randint(0, 2 ** bits, (2, 3, 5, 16)).to(torch.uint8)
    packed = nb["pack"](codes, bits)
    assert packed.dtype == torch.uint8 and packed.shape[-1] == 16 * bits // 8
    assert torch.equal(nb["unpack"](packed, bits), codes)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantization_error_is_at_most_half_a_step(nb, bits):
    x = torch.randn(1, 2, 8, 16, dtype=torch.float64)
    for dim in (-1, -2):
        codes, scale, low = nb["quantize"](x, bits, dim)
        assert int(codes.max()) <= 2 ** bits - 1
        assert ((nb["dequantize"](codes, scale, low) - x).abs() <= scale / 2 + 1e-12).all()


def test_exact_while_the_window_covers_the_sequence(nb):
    assert nb["QUANT_EXACT_WINDOW"] == {2: True, 4: True, 8: True}


def test_bounds_hold_and_error_falls_with_bits(nb):
    quant, bounds = nb["QUANT"], nb["BOUNDS"]
    for bits, bound in bounds.items():
        assert quant[bits]["max_abs_logit_err"] < bound["max_abs_logit_err"]
        assert quant[bits]["agreement"] >= bound["min_agreement"]
    assert quant[2]["max_abs_logit_err"] > quant[4]["max_abs_logit_err"] > quant[8]["max_abs_logit_err"] > 0
    assert all(len(r["per_step_max_abs_logit_err"]) == 64 for r in quant.values())
    assert all(e == 0 for r in quant.values() for e in r["per_step_max_abs_logit_err"][:9])
    assert all(r["per_step_max_abs_logit_err"][9] > 0 for r in quant.values())


def test_memory_formula_equals_measured(nb):
    memory = nb["QUANT_MEMORY"]
    for bits in (2, 4, 8):
        assert memory[f"int{bits}_bytes"] == nb["quant_bytes"](79, bits, nb["LLAMA_CFG"]) < memory["exact_bytes"]
    assert memory["int2_bytes"] < memory["int4_bytes"] < memory["int8_bytes"]


def test_dropped_scale_breaks_the_bound(nb):
    assert nb["DROPPED_SCALE"]["max_abs_logit_err"] > nb["BOUNDS"][8]["max_abs_logit_err"]


def test_stored_groups_do_not_depend_on_chunking(nb):
    """Groups start at multiples of G whatever the chunks: the stored codes and scales are the same."""
    ids = nb["STREAM"][:1]
    _, one = nb["run_chunked"](nb["build_quant"](4), ids, [24])
    _, stepwise = nb["run_chunked"](nb["build_quant"](4), ids, 1)
    for a, b in zip(one, stepwise):
        assert a.quantized_positions() == b.quantized_positions() == 8
        for group_a, group_b in zip(a.k_groups + a.v_groups, b.k_groups + b.v_groups):
            assert torch.equal(group_a[0], group_b[0])
            torch.testing.assert_close(group_a[1], group_b[1], atol=1e-6, rtol=1e-5)


def test_a_call_reads_its_own_new_keys_in_full_precision(nb):
    """A 24-token prefill quantizes the first group only after its attention: logits exact."""
    ids = nb["STREAM"][:1]
    with torch.inference_mode():
        quant_logits, cache = nb["build_quant"](2)(ids)
        exact_logits, _ = nb["build_rope"]()(ids)
    assert cache[0].quantized_positions() == 8 and torch.equal(quant_logits, exact_logits)


def test_every_value_comes_back_within_half_a_step(nb):
    trip = nb["QUANT_ROUND_TRIP"]
    assert len(trip) == 7 and trip["dropped_scale_control"] > 0.5
    assert all(0.4 < error <= 0.5 + 1e-9 for name, error in trip.items() if name != "dropped_scale_control")
