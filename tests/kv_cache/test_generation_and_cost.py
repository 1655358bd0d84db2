"""Greedy generation with and without the cache, the multiply-add formulas against executed shapes, and the
K/V size formula, on new inputs and other configurations."""

from __future__ import annotations

import pytest
import torch

from .test_model_and_checks import fresh_model, new_stream

# MACs of one cached decode step at T = 256, by hand (width 64, MLP 256, vocabulary 97, 2 layers): per layer
# the Q, K, V and output projections, the MLP, and QK^T and AV over 256 keys; then the vocabulary head.
CACHED_STEP_MACS = 2 * (4 * 64 * 64 + 2 * 64 * 256 + 2 * 256 * 64) + 64 * 97   # 170_048


def test_generation_from_new_prompts_agrees(nb):
    model, prompts = fresh_model(nb, seed=9), new_stream(nb, length=6, seed=3)
    cached, cached_logits = nb["greedy_generate"](model, prompts, 25, use_cache=True)
    full, full_logits = nb["greedy_generate"](model, prompts, 25, use_cache=False)
    result = nb["compare_generations"](cached, cached_logits, full, full_logits)
    assert cached.shape == full.shape == (2, 25) and result["tokens_equal"] and result["logits_close"]
    # the greedy choice really is the argmax of the logits the loop returns
    assert torch.equal(cached_logits.argmax(-1), cached)


@pytest.mark.parametrize("variant", ["restart_positions", "local_triangle_mask", "no_mask_with_cache"])
def test_generation_comparison_catches_broken_variants(nb, variant):
    broken = fresh_model(nb, **nb["VARIANTS"][variant])
    cached, cached_logits = nb["greedy_generate"](broken, nb["GEN_PROMPTS"], 10, use_cache=True)
    full, full_logits = nb["greedy_generate"](fresh_model(nb), nb["GEN_PROMPTS"], 10, use_cache=False)
    result = nb["compare_generations"](cached, cached_logits, full, full_logits)
    if variant == "no_mask_with_cache":        # one new token per step: this bug stays hidden, as in section 7
        assert result["logits_close"]
    else:
        assert not result["logits_close"]


@pytest.mark.parametrize("T", [1, 2, 17, 100, 300])
def test_macs_formula_equals_count_default_config(nb, T):
    model, cfg = nb["model"], nb["cfg"]
    ids = torch.randint(0, cfg.vocab, (1, T), generator=torch.Generator().manual_seed(T))
    full = nb["counted_macs"](lambda: model(ids))
    assert full == nb["with_total"](nb["full_step_macs"](cfg, T))
    if T > 1:
        with torch.inference_mode():
            _, past = model(ids[:, :-1])
        cached = nb["counted_macs"](lambda: model(ids[:, -1:], past))
        assert cached == nb["with_total"](nb["cached_step_macs"](cfg, T))
        assert full["total"] == T * cached["total"]


def test_macs_formula_equals_count_other_config(nb):
    cfg = nb["DecoderConfig"](vocab=50, width=48, heads=3, layers=3, mlp=80, max_positions=64)
    model = nb["build_model"](1, cfg)
    ids = torch.randint(0, cfg.vocab, (1, 20), generator=torch.Generator().manual_seed(0))
    assert nb["counted_macs"](lambda: model(ids)) == nb["with_total"](nb["full_step_macs"](cfg, 20))
    with torch.inference_mode():
        _, past = model(ids[:, :15])
    # a chunk of 5 new tokens reading 20 keys: the general formula step_macs(c, total, new)
    assert nb["counted_macs"](lambda: model(ids[:, 15:], past)) == nb["with_total"](nb["step_macs"](cfg, 20, 5))


def test_lean_full_step_is_below_the_naive_one_and_above_the_cached_one(nb):
    cfg = nb["cfg"]
    for T in (2, 16, 256, 512):
        lean, naive, cached = (nb["lean_full_step_macs"](cfg, T), sum(nb["full_step_macs"](cfg, T).values()),
                               sum(nb["cached_step_macs"](cfg, T).values()))
        assert cached < lean < naive and lean / cached < T
    assert nb["lean_full_step_macs"](cfg, 1) == sum(nb["cached_step_macs"](cfg, 1).values())


def test_hidden_state_cache_same_logits_and_extra_macs(nb):
    model, cfg = nb["model"], nb["cfg"]
    ids = torch.randint(0, cfg.vocab, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        _, kv_past = model(ids[:, :-1])
        kv_logits, _ = model(ids[:, -1:], kv_past)
    _, x_past = nb["hidden_state_forward"](model, ids[:, :-1])
    x_logits, _ = nb["hidden_state_forward"](model, ids[:, -1:], x_past)
    torch.testing.assert_close(x_logits, kv_logits, atol=1e-5, rtol=1e-5)
    counted = nb["counted_macs"](lambda: nb["hidden_state_forward"](model, ids[:, -1:], x_past))["total"]
    expected = nb["with_total"](nb["cached_step_macs"](cfg, 40))["total"] + nb["hidden_state_extra_macs"](cfg, 40)
    assert counted == expected
    assert nb["hidden_state_extra_macs"](cfg, 256) + CACHED_STEP_MACS == CACHED_STEP_MACS + 2 * 255 * 2 * 64 * 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_kv_bytes_per_token_formula_on_our_config(nb, dtype):
    cfg = nb["cfg"]
    model = nb["with_dtype"](nb["model"], dtype)
    with torch.inference_mode():
        _, cache = model(torch.arange(37)[None] % cfg.vocab)
    size = torch.empty((), dtype=dtype).element_size()
    assert nb["cache_bytes"](cache) == 37 * nb["kv_bytes_per_token"](cfg.layers, cfg.heads, cfg.head_dim, size)


def test_published_kv_table(nb):
    table = {row["name"]: row for row in nb["KV_TABLE"]}
    assert table["GPT-2 (124M)"]["fp16_bytes_per_token"] == 2 * 12 * 12 * 64 * 2 == 36_864
    assert table["Llama 2 7B"]["fp16_bytes_per_token"] == 2 * 32 * 32 * 128 * 2 == 524_288
    assert table["Llama 3.1 8B"]["fp16_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131_072
    assert table["Llama 3.1 8B"]["fp16_bytes_per_context"]["4096"] == 512 * 2**20
    assert table["Llama 3.1 8B"]["fp16_bytes_per_context"]["32768"] == 4 * 2**30
    for row in nb["KV_TABLE"][1:]:
        assert str(row["layers"]) in row["source"] and str(row["kv_heads"]) in row["source"]


def test_binary_size(nb):
    size = nb["binary_size"]
    assert (size(512), size(36_864), size(4 * 2**30), size(1_207_959_552)) == ("512 B", "36 KiB", "4 GiB", "1.125 GiB")
