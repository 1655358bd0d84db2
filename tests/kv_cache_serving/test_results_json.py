"""Section 9: results.json follows docs/kv-cache-serving-results-schema.md and is strict JSON."""

from __future__ import annotations

import json


def load(out_dir):
    text = (out_dir / "results.json").read_text(encoding="utf-8")
    return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))   # no NaN/Infinity


def test_top_level_keys(nb, out_dir):
    results = load(out_dir)
    assert list(results) == ["schema_version", "notebook", "created_at", "quick", "environment", "config", "tolerances",
                             "padding", "static", "paged", "memory", "continuous_batching", "figures", "peer"]
    assert results["schema_version"] == 1 and results["notebook"] == "infra-benchmark/kv-cache-serving"
    assert results["quick"] is True


def test_every_control_recorded_and_caught(out_dir):
    results = load(out_dir)
    expected = {"padding": {"arange_positions", "no_padding_mask", "padding_mask_on_queries", "no_empty_row_guard"},
                "static": {"write_at_offset_plus_one", "reuse_without_reset"},
                "paged": {"off_by_one_block_offset", "reused_block_not_cleared", "shared_block_written_in_place"}}
    for block, names in expected.items():
        controls = results[block]["negative_controls"]
        assert set(controls) == names
        for control in controls.values():
            assert control["detected"] is True and isinstance(control["finite"], bool)
            assert (control["max_abs_logit_err"] is None) == (not control["finite"])


def test_timing_and_memory_blocks(out_dir):
    results = load(out_dir)
    rows = results["static"]["step_timing"]["rows"]
    assert all({"p50", "p95", "samples"} <= r["cat_ms"].keys() for r in rows)
    assert set(results["memory"]["table"]) == {"contiguous_max", "contiguous_final", "paged_8", "paged_16", "paged_32"}
    assert all(0 <= m["waste_pct"] < 100 for m in results["memory"]["table"].values())


def test_figures_exist(out_dir):
    results = load(out_dir)
    assert all((out_dir / name).exists() for name in results["figures"])
    assert len(results["figures"]) == 5
