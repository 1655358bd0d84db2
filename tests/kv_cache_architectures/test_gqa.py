"""Section 4: grouped-query and multi-query attention."""

from __future__ import annotations

import math

import pytest
import torch


def test_mha_setting_reproduces_the_first_notebooks_decoder(nb):
    """Within the FP32 tolerance everywhere; bit for bit where it holds by construction (layer 0's cache)."""
    same = nb["MHA_SAME"]
    assert list(same) == ["full_logits", "cached_logits", "layer0_k", "layer0_v", "layer1_k", "layer1_v"]
    assert all(r["close"] and r["max_abs_err"] <= 1e-5 for r in same.values())
    assert same["layer0_k"]["bit_exact"] and same["layer0_v"]["bit_exact"]


def test_the_layout_demo_covers_every_length(nb):
    assert list(nb["LAYOUT_DIFF"]) == list(range(1, 25))
    assert nb["LAYOUT"]["lengths_differing"] == [t for t, d in nb["LAYOUT_DIFF"].items() if d > 0]
    assert all(d <= 1e-4 for d in nb["LAYOUT_DIFF"].values())


def test_the_decoder_is_reused_not_copied(nb):
    """The generalized config builds on the shared DecoderConfig; the GELU MLP is the shared class."""
    assert issubclass(nb["ArchConfig"], nb["DecoderConfig"])
    block = nb["build_arch"](nb["ArchConfig"](kv_heads=2)).blocks[0]
    assert type(block.mlp) is nb["MLP"]


@pytest.mark.parametrize("name", ["gqa2", "mqa"])
def test_cached_equals_full_on_the_twelve_configurations(nb, name):
    rows = nb["GQA_GRIDS"][name]
    assert len(rows) == 12 and all(r["passed"] and r["kv_shape_ok"] for r in rows)
    assert {(r["batch"], r["chunk"], r["dtype"]) for r in rows} == {
        (b, c, d) for b in (1, 2) for c in (1, 2, 5) for d in ("fp32", "fp64")}
    assert max(r["max_abs_logit_err"] for r in rows if r["dtype"] == "fp64") < 1e-12


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_cache_holds_kv_heads_not_query_heads(nb, kv_heads):
    net = nb["build_arch"](nb["ArchConfig"](kv_heads=kv_heads))
    with torch.inference_mode():
        _, cache = net(nb["STREAM"][:, :7])
    assert all(tuple(c.k.shape) == tuple(c.v.shape) == (2, kv_heads, 7, 16) for c in cache)


def test_grouping_matches_a_per_head_loop(nb):
    """An independent reference: query head h attends with K/V head h // groups, head by head."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    allowed = nb["causal_mask"](0, 5)
    fused = nb["softmax_attention"](q, nb["repeat_kv"](k, 2), nb["repeat_kv"](v, 2), allowed)
    for h in range(4):
        scores = q[0, h] @ k[0, h // 2].T / math.sqrt(16)
        expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v[0, h // 2]
        torch.testing.assert_close(fused[0, h], expected)


def test_fresh_gqa_model_with_another_seed_and_odd_chunks(nb):
    build = lambda: nb["build_arch"](nb["ArchConfig"](kv_heads=2), seed=7)
    assert nb["check_cached"](build, nb["STREAM"], 2, [3, 7, 1, 13], torch.float64)["passed"]


def test_payload_formula_with_kv_heads_equals_measured_bytes(nb):
    assert {h: (v["measured_bytes"], v["formula_bytes"]) for h, v in nb["GQA_PAYLOAD"].items()} == {
        4: (49_152, 49_152), 2: (24_576, 24_576), 1: (12_288, 12_288)}
    assert nb["GQA_PAYLOAD"][4]["params"] == 145_280


def test_tiling_passes_cached_vs_full_but_is_another_function(nb):
    control = nb["TILE_CONTROL"]
    assert control["cached_vs_full_all_passed"] and control["mqa_identical"]
    assert control["max_abs_logit_diff_vs_interleaved"] > 1e-2


def test_tiling_and_interleaving_differ_only_with_real_groups(nb):
    x = torch.arange(4).view(1, 4, 1, 1)
    assert torch.equal(nb["repeat_kv"](x, 1), nb["tile_kv"](x, 1))
    two = torch.arange(2).view(1, 2, 1, 1)
    assert not torch.equal(nb["repeat_kv"](two, 2), nb["tile_kv"](two, 2))


def test_parts_are_restored_after_an_error(nb):
    net = nb["build_arch"](nb["ArchConfig"](kv_heads=2))
    with pytest.raises(RuntimeError):
        with net.parts(expand=nb["tile_kv"]):
            raise RuntimeError("boom")
    assert net.expand is nb["repeat_kv"]


def test_the_real_layer_equals_a_loop_over_query_heads(nb):
    """Criterion 4: head h reads K/V head h // groups in GQAttention.forward itself; tiling is caught."""
    loop = nb["HEAD_LOOP"]
    assert loop["gqa2"] < 1e-10 and loop["mqa"] < 1e-10 and loop["tile_kv_control"] > 1e-2
