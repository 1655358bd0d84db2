"""The timing harness of section 9, checked here instead of in view: the windows do the work the formulas
say, the measurement loop rotates and warms up as its protocol says, the percentiles are what the prose
says about them, and the profile and generation helpers report what they ran. Nothing here compares times
with a threshold."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from .test_model_and_checks import fresh_model


@pytest.mark.parametrize("prompt_len, generated", [(5, 3), (16, 4), (40, 1)])
def test_windows_feed_the_positions_of_the_formula_and_agree(nb, prompt_len, generated):
    model, stream = fresh_model(nb, seed=4), nb["TIMING_STREAM"]
    prompt, continuation = stream[:, :prompt_len], stream[:, prompt_len:prompt_len + generated]
    fed = []
    hook = model.register_forward_pre_hook(lambda module, args: fed.append(args[0].shape[1]))
    try:
        cache = nb["prefill"](model, prompt)
        fed.clear()
        full = nb["full_continuation"](model, prompt, continuation)
        full_fed, fed[:] = sum(fed), []
        cached, final_cache = nb["cached_continuation"](model, cache, continuation)
    finally:
        hook.remove()
    assert {"full": full_fed, "cached": sum(fed)} == nb["projected_positions"](prompt_len, generated)
    assert nb["close"](cached, full) and cached.shape == (1, generated, nb["cfg"].vocab)
    assert final_cache[0][0].shape[-2] == prompt_len + generated
    assert nb["projected_positions"](256, 16) == {"full": 4_232, "cached": 16}


def test_measurement_loop_rotates_the_order_and_warms_up_every_path(nb, monkeypatch):
    """time_prompt runs WARMUPS + REPEATS rounds; round r starts with path r mod 3; warm-ups are not recorded."""
    calls = []
    monkeypatch.setitem(nb, "prefill", lambda model, prompt: calls.append("prefill") or "cache")
    monkeypatch.setitem(nb, "full_continuation", lambda model, prompt, cont: calls.append("full"))
    monkeypatch.setitem(nb, "cached_continuation", lambda model, cache, cont: calls.append("cached"))
    row = nb["time_prompt"](nb["model"], 16)
    calls = calls[1:]                                       # the untimed prefix cache
    rounds = [tuple(calls[i:i + 3]) for i in range(0, len(calls), 3)]
    paths = nb["PATHS"]
    assert len(rounds) == nb["WARMUPS"] + nb["REPEATS"]
    assert rounds == [paths[r % 3:] + paths[:r % 3] for r in range(len(rounds))]
    assert all(len(row[f"{path}_ms"]["samples"]) == nb["REPEATS"] for path in paths)
    assert row["projected_positions"] == nb["projected_positions"](16, nb["CONTINUATION"])


def test_p95_of_15_samples_lies_between_the_two_largest(nb):
    samples = [float(x) for x in np.random.default_rng(0).uniform(1, 2, 15)]
    summary = nb["percentile_summary"]([int(x * 1e6) for x in samples])
    ranked = sorted(summary["samples"])
    assert ranked[-2] <= summary["p95"] <= ranked[-1]
    assert summary["p50"] == ranked[7] and (summary["min"], summary["max"]) == (ranked[0], ranked[-1])
    one_slow = nb["percentile_summary"]([5_000_000] * 14 + [50_000_000])
    assert one_slow["p50"] == 5.0 and one_slow["p95"] > 2 * one_slow["p50"] and sum(x > 1.5 * one_slow["p50"] for x in one_slow["samples"]) == 1


def test_window_average_of_the_formula_equals_the_counted_window(nb):
    """The dashed lines of 9.2: the formula averaged over a window, against FlopCounterMode over the window."""
    model, stream, g = nb["model"], nb["TIMING_STREAM"], nb["CONTINUATION"]
    for p in (16, 64):
        prompt, continuation = stream[:, :p], stream[:, p:p + g]
        cache = nb["prefill"](model, prompt)
        assert nb["counted_macs"](lambda: nb["cached_continuation"](model, cache, continuation))["total"] == g * nb["window_macs"](p, "cached")
        assert nb["counted_macs"](lambda: nb["full_continuation"](model, prompt, continuation))["total"] == g * nb["window_macs"](p, "full")


def test_profile_counts_the_same_calls_for_any_prompt(nb):
    model, ids = fresh_model(nb, seed=6), nb["TIMING_STREAM"][:, :33]
    with torch.inference_mode():
        _, cache = model(ids[:, :-1])
    step, prefill = nb["profile_call"](lambda: model(ids[:, -1:], cache)), nb["profile_call"](lambda: model(ids[:, :5]))
    assert step["top_level"] >= prefill["top_level"] > 0
    assert step["ops"]["aten::cat"][0] == 2 * nb["cfg"].layers and "aten::cat" not in prefill["ops"]
    assert all(calls > 0 and us >= 0 for calls, us in itertools.chain(step["ops"].values(), prefill["ops"].values()))


def test_timed_generation_matches_greedy_generation(nb):
    model, prompt = fresh_model(nb, seed=2), nb["TIMING_STREAM"][:, :12]
    for use_cache in (True, False):
        tokens, calls, cpu_ms, faults = nb["timed_generation"](model, prompt, 9, use_cache)
        assert torch.equal(tokens, nb["greedy_generate"](model, prompt, 9, use_cache)[0])
        assert len(calls) == 9 and all(0 <= start < end for start, end in calls)
        assert len(cpu_ms) == 9 and all(ms >= 0 for ms in cpu_ms)
        assert len(faults) == 9 and all(f is None or f >= 0 for f in faults)
        assert all(end <= start for (_, end), (start, _) in zip(calls, calls[1:]))
