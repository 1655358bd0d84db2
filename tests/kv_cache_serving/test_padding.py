"""Section 4: left-padded batches equal each prompt run alone; four broken twins are caught."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_every_row_equals_its_prompt_alone(nb, dtype):
    run = nb["PADDED"][dtype]
    assert run["passed"] and run["tokens_identical"] and run["finite"]
    assert run["max_abs_logit_err"] <= {"fp32": 1e-5, "fp64": 1e-10}[dtype]


def test_prompts_and_decode_steps_as_the_issue_asks(nb):
    assert nb["PROMPT_LENGTHS"] == (3, 7, 12) and nb["DECODE_STEPS"] == 20
    assert [len(t) for t in nb["PADDED"]["fp32"]["tokens"]] == [21, 21, 21]


def test_positions_come_from_the_mask(nb):
    ids, key_mask = nb["left_pad"](nb["PROMPTS"])
    positions = nb["padded_positions"](key_mask, ids.shape[1])
    for row, n in enumerate(nb["PROMPT_LENGTHS"]):
        assert positions[row, -n:].tolist() == list(range(n))
        assert set(positions[row, :-n].tolist()) <= {0}


def test_padding_mask_hides_keys_not_queries(nb):
    _, key_mask = nb["left_pad"](nb["PROMPTS"])
    allowed = nb["padded_causal_mask"](key_mask, key_mask.shape[1])
    assert allowed.shape == (3, 1, 12, 12)
    real_queries = key_mask[:, None, :, None] & key_mask[:, None, None, :].new_ones(1, 1, 1, 12)
    # a real query never reads a padding key
    assert not (allowed & real_queries & ~key_mask[:, None, None, :]).any()


def test_padding_content_cannot_reach_real_positions(nb):
    assert nb["PAD_CONTENT_BIT_EXACT"]


@pytest.mark.parametrize("control", ["arange_positions", "no_padding_mask", "padding_mask_on_queries", "no_empty_row_guard"])
def test_each_control_is_caught(nb, control):
    assert not nb["PADDING_CONTROL_RUNS"][control]["passed"]


def test_controls_also_fail_in_fp64(nb):
    for name, rules in nb["PADDING_CONTROLS"].items():
        assert not nb["check_padded"](nb["model"], torch.float64, rules)["passed"], name


def test_without_the_guard_nan_reaches_real_positions(nb):
    assert not nb["PADDING_CONTROL_RUNS"]["no_empty_row_guard"]["finite"]
    out = nb["generate_padded"](nb["model"], nb["PROMPTS"], steps=0, rules=nb["PADDING_CONTROLS"]["no_empty_row_guard"])
    assert torch.isnan(out["logits"][0]).all()                  # the padded row is all NaN at its real positions
    assert torch.isfinite(out["logits"][2]).all()               # the unpadded row is unaffected


def test_hooks_restored_after_padded_forward(nb):
    model = nb["model"]
    assert model.mask_fn is nb["causal_mask"] and model.positions_fn is nb["absolute_positions"]


def test_nan_starts_at_padding_and_reaches_real_positions_through_v(nb):
    _, key_mask = nb["left_pad"](nb["PROMPTS"])
    assert torch.equal(nb["nan_1"], ~key_mask)                  # after block 1: padding positions only
    assert nb["nan_2"][0][key_mask[0]].all() and not nb["nan_2"][2].any()


def test_a_row_with_no_token_stays_finite(nb):
    assert nb["EMPTY_ROW_OK"]
