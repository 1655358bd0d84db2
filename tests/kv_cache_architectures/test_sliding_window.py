"""Section 6's pieces on new inputs: the band mask, the ring buffer, the windowed model."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

W = 8


def test_band_mask_is_the_stated_inequality(nb):
    for window in (1, 3, 8):
        for past in range(0, 20, 3):
            for new in (1, 2, 5):
                q, k = past + torch.arange(new), torch.arange(past + new)
                expected = torch.tensor([[past + i - window < j <= past + i for j in range(past + new)] for i in range(new)])
                assert torch.equal(nb["band_mask"](q, k, window), expected)


def test_ring_slots_wrap_out_of_position_order(nb):
    ring = nb["RingKV"](W - 1)
    k = torch.zeros(1, 1, 10, 4)
    ring.update(k, k, torch.arange(10))
    assert ring.positions.tolist() == [7, 8, 9, 3, 4, 5, 6]       # slot p % 7
    _, _, key_pos = ring.update(k[:, :, :1], k[:, :, :1], torch.tensor([10]))
    assert key_pos.tolist() == [3, 4, 5, 6, 7, 8, 9, 10]         # read oldest first


def kv(positions, heads: int = 2, dim: int = 3):
    """K and V whose every entry encodes its position (K = p, V = -p), [1, heads, len, dim]."""
    p = torch.as_tensor(positions, dtype=torch.float64)
    k = p[None, None, :, None].expand(1, heads, len(p), dim).clone()
    return k, -k


@pytest.mark.parametrize("seed", range(5))
def test_ring_keeps_the_newest_slots_oldest_first_and_reads_before_writing(nb, seed):
    rng = random.Random(seed)
    slots, seen = rng.randint(1, 7), 0
    ring = nb["RingKV"](slots)
    while seen < 40:
        n = rng.randint(1, 11)                                           # chunks shorter and longer than the ring
        positions = torch.arange(seen, seen + n)
        keys, values, key_pos = ring.update(*kv(positions), positions)
        expected = list(range(max(0, seen - slots), seen + n))
        assert key_pos.tolist() == expected                               # old contents (at most `slots`) + the whole chunk
        assert keys[0, 0, :, 0].tolist() == expected and values[0, 0, :, 0].tolist() == [-p for p in expected]
        seen += n
        k, v, pos = ring.contents()
        assert pos.tolist() == list(range(max(0, seen - slots), seen)) and k[0, 1, :, 2].tolist() == pos.tolist()
        assert ring.seen == seen and ring.nbytes() == 2 * slots * 2 * 3 * 8


def test_a_chunk_longer_than_the_ring_is_exact(nb):
    assert nb["check_cached"](nb["window_model"], 2, [11, 13], torch.float64)["passed"]


def test_another_window_is_exact(nb):
    assert nb["check_cached"](lambda: nb["window_model"](3), 1, [2, 5, 1, 16], torch.float64)["passed"]


def test_sdpa_with_a_boolean_mask_also_serves_the_band(nb):
    """SDPA's `attend` with the window's mask and ring: a subclass of both."""
    layer = type("SDPAWindow", (nb["SDPABoolMask"], nb["WindowAttention"]), {})
    config = nb["LLAMA_CFG"]
    build = lambda: nb["build"](config, lambda i: layer(config, W))
    assert nb["check_cached"](build, 2, 5, reference=nb["window_model"])["passed"]


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_mistral_cross_check_with_another_window(nb):
    from transformers import MistralConfig, MistralForCausalLM
    config = nb["LLAMA_CFG"]
    hf_config = MistralConfig(**nb["hf_fields"](config), head_dim=config.head_dim, sliding_window=5)
    hf = nb["copy_weights"](nb["window_model"](5), MistralForCausalLM(hf_config).eval(), nb["LLAMA_NAMES"] | nb["KV_NAMES"])
    errors = nb["referee_errors"](nb["with_hf_precision"](nb["window_model"](5).double()), hf, chunks=(3,))
    assert max(errors.values()) < 1e-10
