"""Sections 9 to 11: the memory table's source, results.json against its documented schema, the figures."""

from __future__ import annotations

import json
import re

from notebook_code import REPO

SCHEMA_DOC = REPO / "docs" / "kv-cache-architectures-results-schema.md"
TOP_LEVEL = ["schema_version", "notebook", "created_at", "quick", "environment", "config", "exact", "gqa", "rope",
             "sliding_window", "quantized", "fused", "memory_table", "cross_checks", "controls", "figures"]
CONTROLS = ["tiled_kv_heads", "rope_turned_backwards", "rotated_from_zero", "window_one_key_too_wide",
            "window_one_key_too_narrow", "crop_to_window", "scale_forgotten", "is_causal_after_cache"]


def results(out_dir) -> dict:
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))


def test_llama_3_8b_parameter_count_is_metas(nb):
    assert nb["llama_parameters"](nb["LLAMA3_8B"]) == 8_030_261_248        # Meta's published 8.03B


def test_results_json_top_level_and_schema_doc(out_dir):
    r = results(out_dir)
    assert list(r) == TOP_LEVEL
    assert r["schema_version"] == 3 and r["quick"] is True and r["notebook"] == "infra-benchmark/kv-cache-architectures"
    documented = set(re.findall(r"^\| `([a-z_0-9]+)`", SCHEMA_DOC.read_text(encoding="utf-8"), flags=re.M))
    assert set(TOP_LEVEL) <= documented, set(TOP_LEVEL) - documented
    for block in ("exact", "gqa", "rope", "sliding_window", "quantized", "fused", "memory_table", "cross_checks", "controls"):
        assert set(r[block]) <= documented, (block, set(r[block]) - documented)


def test_every_exact_variant_passed_and_every_control_was_caught(out_dir):
    r = results(out_dir)
    for name, block in r["exact"].items():
        assert block["grid"] and all(row["passed"] for row in block["grid"]), name
        assert block["largest_logit_err"]["fp32"] < 1e-5 and block["largest_logit_err"]["fp64"] < 1e-10, name
    assert list(r["controls"]) == CONTROLS
    assert all(c["caught"] is True and {"section", "check", "measured"} <= set(c) for c in r["controls"].values())


def test_timing_keeps_raw_samples(out_dir):
    fused = results(out_dir)["fused"]
    assert all(len(t["samples_ms"]) == fused["timing"]["protocol"]["repeats"] for t in fused["timing"]["results"].values())
    assert set(fused["decode_profile"]["paths"]) == {"explicit", "sdpa"}


def test_figures_written(out_dir):
    r = results(out_dir)
    assert r["figures"] == ["masks.png", "gqa_heads.png", "sliding_window.png", "quantized_cache_error.png", "memory.png"]
    assert all((out_dir / name).stat().st_size > 1000 for name in r["figures"])
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(r["figures"] + ["results.json"])
