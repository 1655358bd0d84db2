"""Section 8: the decode step's bytes and multiply-adds, our decoder and the published configurations."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

# Parameter counts of the published configurations, from their config.json fields (exact integers).
PINNED_PARAMETERS = {
    "GPT-2": 124_439_808,
    "Llama 2 7B": 6_738_415_616,
    "Llama 3.1 8B": 8_030_261_248,
    "Llama 3.1 70B": 70_553_706_496,
    "DeepSeek-V2-Lite": 15_706_484_224,
}
# K/V bytes per token with 2-byte numbers.
PINNED_KV_PER_TOKEN = {"GPT-2": 36_864, "Llama 2 7B": 524_288, "Llama 3.1 8B": 131_072, "Llama 3.1 70B": 327_680,
                       "DeepSeek-V2-Lite": 27 * 576 * 2}


def test_parameter_counts_are_pinned(nb):
    assert {s.name: nb["parameters"](s)["total"] for s in nb["SHAPES"]} == PINNED_PARAMETERS
    assert nb["parameters"](nb["OURS"])["total"] == 145_280


def test_kv_bytes_per_token(nb):
    assert {s.name: nb["decode_step_cost"](s, 1, 1, 2)["kv_bytes"] for s in nb["SHAPES"]} == PINNED_KV_PER_TOKEN


def test_deepseek_active_parameters(nb):
    # Matrices one token multiplies by: 6 routed + 2 shared experts in 26 layers (the published "2.4B activated"
    # leaves out the embedding table, as this count does; it also leaves out the norm weights).
    ds = nb["SHAPES"][-1]
    per_token = nb["parameters"](ds)["per_token"]
    assert per_token == 2_451_308_544 and 2.4e9 < per_token < 2.5e9


@pytest.mark.parametrize("layers, heads, width, batch, cached", [(1, 2, 32, 3, 7), (3, 8, 64, 2, 40)])
def test_flop_count_on_other_decoders(nb, layers, heads, width, batch, cached):
    config = nb["DecoderConfig"](layers=layers, heads=heads, width=width, mlp=3 * width)
    model = nb["build_model"](1, config)
    shape = nb["ModelShape"]("x", "test", config.vocab, width, layers, heads, heads, width // heads, config.mlp,
                             gated_mlp=False, biases=True, positions=config.max_positions)
    assert nb["parameters"](shape)["total"] == sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab, (batch, cached + 1))
    with torch.inference_mode():
        _, cache = model(ids[:, :-1])
        with FlopCounterMode(display=False) as counter:
            model(ids[:, -1:], cache)
    cost = nb["decode_step_cost"](shape, batch, cached + 1, 4)
    assert counter.get_total_flops() == 2 * (cost["weight_macs"] + cost["attention_macs"])


def test_intensities_follow_the_formulas(nb):
    cost = nb["decode_step_cost"]
    llama = nb["SHAPES"][2]
    for batch in (1, 8, 64):
        c = cost(llama, batch, 4096, 2)
        assert c["cache_intensity"] == pytest.approx(32 / 8)                    # 2 g / s with g = 4, s = 2
        assert c["weight_intensity"] == pytest.approx(batch, rel=2e-3)          # 2 B / s, s = 2 (plus embedding rows)
    ds = nb["SHAPES"][-1]
    assert cost(ds, 1, 4096, 2)["cache_intensity"] == pytest.approx(2 * 16 * (2 * 512 + 64) / ((512 + 64) * 2))
    # MoE: a batch reads more experts, never more than all of them.
    reads = [cost(ds, b, 1, 2)["weight_bytes"] for b in (1, 2, 16, 1024)]
    assert reads == sorted(reads) and reads[-1] < 2 * nb["parameters"](ds)["total"]


def test_the_checks_and_controls_of_the_section(nb):
    assert all(r["flops"] == r["formula"] != r["control"] for r in nb["COUNT_GRID"]) and nb["COUNT_CONTROL_CAUGHT"]
    assert all(c["matches"] for c in nb["SIZE_CHECK"]) and nb["SIZE_CONTROL"]["caught"]
