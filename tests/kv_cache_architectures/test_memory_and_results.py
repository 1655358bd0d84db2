"""Sections 9 and 10: the memory table, results.json against its documented schema, the figures."""

from __future__ import annotations

import json
import re

from notebook_code import REPO

SCHEMA_DOC = REPO / "docs" / "kv-cache-architectures-results-schema.md"
TOP_LEVEL = ["schema_version", "notebook", "created_at", "quick", "environment", "config", "gqa", "rope",
             "sliding_window", "quantized", "fused", "memory_table", "cross_checks", "figures"]


def test_memory_table_rows(nb):
    rows = {r["variant"]: r for r in nb["MEMORY_TABLE"]}
    gib = 2 ** 30
    assert [rows[v]["cache_bytes_32k"] / gib for v in ("MHA", "GQA-8", "MQA")] == [16, 4, 0.5]
    assert rows["GQA-8, W = 4096"]["positions_kept"] == 4095
    assert 2 < rows["GQA-8, int8"]["cache_bytes_32k"] / gib < 2.2 and 1 < rows["GQA-8, int4"]["cache_bytes_32k"] / gib < 1.2
    assert nb["llama_parameters"](nb["LLAMA3_8B"]) == 8_030_261_248        # Meta's published 8.03B


def test_results_json_top_level_and_schema_doc(out_dir):
    results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert list(results) == TOP_LEVEL
    assert results["schema_version"] == 1 and results["quick"] is True
    assert results["notebook"] == "infra-benchmark/kv-cache-architectures"
    documented = set(re.findall(r"^\| `([a-z_0-9]+)` \|", SCHEMA_DOC.read_text(encoding="utf-8"), flags=re.M))
    missing = set(TOP_LEVEL) - documented
    assert not missing, missing
    for block in ("gqa", "rope", "sliding_window", "quantized", "fused", "memory_table", "cross_checks"):
        assert set(results[block]) <= documented, (block, set(results[block]) - documented)


def test_results_record_every_criterion_and_control(out_dir):
    r = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert all(c["passed"] for grid in r["gqa"]["grids"].values() for c in grid)
    assert r["gqa"]["controls"]["tile_kv"]["cached_vs_full_all_passed"] is True
    assert not any(c["passed"] for c in r["rope"]["controls"]["rotated_from_zero"])
    assert not any(c["passed"] for c in r["sliding_window"]["controls"]["off_by_one"])
    assert r["quantized"]["controls"]["dropped_scale"]["max_abs_logit_err"] > r["quantized"]["bounds"]["8"]["max_abs_logit_err"]
    assert [c["passed"] for c in r["fused"]["controls"]["is_causal_if_several"]] == [True, False, False]
    assert all(len(t["samples_ms"]) == r["fused"]["timing"]["protocol"]["repeats"] for t in r["fused"]["timing"]["results"].values())


def test_figures_written(out_dir):
    results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert results["figures"] == ["masks.png", "sliding_window.png", "quantized_cache_error.png", "memory.png"]
    assert all((out_dir / name).stat().st_size > 1000 for name in results["figures"])
