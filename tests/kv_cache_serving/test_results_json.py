"""Section 11: results.json follows docs/kv-cache-serving-results-schema.md and is strict JSON."""

from __future__ import annotations

import json


def load(out_dir):
    text = (out_dir / "results.json").read_text(encoding="utf-8")
    return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))   # no NaN/Infinity


def test_top_level_keys(out_dir):
    results = load(out_dir)
    assert list(results) == ["schema_version", "notebook", "created_at", "quick", "environment", "config", "tolerances",
                             "padding", "static", "paged", "memory", "continuous_batching", "figures", "peer"]
    assert results["schema_version"] == 4 and results["notebook"] == "infra-benchmark/kv-cache-serving"
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


def test_section_blocks(out_dir):
    results = load(out_dir)
    static = results["static"]
    assert set(static["runs"]) == {"fp32", "fp64", "fp32_spare_slot"}
    assert static["overflow_error"].startswith("ValueError: length + new_len > T_max")
    assert all({"p50", "p95", "samples"} <= r["cat_ms"].keys() and r["logits_agree"] is True for r in static["step_timing"]["rows"])
    assert results["paged"]["reuse"]["schedule"]["kept"] is True and results["continuous_batching"]["summary"]["schedule"]["kept"] is True
    assert static["profile"]["ops"]["cat"]["aten::cat"]["calls"] == 5
    assert all(set(op) == {"calls"} for ops in static["profile"]["ops"].values() for op in ops.values())
    assert set(results["paged"]["runs"]) == {"fp32", "fp64"} and results["paged"]["runs"]["fp32"]["pool_fixed"] is True
    assert set(results["memory"]["table"]) == {"contiguous_max", "contiguous_final", "paged_8", "paged_16", "paged_32"}
    assert all(0 <= m["waste_pct"] < 100 for m in results["memory"]["table"].values())
    assert results["memory"]["vllm_paper_used_pct"] == {"Orca (Max)": 20.4, "Orca (Oracle)": 38.2, "vLLM": 96.3}
    trace = results["continuous_batching"]["trace"]
    assert {"iteration", "admitted", "decoded", "running", "waiting", "blocks_reserved", "blocks_used", "within_reservation"} == set(trace[0])


def test_figures_exist(out_dir):
    results = load(out_dir)
    assert results["figures"] == ["masks.png", "padding_mask.png", "static_vs_cat_step.png", "block_table.png",
                                  "memory_use.png", "continuous_batching.png"]
    assert all((out_dir / name).exists() for name in results["figures"])
