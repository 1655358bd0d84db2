"""The decoder, the helpers and the equivalence check, called on new inputs (not the notebook's own).

The notebook shows one check per claim; the properties below are the helpers' contract, which it no longer
asserts in view: the setup, seed determinism, the model's settings, GELU on a grid, the equivalence grid on
other weights and streams.
"""

from __future__ import annotations

import math

import pytest
import torch


def fresh_model(nb, seed=None, **hooks):
    """A new decoder from a seed (the notebook's by default); hooks (positions_fn / mask_fn) go in through the constructor."""
    torch.manual_seed(nb["SEED"] if seed is None else seed)
    return nb["CacheDecoder"](nb["DecoderConfig"](), **hooks).eval()


def new_stream(nb, rows=2, length=24, seed=101):
    return torch.randint(0, nb["cfg"].vocab, (rows, length), generator=torch.Generator().manual_seed(seed))


def test_setup_pins_one_thread_fp32_cpu(nb):
    assert nb["ENVIRONMENT"]["threads"] == 1 == torch.get_num_threads()
    assert torch.get_default_dtype() == torch.float32 and torch.get_default_device().type == "cpu"


def test_helpers_tolerance_and_errors(nb):
    close, max_abs_err, tol = nb["close"], nb["max_abs_err"], nb["TOLERANCE"]
    a = torch.ones(3)
    assert close(a, a + 0.5 * tol[torch.float32]) and not close(a, a + 10 * tol[torch.float32])
    assert not close(a, torch.ones(4)) and not close(a, torch.tensor([1.0, 1.0, float("nan")]))
    assert max_abs_err(a, a - 0.25) == 0.25 and max_abs_err(torch.empty(0), torch.empty(0)) == 0.0
    assert nb["kv_bytes_per_token"](32, 8, 128, 2) == 131_072


def test_decoder_settings(nb):
    cfg, model = nb["DecoderConfig"](), fresh_model(nb)
    assert (cfg.vocab, cfg.width, cfg.heads, cfg.head_dim, cfg.layers, cfg.mlp, cfg.max_positions) == (97, 64, 4, 16, 2, 256, 512)
    assert not model.training and model.ln_f.eps == 1e-5 and model.lm_head.bias is None
    assert model.lm_head.weight.data_ptr() != model.wte.weight.data_ptr()
    assert all(block.mlp.act.approximate == "none" for block in model.blocks)
    assert not any(isinstance(module, torch.nn.Dropout) for module in model.modules())


@pytest.mark.parametrize("config", [{}, {"vocab": 50, "width": 48, "heads": 3, "layers": 3, "mlp": 80, "max_positions": 64}])
def test_parameter_count(nb, config):
    cfg = nb["DecoderConfig"](**config)
    model = nb["build_model"](3, cfg)
    assert sum(p.numel() for p in model.parameters()) == nb["parameter_formula"](cfg)
    if not config:
        assert nb["parameter_formula"](cfg) == nb["N_PARAMS"] == 145_280


def test_same_seed_same_weights_other_seed_other_weights(nb):
    a, b, c = nb["build_model"](7), nb["build_model"](7), nb["build_model"](8)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_gelu_is_exact_on_a_grid(nb):
    grid = torch.linspace(-6, 6, 241)
    act = fresh_model(nb).blocks[1].mlp.act
    torch.testing.assert_close(act(grid), 0.5 * grid * (1 + torch.erf(grid / math.sqrt(2))))


@pytest.mark.parametrize("tokens, cached", [(1, 0), (5, 0), (7, 3), (9, 8)])
def test_block_matches_the_functional_reference(nb, tokens, cached):
    """Every block of a fresh model, with and without a cache, against the notebook's `reference_block`
    (on inputs the notebook does not use); with the tanh GELU the reference must differ."""
    model, close = fresh_model(nb), nb["close"]
    x = torch.randn(2, tokens, 64, generator=torch.Generator().manual_seed(tokens))
    with torch.inference_mode():
        for block in model.blocks:
            reference = nb["reference_block"](block, x)
            past = block(x[:, :cached], nb["causal_mask"](0, cached))[1] if cached else None
            ours = block(x[:, cached:], nb["causal_mask"](cached, tokens - cached), past)[0]
            assert close(ours, reference[:, cached:])
            assert not close(block(x, nb["causal_mask"](0, tokens))[0], nb["reference_block"](block, x, gelu="tanh"))


def test_forward_api_and_shapes(nb):
    model = nb["model"]
    with torch.inference_mode():
        ids = torch.tensor([[12, 7, 31, 4, 9, 18], [1, 2, 3, 4, 5, 6]])
        logits, cache = model(ids[:, :4])
        assert logits.shape == (2, 4, 97) and len(cache) == 2
        logits, cache2 = model(ids[:, 4:], cache)
        assert logits.shape == (2, 2, 97)
        assert all(k.shape == v.shape == (2, 4, 6, 16) for k, v in cache2)
        assert all(k.shape == (2, 4, 4, 16) for k, _ in cache)   # the old list is untouched


def test_forward_refuses_a_cache_of_the_wrong_depth_and_positions_past_the_table(nb):
    model = nb["model"]
    with torch.inference_mode():
        _, cache = model(torch.tensor([[1, 2, 3]]))
        with pytest.raises(AssertionError):
            model(torch.tensor([[4]]), cache[:1])
        with pytest.raises(AssertionError):
            model(torch.zeros(1, 513, dtype=torch.long))


def test_masks(nb):
    causal_mask, local = nb["causal_mask"], nb["local_triangle_mask"]
    for past, new in ((0, 1), (0, 7), (3, 1), (10, 3), (5, 5)):
        mask = causal_mask(past, new)
        assert mask.shape == (new, past + new)
        assert mask.sum(-1).tolist() == [past + i + 1 for i in range(new)]
        assert local(past, new).sum(-1).tolist() == [i + 1 for i in range(new)]
    # one new token: the offset mask lets it read every key, the triangle key 0 only
    assert all(causal_mask(p, 1).all() and local(p, 1).tolist() == [[True] + [False] * p] for p in range(1, 30))
    assert nb["absolute_positions"](10, 3).tolist() == [10, 11, 12]


def test_masked_attention_matches_sdpa_lower_right(nb):
    from torch.nn.attention.bias import causal_lower_right
    gen = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(2, 3, 4, 8, generator=gen), torch.randn(2, 3, 9, 8, generator=gen), torch.randn(2, 3, 9, 8, generator=gen)
    ours = nb["masked_attention"](q, k, v, nb["causal_mask"](5, 4))
    torch.testing.assert_close(ours, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(4, 9)))


def test_chunk_lengths(nb):
    assert nb["chunk_lengths"](24, 5) == [5, 5, 5, 5, 4]
    assert nb["chunk_lengths"](24, 1) == [1] * 24
    assert nb["chunk_lengths"](6, [4, 2]) == [4, 2]
    with pytest.raises(AssertionError):
        nb["chunk_lengths"](6, [4, 1])


def test_with_dtype_copies_the_same_weights(nb):
    model = nb["model"]
    fp64 = nb["with_dtype"](model, torch.float64)
    assert nb["with_dtype"](model, torch.float32) is model
    assert all(fp64.state_dict()[name].dtype == torch.float64 and torch.equal(fp64.state_dict()[name], w.double())
               for name, w in model.state_dict().items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [1, 3, [10, 1, 13]])
def test_other_weights_and_streams_pass(nb, dtype, chunk):
    result = nb["check_equivalence"](fresh_model(nb, seed=42), new_stream(nb), 2, chunk, dtype)
    assert result["passed"] and result["cache_unchanged"], result
    assert result["max_abs_logit_err"] <= nb["TOLERANCE"][dtype]


def test_causality_on_other_weights(nb):
    assert nb["check_causality"](fresh_model(nb, seed=42), new_stream(nb))["passed"]
