"""Section 4: the padding helpers on new inputs, and the padded batch on prompts the notebook does not use.

The notebook asserts its own criterion and controls in view; these tests call its functions with other
masks, prompts and dtypes, so they can fail where the notebook's run would not.
"""

from __future__ import annotations

import math

import pytest
import torch


def test_positions_count_the_real_tokens_before_each_slot(nb):
    key_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [0, 1, 0, 1, 1]], dtype=torch.bool)
    positions = nb["padded_positions"](key_mask, 5, pad_position=9)
    assert positions.tolist() == [[9, 9, 0, 1, 2], [0, 1, 2, 3, 4], [9, 9, 9, 9, 9], [9, 0, 9, 1, 2]]
    # a decode step: the new slot's position is the row's number of real tokens so far
    grown = torch.cat((key_mask, torch.ones(4, 1, dtype=torch.bool)), dim=1)
    assert nb["padded_positions"](grown, 1)[:, 0].tolist() == key_mask.sum(-1).tolist()


def test_left_pad_puts_every_row_last_token_in_the_last_column(nb):
    prompts = [torch.tensor([5]), torch.tensor([1, 2, 3, 4]), torch.tensor([7, 8])]
    ids, key_mask = nb["left_pad"](prompts, pad_id=42)
    assert ids.tolist() == [[42, 42, 42, 5], [1, 2, 3, 4], [42, 42, 7, 8]]
    assert key_mask.sum(-1).tolist() == [1, 4, 2] and key_mask[:, -1].all()


def test_real_queries_never_read_padding_keys_and_every_query_reads_something(nb):
    _, key_mask = nb["left_pad"]([torch.arange(2), torch.arange(5), torch.arange(0)])
    allowed = nb["padded_causal_mask"](key_mask, key_mask.shape[1])          # [B, 1, T, T]
    real_query = key_mask[:, None, :, None]
    padding_key = ~key_mask[:, None, None, :]
    assert not (allowed & real_query & padding_key).any()
    assert allowed.any(dim=-1).all()                                         # the guard: no row of -inf


def test_guard_opens_only_rows_that_see_nothing(nb):
    allowed = torch.tensor([[True, False, False], [False, False, False], [False, True, True]])
    assert nb["guard_empty_rows"](allowed).tolist() == [[True, False, False], [True, True, True], [False, True, True]]


@pytest.mark.parametrize("lengths", [(1, 4, 9), (6, 6), (2, 11)])
def test_padded_batch_equals_each_prompt_alone_for_new_prompts(nb, lengths):
    gen = torch.Generator().manual_seed(123)
    prompts = [torch.randint(0, nb["cfg"].vocab, (n,), generator=gen) for n in lengths]
    out = nb["generate_padded"](nb["model"], prompts, steps=5)
    for got, tokens, prompt in zip(out["logits"], out["tokens"], prompts):
        ref = nb["generate_alone"](nb["model"], prompt, steps=5)
        assert nb["close"](got, ref["logits"]) and tokens == ref["tokens"]


def test_controls_also_fail_in_fp64(nb):
    for name, rules in nb["PADDING_CONTROLS"].items():
        assert not nb["check_padded"](nb["model"], torch.float64, rules)["passed"], name


def test_without_the_guard_nan_reaches_the_padded_rows_only(nb):
    out = nb["generate_padded"](nb["model"], nb["PROMPTS"], steps=0, rules=nb["PADDING_CONTROLS"]["no_empty_row_guard"])
    assert torch.isnan(out["logits"][0]).all() and torch.isnan(out["logits"][1]).all()
    assert torch.isfinite(out["logits"][2]).all()                           # the unpadded row is unaffected


def test_hooks_restored_after_padded_forward(nb):
    model = nb["model"]
    assert model.mask_fn is nb["causal_mask"] and model.positions_fn is nb["absolute_positions"]


def test_compare_reports_nan_shapes_and_exactness(nb):
    compare = nb["compare"]
    a, b = torch.ones(2, 3), torch.ones(2, 3)
    assert compare([a], [b]) == {"max_abs_logit_err": 0.0, "close": True, "bit_exact": True, "finite": True}
    nan = a.clone()
    nan[0, 1] = float("nan")
    result = compare([a, nan], [b, b])
    assert math.isnan(result["max_abs_logit_err"]) and not result["close"] and not result["finite"]
    assert compare([a], [b + 1e-7])["close"] and not compare([a], [b + 1e-7])["bit_exact"]
    mismatch = compare([a], [torch.ones(3, 3)])
    assert mismatch["max_abs_logit_err"] == math.inf and not mismatch["close"] and not mismatch["bit_exact"]
    assert compare([], []) == {"max_abs_logit_err": 0.0, "close": True, "bit_exact": True, "finite": True}


def test_the_compare_section_stands_alone():
    """01_setup_compare.py is included by the reuse notebook too: no heading, no section number, and it needs
    only math, torch (imported by the setup of the notebooks that include it) and the shared helpers (close,
    max_abs_err)."""
    import math

    from notebook_code import exec_sections

    from .notebook import NOTEBOOK, assert_includable

    assert_includable("01_setup_compare.py")
    namespace = exec_sections({"math": math, "torch": torch}, NOTEBOOK, "01_setup_helpers.py", "01_setup_compare.py")
    assert namespace["compare"]([torch.ones(2)], [torch.ones(2)])["bit_exact"]
    assert namespace["finite_or_none"](float("nan")) is None and namespace["finite_or_none"](1.5) == 1.5

