"""Section 7's pieces on new inputs: packing, the quantizer, the quantized cache and its byte formula."""

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
    x = 3 * torch.randn(2, 3, 8, 32, dtype=torch.float64)
    for dim in (-1, -2):
        codes, scale, low = nb["quantize"](x, bits, dim)
        assert int(codes.max()) <= 2 ** bits - 1
        assert ((nb["dequantize"](codes, scale, low) - x).abs() <= scale / 2 + 1e-12).all()


def test_stored_groups_do_not_depend_on_chunking(nb):
    """Groups start at multiples of G whatever the chunks: the stored codes and scales are the same."""
    ids = nb["STREAM"][:1]
    _, one = nb["run_chunked"](nb["quant_model"](4), ids, [24])
    _, stepwise = nb["run_chunked"](nb["quant_model"](4), ids, 1)
    for a, b in zip(one, stepwise):
        assert a.quantized_positions() == b.quantized_positions() == 8
        for group_a, group_b in zip(a.k_groups + a.v_groups, b.k_groups + b.v_groups):
            assert torch.equal(group_a[0], group_b[0])
            torch.testing.assert_close(group_a[1], group_b[1], atol=1e-6, rtol=1e-5)


def test_a_call_reads_its_own_new_keys_in_full_precision(nb):
    """A 24-token prefill quantizes the first group only after its attention: logits bit for bit exact."""
    ids = nb["STREAM"][:1]
    with torch.inference_mode():
        quant_logits, cache = nb["quant_model"](2)(ids)
        exact_logits, _ = nb["build"](nb["LLAMA_CFG"])(ids)
    assert cache[0].quantized_positions() == 8 and torch.equal(quant_logits, exact_logits)


@pytest.mark.parametrize("length", [5, 24, 31, 40])
def test_quant_bytes_formula_for_other_lengths(nb, length):
    ids = torch.randint(0, 97, (1, length), generator=torch.Generator().manual_seed(length))
    _, cache = nb["run_chunked"](nb["quant_model"](2), ids, 3)
    assert sum(c.nbytes() for c in cache) == nb["quant_bytes"](length, 2, nb["LLAMA_CFG"])
