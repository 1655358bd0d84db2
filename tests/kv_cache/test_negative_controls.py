"""Broken variants injected into the model through its hooks must fail the same equivalence check, on fresh models."""

from __future__ import annotations

import pytest
import torch

from .test_model_and_checks import fresh_model

BROKEN = ["restart_positions", "local_triangle_mask", "no_mask_with_cache"]


@pytest.mark.parametrize("variant", BROKEN)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_variant_injected_by_constructor_is_detected(nb, variant, dtype):
    model = fresh_model(nb, **nb["VARIANTS"][variant])
    check = nb["check_equivalence"]
    assert not check(model, nb["STREAM"], 2, 2, dtype)["passed"]
    assert not check(model, nb["SIX_TOKENS"], 1, [4, 2], dtype)["passed"]


@pytest.mark.parametrize("variant", BROKEN)
def test_variant_injected_by_hooks_is_detected_and_restored(nb, variant):
    model, check = nb["model"], nb["check_equivalence"]
    with model.hooks(**nb["VARIANTS"][variant]):
        assert not check(model, nb["STREAM"], 1, 5)["passed"]
    assert check(model, nb["STREAM"], 1, 5)["passed"]
    assert model.mask_fn is nb["causal_mask"] and model.positions_fn is nb["absolute_positions"]


def test_hooks_restored_after_an_error(nb):
    model = nb["model"]
    with pytest.raises(RuntimeError):
        with model.hooks(positions_fn=nb["restart_positions"]):
            raise RuntimeError("boom")
    assert model.positions_fn is nb["absolute_positions"]


def test_one_token_steps_hide_the_missing_mask(nb):
    model = fresh_model(nb, mask_fn=nb["mask_only_without_cache"])
    check = nb["check_equivalence"]
    assert check(model, nb["STREAM"], 1, 1)["passed"]          # hidden by one-token steps
    assert not check(model, nb["STREAM"], 1, 2)["passed"]      # exposed by a multi-token chunk


def test_a_bug_the_notebook_does_not_show_is_caught_too(nb):
    """Positions off by one once a cache exists: not one of the notebook's demos, still caught.

    (An offset applied on *every* call, cache or not, would shift both paths alike: no cache bug.)
    """
    def skips_one(past_len, new_len):
        return past_len + (1 if past_len else 0) + torch.arange(new_len)

    model = fresh_model(nb, positions_fn=skips_one)
    assert not nb["check_equivalence"](model, nb["STREAM"], 1, 2)["passed"]


def test_in_place_cache_write_is_caught(nb, monkeypatch):
    attention = nb["SelfAttention"]
    original = attention.forward

    def writes_into_cache(self, x, allowed, past=None):
        if past is not None:
            past[0][..., -1, :] += 0.5        # modifies the caller's cache tensor in place
        return original(self, x, allowed, past)

    monkeypatch.setattr(attention, "forward", writes_into_cache)
    result = nb["check_equivalence"](fresh_model(nb), nb["STREAM"], 1, 2)
    assert not result["cache_unchanged"] and not result["passed"]


def test_in_place_write_that_preserves_values_is_not_flagged(nb, monkeypatch):
    """The lifecycle check compares values: a no-op in-place op must not raise a false alarm."""
    attention = nb["SelfAttention"]
    original = attention.forward

    def touches_cache(self, x, allowed, past=None):
        if past is not None:
            past[0].mul_(1.0)
        return original(self, x, allowed, past)

    monkeypatch.setattr(attention, "forward", touches_cache)
    assert nb["check_equivalence"](fresh_model(nb), nb["STREAM"], 1, 2)["passed"]


def test_non_causal_mask_is_caught_by_causality_check(nb):
    def everything_visible(past_len, new_len):
        return torch.ones(new_len, past_len + new_len, dtype=torch.bool)

    leaky = fresh_model(nb, mask_fn=everything_visible)
    assert not nb["check_causality"](leaky, nb["STREAM"])["passed"]
    assert nb["check_causality"](fresh_model(nb), nb["STREAM"])["passed"]


def test_wrong_mask_in_generation_is_caught_and_restored(nb):
    model, prompts = nb["model"], nb["STREAM"][:, :5]
    full, full_logits = nb["greedy_generate"](model, prompts, 6, use_cache=False)
    with model.hooks(mask_fn=nb["local_triangle_mask"]):
        broken, broken_logits = nb["greedy_generate"](model, prompts, 6, use_cache=True)
    assert not nb["compare_generations"](broken, broken_logits, full, full_logits)["logits_close"]
    assert model.mask_fn is nb["causal_mask"] and model.positions_fn is nb["absolute_positions"]
