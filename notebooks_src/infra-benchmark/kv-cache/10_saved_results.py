# %% [markdown] lang="en"
# ## 10. Saved results
#
# The build writes what this run measured and checked to `results.json` (fields documented in the
# repository's `docs/kv-cache-results-schema.md`), published with the figures in
# `outputs/infra-benchmark/kv-cache/`. A reader who runs the notebook finds the four figures
# (`masks.png`, `cache_growth.png`, `timing.png`, `generation.png`) in `OUTPUT_DIR`.

# %% [markdown] lang="zh"
# ## 10. 保存结果
#
# 构建时，这次运行测得和检查过的结果写入 `results.json`（各字段的含义见仓库中的 `docs/kv-cache-results-schema.md`），与图一起发布在 `outputs/infra-benchmark/kv-cache/` 下。读者自己运行本笔记本时，四幅图（`masks.png`、`cache_growth.png`、`timing.png`、`generation.png`）保存在 `OUTPUT_DIR` 中。

# %% tags=["record"]
import json
from datetime import datetime, timezone

RESULTS = {
    "schema_version": 3,
    "notebook": "infra-benchmark/kv-cache",
    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "quick": bool(QUICK),
    "environment": ENVIRONMENT,
    "config": {
        "vocab": cfg.vocab, "width": cfg.width, "heads": cfg.heads, "head_dim": cfg.head_dim,
        "layers": cfg.layers, "mlp": cfg.mlp, "max_positions": cfg.max_positions,
        "params": N_PARAMS, "seed": SEED,
    },
    "equivalence": {
        "cache_growth": {"calls": GROWTH_CALLS, "cache_lengths": cache_lengths, "max_abs_logit_err": call_errors},
        "stream_tokens": STREAM_LEN,
        "tolerances": {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]},
        "configs": [{k: r[k] for k in ("batch", "chunk", "dtype", "max_abs_logit_err", "max_abs_kv_err", "passed")}
                    for r in EQUIVALENCE],
        "causality": CAUSALITY,
        "causality_ok": CAUSALITY["passed"],
        "cache_unchanged_ok": bool(CACHE_UNCHANGED_OK),
    },
    "generation": {
        "prompt_tokens": GEN_PROMPT_LEN, "new_tokens": GEN_TOKENS, "batch": int(GEN_PROMPTS.shape[0]),
        "prompts": GEN_PROMPTS.tolist(), "tokens": GEN_CACHED.tolist(), "tolerance": GEN_TOL,
        **GENERATION,
        "negative_control": {"mask_fn": "local_triangle_mask", **GENERATION_BROKEN},
    },
    "negative_controls": {
        variant: {
            "max_abs_logit_err": runs[0]["max_abs_logit_err"],
            "detected": not all(r["passed"] for r in runs),
            "scenarios": [{k: r[k] for k in ("scenario", "chunk", "max_abs_logit_err", "max_abs_kv_err", "passed")}
                          for r in runs],
        }
        for variant, runs in CONTROL_RUNS.items() if variant != "correct"
    },
    "cost_model": {
        "unit": "multiply-adds of matrix products",
        "steps": COST_ROWS,
        "hidden_state_cache": HIDDEN_STATE,
        "kv_fp16": KV_TABLE,
        "per_step": PER_STEP,
        "summary": TIMING_SUMMARY,
    },
    "timing": {
        "protocol": {
            "threads": torch.get_num_threads(), "dtype": "fp32", "warmups": WARMUPS, "repeats": REPEATS,
            "continuation_tokens": CONTINUATION, "order_rotation": True, "untimed_pass": True, "paths": list(PATHS),
            "clock": "time.perf_counter_ns", "unit": "ms",
        },
        "rows": TIMING_ROWS,
        "headline": {"prompt_tokens": longest["prompt_tokens"], "speedup_p50": longest["full_ms"]["p50"] / longest["cached_ms"]["p50"], "speedup_cpu_p50": SPEEDUP_CPU_P50,
                     "speedup_cpu_min": SPEEDUP_CPU, "speedup_min": SPEEDUP_CLOCK_MIN,
                     "positions_fed": {"full": WORK["full"], "cached": WORK["cached"]},
                     "macs_ratio": window_macs(longest["prompt_tokens"], "full") / window_macs(longest["prompt_tokens"], "cached")},
    },
    "profile": {
        "repeats": PROFILE_REPEATS, "sessions": PROFILE_SESSIONS, "unit": "us",
        "calls": {label: {"top_level": run["top_level"],
                          "ops": {name: {"calls": calls, "self_us": us} for name, (calls, us) in run["ops"].items()}}
                  for label, run in PROFILES.items()},
    },
    "generation_timing": {"prompt_tokens": int(GEN_TIME_PROMPT.shape[1]), "new_tokens": GEN_TIME_TOKENS,
                          "calls_ms": {path: [list(call) for call in calls] for path, calls in GEN_TIME.items()},
                          "cpu_ms": GEN_CPU, "faults": {path: run[3] for path, run in GEN_RUNS.items()}},
    "figures": [MASKS_PNG.name, CACHE_GROWTH_PNG.name, TIMING_PNG.name, GENERATION_PNG.name],
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

