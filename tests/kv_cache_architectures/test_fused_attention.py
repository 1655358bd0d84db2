"""Section 8's pieces: SDPA's conventions on new inputs (the decoder-level checks run in the notebook)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def test_plain_is_causal_true_is_wrong_even_for_one_query():
    q, k, v = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    upper_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(upper_left, v[:, :, :1])                      # reads key 0 only


def test_sdpa_with_enable_gqa_equals_repeat_kv(nb):
    q, k, v = torch.randn(2, 6, 4, 16), torch.randn(2, 3, 9, 16), torch.randn(2, 3, 9, 16)
    allowed = nb["causal_mask"](5, 4)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True),
                               nb["softmax_attention"](q, k, v, allowed))


def test_sdpa_paths_for_another_seed_and_chunks(nb):
    config = nb["LLAMA_CFG"]
    for layer in ("SDPABoolMask", "SDPALowerRight"):
        build = lambda: nb["build"](config, lambda i: nb[layer](config), seed=5)
        assert nb["check_cached"](build, 2, [6, 1, 17], torch.float64, reference=lambda: nb["build"](config, seed=5))["passed"]
