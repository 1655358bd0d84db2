"""Section 5's pieces on new inputs: the rotary embedding, the Llama-shaped model, and the Hugging Face tools."""

from __future__ import annotations

import importlib.util

import pytest
import torch


def test_rotation_composes(nb):
    """R_a then a rotation by b positions equals R_(a+b): the property the relative-position argument uses."""
    rot = nb["Rotary"](16, 512, 10000.0)
    x = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    twice = rot(rot(x, torch.tensor([30])), torch.tensor([12]))
    torch.testing.assert_close(twice, rot(x, torch.tensor([42])), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dim, theta", [(8, 500.0), (32, 1e6)])
def test_rotary_is_the_formula_for_other_sizes(nb, dim, theta):
    x = torch.randn(3, 40, dim, dtype=torch.float64)
    positions = torch.arange(40)
    torch.testing.assert_close(nb["Rotary"](dim, 64, theta)(x, positions), nb["rope_by_formula"](x, positions, theta),
                               atol=1e-12, rtol=0)


def test_keys_are_cached_after_rotation(nb):
    """The cached K of layer 0 equals the rotated projection of the normalized embeddings."""
    net = nb["build"](nb["LLAMA_CFG"])
    ids = nb["STREAM"][:1, 3:9]
    with torch.inference_mode():
        _, cache = net(ids)
        block = net.blocks[0]
        k = nb["split_heads"](block.attn.k(block.ln_1(net.wte(ids))), 2)
        torch.testing.assert_close(cache[0].k, block.attn.rotary(k, torch.arange(6)))
        assert not torch.allclose(cache[0].k, k)


def test_llama_shaped_model_with_another_seed_and_chunk_list(nb):
    build = lambda: nb["build"](nb["LLAMA_CFG"], seed=3)
    assert nb["check_cached"](build, 2, [4, 9, 11], torch.float64)["passed"]


def test_with_hf_precision_copies_and_changes_only_norms_and_angles(nb):
    net = nb["build"](nb["LLAMA_CFG"]).double()
    copy = nb["with_hf_precision"](net)
    assert all(type(m) is torch.nn.RMSNorm for m in net.modules() if isinstance(m, torch.nn.RMSNorm))
    assert sum(isinstance(m, nb["Float32RMSNorm"]) for m in copy.modules()) == 2 * 2 + 1
    rotary = copy.blocks[0].attn.rotary
    assert rotary.cos.dtype == torch.float64 and not torch.equal(rotary.cos, net.blocks[0].attn.rotary.cos)
    torch.testing.assert_close(rotary.cos, net.blocks[0].attn.rotary.cos, atol=1e-5, rtol=0)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), copy.state_dict().values()))


def test_float32_rmsnorm_is_pytorchs_rmsnorm_in_fp32(nb):
    """Small inputs, so that eps matters: the same eps agrees, another does not."""
    x = 1e-3 * torch.randn(3, 5, 64)
    ours = nb["Float32RMSNorm"](64, eps=1e-5)
    torch.testing.assert_close(ours(x), torch.nn.RMSNorm(64, eps=1e-5)(x))
    assert not torch.allclose(ours(x), torch.nn.RMSNorm(64, eps=1e-6)(x), atol=1e-3, rtol=0)


transformers_needed = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                         reason="transformers not installed")


@transformers_needed
@pytest.mark.parametrize("kv_heads", [1, 4])
def test_llama_cross_check_for_mqa_and_mha(nb, kv_heads):
    config = nb["replace"](nb["LLAMA_CFG"], kv_heads=kv_heads)
    ours = nb["build"](config).double()
    errors = nb["referee_errors"](nb["with_hf_precision"](ours), nb["hf_llama"](ours), chunks=(3,))
    assert max(errors.values()) < 1e-10


@transformers_needed
def test_pinned_transformers_version(nb):
    import transformers
    from notebook_code import REPO
    pinned = [line.split("==")[1].strip() for line in (REPO / "requirements.txt").read_text().splitlines()
              if line.startswith("transformers==")]
    assert pinned == [transformers.__version__] == [nb["PINNED_TRANSFORMERS"]]
