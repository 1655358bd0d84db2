"""Section 9: the timing harness, the roofline's predicates, and what the run recorded."""

from __future__ import annotations

import pytest


def test_timed_rounds_warms_up_then_times_every_call_once_per_round_in_turn(nb):
    order = []
    times = nb["timed_rounds"]({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert set(times) == {"a", "b"} and all(len(t) == 3 and all(s >= 0 for s in t) for t in times.values())


def test_median_and_spread(nb):
    assert nb["median"]([3.0, 1.0, 2.0]) == 2.0 and nb["median"]([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert nb["spread"]([2.0, 1.0, 4.0]) == 4.0 and nb["spread"]([5.0]) == 1.0


def test_memory_bound_needs_both_the_bytes_and_the_missing_flops(nb):
    bandwidth, peak, memory_bound = nb["BANDWIDTH"], nb["PEAK"], nb["memory_bound"]
    row = lambda bytes_share, peak_share: {"gbs": bytes_share * bandwidth / 1e9, "gflops": peak_share * peak / 1e9}
    assert memory_bound(row(0.9, 0.1)) and memory_bound(row(1.5, 0.3))
    assert not memory_bound(row(0.2, 0.1))             # too few bytes per second
    assert not memory_bound(row(0.9, 0.5))             # too close to the arithmetic peak
    assert nb["amortized"]([4.0, 1.0]) and not nb["amortized"]([4.0, 2.5]) and not nb["amortized"]([1.0, 1.0])


def test_the_roof_is_the_largest_measured_rates(nb):
    seconds, median = nb["SECONDS"], nb["median"]
    elements = nb["STREAM_ELEMENTS"]
    rates = {name: elements * per_element / median(seconds[name]) for name, per_element in {"copy": 8, "triad": 12}.items()}
    assert nb["STREAM_RATES"] == pytest.approx(rates) and nb["BANDWIDTH"] == max(rates.values())
    assert nb["MATMUL_RATE"] == pytest.approx(2 * 1024**3 / median(seconds["matmul"]))
    # The flat side is the largest FLOP rate measured: no weight point lies above it, and one of the rates touches it.
    assert nb["PEAK"] == max(nb["MATMUL_RATE"], max(r["gflops"] * 1e9 for r in nb["WEIGHT_SWEEP"]))
    assert all(r["roof_share"] <= 1 or r["intensity"] < nb["RIDGE"] for r in nb["WEIGHT_SWEEP"])
    assert nb["RIDGE"] == nb["PEAK"] / nb["BANDWIDTH"]


def test_the_sweeps(nb):
    weights, cache = nb["WEIGHT_SWEEP"], nb["CACHE_SWEEP"]
    assert [r["batch"] for r in weights] == list(nb["WEIGHT_BATCHES"]) and [r["batch"] for r in cache] == list(nb["CACHE_BATCHES"])
    assert all(abs(r["intensity"] - 0.5) < 1e-12 for r in cache)
    assert all(a["intensity"] < b["intensity"] for a, b in zip(weights, weights[1:]))
    assert all(r["spread"] >= 1 for r in weights + cache)
    # GB/s and GFLOP/s of one row describe the same time: their ratio is the row's intensity.
    assert all(r["gflops"] / r["gbs"] == pytest.approx(r["intensity"]) for r in weights + cache)
    assert all(nb["ROOFLINE_CHECKS"].values()) and all(c["caught"] for c in nb["ROOFLINE_CONTROLS"].values())


def test_the_amortization_control_is_its_own_wrong_computation(nb):
    """The control charges each token the whole call's time (the bug `time per token not divided by the batch`):
    other numbers than the check's, which the same test rejects."""
    per_call = [r["ms_per_token"] * r["batch"] for r in nb["WEIGHT_SWEEP"]]
    assert nb["weight_ms_per_call"] == per_call and per_call != nb["weight_ms"]
    assert nb["amortized"](nb["weight_ms"]) and not nb["amortized"](per_call)
    assert nb["ROOFLINE_CONTROLS"]["weights_not_amortized"] == {"caught": True}
