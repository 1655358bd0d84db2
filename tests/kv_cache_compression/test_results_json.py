"""Section 7: results.json against its documented schema, every control caught, the figures written."""

from __future__ import annotations

import json
import re

from notebook_code import REPO

SCHEMA_DOC = REPO / "docs" / "kv-cache-compression-results-schema.md"
TOP_LEVEL = ["schema_version", "notebook", "created_at", "quick", "environment", "config", "exact", "mla", "local_global",
             "shared_pairs", "streaming", "eviction", "referees", "controls", "figures"]
EXACT = ["gqa_base", "mla_naive", "mla_latent", "mla_absorbed", "mla_absorbed_vs_naive", "local_global", "shared_pairs",
         "sinks_and_window"]
CONTROLS = ["positions_restart_at_zero", "rope_on_compressed_part", "latent_normalized_over_positions",
            "ring_on_global_layer", "shared_cache_written_twice", "pattern_shifted_by_one_layer",
            "keys_rotated_once_when_cached", "random_eviction"]


def results(out_dir) -> dict:
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))


def documented_keys() -> set[str]:
    return set(re.findall(r"^\| `([a-z_0-9]+)`", SCHEMA_DOC.read_text(encoding="utf-8"), flags=re.M))


def test_top_level_and_every_block_documented(out_dir, nb):
    r = results(out_dir)
    assert list(r) == TOP_LEVEL
    assert r["schema_version"] == 4 and r["quick"] is True and r["notebook"] == "infra-benchmark/kv-cache-compression"
    documented = documented_keys()
    assert set(TOP_LEVEL) <= documented
    for block in ("mla", "local_global", "shared_pairs", "streaming", "eviction", "referees"):
        assert set(r[block]) <= documented, (block, set(r[block]) - documented)
    assert set(r["controls"]) <= documented, set(r["controls"]) - documented
    text = SCHEMA_DOC.read_text(encoding="utf-8")
    assert all(f"`{name}`" in text for name in EXACT)


def test_every_exact_variant_passed_its_twelve_configurations(out_dir):
    r = results(out_dir)
    assert list(r["exact"]) == EXACT
    for name, block in r["exact"].items():
        assert len(block["grid"]) == 12 and all(row["passed"] for row in block["grid"]), name
        assert block["largest_logit_err"]["fp32"] < 1e-5 and block["largest_logit_err"]["fp64"] < 1e-10, name
        assert {(row["dtype"], row["batch"], row["chunk"]) for row in block["grid"]} == {
            (d, b, c) for d in ("fp32", "fp64") for b in (1, 2) for c in (1, 2, 5)}


def test_every_control_recorded_and_caught(out_dir, nb):
    r = results(out_dir)
    expected = CONTROLS if nb["HAVE_HF"] else [c for c in CONTROLS if c != "pattern_shifted_by_one_layer"]
    assert list(r["controls"]) == expected
    assert all(c["caught"] is True and {"section", "check", "measured"} <= set(c) for c in r["controls"].values())
    rope = r["controls"]["rope_on_compressed_part"]
    assert rope["own_cache_exact"] is True and rope["distance_errors"] == r["mla"]["why_rope_split"]
    assert r["controls"]["shared_cache_written_twice"]["seen_after_stream"] == 2 * r["config"]["stream_tokens"]


def test_referees_recorded(out_dir, nb):
    r = results(out_dir)["referees"]
    if not nb["HAVE_HF"]:
        assert r["deepseek_v3"] is None and r["ministral"] is None and r["skipped"]
        return
    assert r["skipped"] is None and r["transformers"] == nb["ENVIRONMENT"]["transformers"]
    for name in ("absorbed_hf_precision", "latent_hf_precision"):
        assert set(r["deepseek_v3"][name]) == {"full"} | {f"{k}_{c}" for k in ("cached_chunk", "cache_chunk") for c in (1, 2, 5)}
        assert max(r["deepseek_v3"][name].values()) < 1e-10
    assert 1e-10 < r["deepseek_v3"]["absorbed_pure_fp64"]["full"] < 1e-5
    assert max(r["ministral"]["hf_precision"].values()) < 1e-10


def test_eviction_block_and_bounds(out_dir):
    e = results(out_dir)["eviction"]
    assert e["budgets"] == [16, 32, 64] and e["decode_steps"] == 16 and e["prompts"] == 2       # quick mode
    for case in ("plain", "favourites"):
        assert set(e["runs"][case]) == {f"{p}/{b}" for p in ("h2o", "snapkv", "random") for b in e["budgets"]}
        assert all(run["exact"] == (run["budget"] == e["prompt_tokens"]) for run in e["runs"][case].values())


def test_figures_written(out_dir):
    r = results(out_dir)
    assert r["figures"] == ["mla_cost.png", "cache_growth.png", "sinks_vs_dense.png", "eviction_sweep.png"]
    assert all((out_dir / name).stat().st_size > 1000 for name in r["figures"])
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(r["figures"] + ["results.json"])
