"""Section 5: rotary position embeddings, and the Hugging Face Llama cross-check."""

from __future__ import annotations

import importlib.util

import pytest
import torch


def test_scores_depend_only_on_relative_position(nb):
    assert nb["RELATIVE"]["rope_max_abs_diff"] < 1e-12 and nb["RELATIVE"]["norm_max_abs_diff"] < 1e-12
    assert nb["RELATIVE"]["learned_min_max_abs_diff"] > 1.0


def test_rotation_composes(nb):
    """R_a then a rotation by b positions equals R_(a+b): the property the relative-position argument uses."""
    rot = nb["Rotary"](16, 512)
    x = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    twice = rot(rot(x, torch.tensor([30])), torch.tensor([12]))
    torch.testing.assert_close(twice, rot(x, torch.tensor([42])), atol=1e-12, rtol=0)


def test_cached_equals_full(nb):
    rows = nb["ROPE_GRID"]
    assert len(rows) == 12 and all(r["passed"] for r in rows)


def test_keys_are_cached_after_rotation(nb):
    """The cached K of layer 0 equals the rotated projection of the normalized embeddings."""
    net = nb["build_rope"]()
    ids = nb["STREAM"][:1, :6]
    with torch.inference_mode():
        _, cache = net(ids)
        block = net.blocks[0]
        k = block.attn.k(block.ln_1(net.wte(ids))).view(1, 6, 2, 16).transpose(1, 2)
        torch.testing.assert_close(cache[0].k, net.rotary(k, torch.arange(6)))
        assert not torch.allclose(cache[0].k, k)


def test_chunk_rotated_from_zero_is_caught(nb):
    assert not any(r["passed"] for r in nb["ROPE_FROM_ZERO"])


def test_uniform_shift_is_invisible_to_rope_and_visible_to_learned_positions(nb):
    lesson = nb["SHIFT_LESSON"]
    assert lesson["rope_max_abs_logit_diff"] < 1e-10 and lesson["learned_max_abs_logit_diff"] > 1e-2
    assert lesson["rope_cached_vs_full"]["passed"] and lesson["learned_cached_vs_full"]["passed"]


transformers_needed = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                         reason="transformers not installed")


@transformers_needed
def test_llama_cross_check(nb):
    cross = nb["LLAMA_CROSS"]
    assert max(cross["hf_precision"].values()) < 1e-10
    assert set(cross["hf_precision"]) == {"full"} | {f"{k}_{c}" for k in ("cached_chunk", "kv_chunk") for c in (1, 2, 5)}
    assert 1e-10 < cross["pure_fp64"]["full"] < 1e-5
    assert min(cross["tiled_kv_control"].values()) > 1e-2


@transformers_needed
def test_each_of_huggingfaces_fp32_steps_matters(nb):
    steps = nb["LLAMA_FP32_STEPS"]
    assert list(steps) == ["none", "angles", "angles + norm", "angles + norm + softmax"]
    assert steps["angles + norm + softmax"] < 1e-10 < min(steps["none"], steps["angles"], steps["angles + norm"])


@transformers_needed
@pytest.mark.parametrize("kv_heads", [1, 4])
def test_llama_cross_check_for_mqa_and_mha(nb, kv_heads):
    config = nb["replace"](nb["LLAMA_CFG"], kv_heads=kv_heads)
    result = nb["cross_check"](lambda: nb["build_llama_like"](hf_precision=True, config=config), nb["hf_llama"], chunks=(3,))
    assert max(result.values()) < 1e-10


@transformers_needed
def test_pinned_transformers_version(nb):
    import transformers
    from notebook_code import REPO
    pinned = [line.split("==")[1].strip() for line in (REPO / "requirements.txt").read_text().splitlines()
              if line.startswith("transformers==")]
    assert pinned == [transformers.__version__] == [nb["PINNED_TRANSFORMERS"]]


def test_rotary_is_its_formula_and_the_backwards_control_only_fails_that(nb):
    formula = nb["ROPE_FORMULA"]
    assert formula["max_abs_diff"] < 1e-12
    assert formula["backwards_max_abs_diff"] > 1.0 and formula["backwards_shift_error"] < 1e-12
