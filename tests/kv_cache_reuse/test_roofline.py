"""Section 9: the timing harness and the predicates, and what the run recorded."""

from __future__ import annotations


def test_best_times_warms_up_then_keeps_the_fastest_of_rotating_rounds(nb):
    order = []
    times = nb["best_times"]({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())


def test_predicates(nb):
    assert nb["amortized"]([4.0, 1.0]) and not nb["amortized"]([4.0, 2.5]) and not nb["amortized"]([1.0, 1.0])
    assert nb["memory_bound"](nb["RIDGE"] / 2) and not nb["memory_bound"](nb["RIDGE"] * 2)


def test_the_roof_lies_above_every_measurement(nb):
    peak, bandwidth = nb["PEAK"], nb["BANDWIDTH"]
    for r in nb["WEIGHT_SWEEP"] + nb["CACHE_SWEEP"]:
        assert r["gflops"] * 1e9 <= min(peak, bandwidth * r["intensity"]) * (1 + 1e-9)
    assert peak >= nb["MATMUL"] and bandwidth >= nb["STREAM_BANDWIDTH"]
    assert bandwidth in (nb["STREAM_BANDWIDTH"], *(r["gbs"] * 1e9 for r in nb["WEIGHT_SWEEP"] + nb["CACHE_SWEEP"]))


def test_the_sweeps(nb):
    weights, cache = nb["WEIGHT_SWEEP"], nb["CACHE_SWEEP"]
    assert [r["batch"] for r in weights] == list(nb["WEIGHT_BATCHES"]) and [r["batch"] for r in cache] == list(nb["CACHE_BATCHES"])
    assert all(abs(r["intensity"] - 0.5) < 1e-12 for r in cache)
    assert all(a["intensity"] < b["intensity"] for a, b in zip(weights, weights[1:]))
    assert all(nb["ROOFLINE_CHECKS"].values()) and all(c["caught"] for c in nb["ROOFLINE_CONTROLS"].values())
