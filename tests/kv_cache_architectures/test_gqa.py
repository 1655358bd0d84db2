"""Section 4's pieces on inputs the notebook does not try: the attention functions, the generalized decoder,
its cache, and the cached-versus-full check."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch


def test_the_decoder_builds_on_the_first_notebooks_pieces(nb):
    """ArchConfig has the shared DecoderConfig's sizes and defaults; a GPT-2-shaped layer uses the shared GELU MLP and
    LayerNorm."""
    sizes = [f.name for f in dataclasses.fields(nb["DecoderConfig"])]
    assert all(getattr(nb["ArchConfig"](), name) == getattr(nb["DecoderConfig"](), name) for name in sizes)
    assert nb["ArchConfig"](width=96, heads=3).head_dim == nb["DecoderConfig"](width=96, heads=3).head_dim == 32
    block = nb["build"](nb["ArchConfig"](kv_heads=2)).blocks[0]
    assert type(block.mlp) is nb["MLP"] and type(block.ln_1) is torch.nn.LayerNorm


@pytest.mark.parametrize("past, new", [(0, 1), (0, 7), (3, 1), (9, 4), (17, 6)])
def test_the_position_mask_is_the_offset_mask(nb, past, new):
    assert torch.equal(nb["causal"](past + torch.arange(new), torch.arange(past + new)), nb["causal_mask"](past, new))


def test_split_and_merge_heads_are_inverse(nb):
    x = torch.randn(3, 5, 4 * 6)
    heads = nb["split_heads"](x, 4)
    assert heads.shape == (3, 4, 5, 6) and torch.equal(nb["merge_heads"](heads), x)
    assert torch.equal(heads[:, 2], x[..., 12:18])


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_cache_holds_kv_heads_not_query_heads(nb, kv_heads):
    net = nb["build"](nb["ArchConfig"](kv_heads=kv_heads))
    with torch.inference_mode():
        _, cache = net(nb["STREAM"][:, :7])
    assert all(tuple(c.k.shape) == tuple(c.v.shape) == (2, kv_heads, 7, 16) for c in cache)
    assert all(c.positions.tolist() == list(range(7)) and c.seen == 7 for c in cache)


def test_grouping_matches_a_per_head_loop(nb):
    """An independent reference: query head h attends with K/V head h // groups, head by head."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 6, 5, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    allowed = nb["causal_mask"](0, 5)
    fused = nb["softmax_attention"](q, k, v, allowed)
    for h in range(6):
        scores = q[0, h] @ k[0, h // 3].T / math.sqrt(16)
        expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v[0, h // 3]
        torch.testing.assert_close(fused[0, h], expected)


def test_tiling_and_interleaving_differ_only_with_real_groups(nb):
    for kv_heads, heads in ((1, 6), (6, 6)):
        x = torch.arange(kv_heads).view(1, kv_heads, 1, 1)
        assert torch.equal(nb["repeat_kv"](x, heads // kv_heads), nb["tile_kv"](x, heads // kv_heads))
    three = torch.arange(3).view(1, 3, 1, 1)
    assert nb["repeat_kv"](three, 2).flatten().tolist() == [0, 0, 1, 1, 2, 2]
    assert nb["tile_kv"](three, 2).flatten().tolist() == [0, 1, 2, 0, 1, 2]


def test_fresh_gqa_model_with_another_seed_and_odd_chunks(nb):
    build = lambda: nb["build"](nb["ArchConfig"](kv_heads=2), seed=7)
    assert nb["check_cached"](build, 2, [3, 7, 1, 13], torch.float64)["passed"]


def test_check_cached_fails_for_a_model_whose_cache_forgets(nb):
    """The harness of every criterion can fail: a cache that drops the oldest position is not exact."""
    class Forgetful(nb["FullKV"]):
        def update(self, k, v, positions):
            keys, values, key_pos = super().update(k, v, positions)
            return keys[:, :, 1:], values[:, :, 1:], key_pos[1:]

    class ForgetfulAttention(nb["Attention"]):
        def new_cache(self, caches):
            return Forgetful()

    config = nb["ArchConfig"](kv_heads=2)
    assert not nb["check_cached"](lambda: nb["build"](config, lambda i: ForgetfulAttention(config)), 1, 3)["passed"]


def test_the_real_layer_equals_the_head_loop_for_another_seed_and_chunk(nb):
    attn = nb["build"](nb["ArchConfig"](kv_heads=1), seed=3).double().blocks[0].attn
    x = torch.randn(1, 11, 64, dtype=torch.float64)
    torch.testing.assert_close(nb["layer_in_chunks"](attn, x, chunk=3), nb["heads_by_loop"](attn, x), atol=1e-10, rtol=0)


def test_controls_record_what_they_caught(nb):
    """A negative control's record: measured by its check, and caught."""
    control = nb["CONTROLS"]["tiled_kv_heads"]
    assert control["cached_vs_full_passed"] is True and control["caught"] is True and control["measured"] > 1e-2
