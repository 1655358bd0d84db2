# %% [markdown] lang="en"
# ## 10. Saved results
#
# The results of this run go into `results.json` in `OUTPUT_DIR`, next to the four figures
# (`masks.png`, `cache_growth.png`, `timing.png`, `generation.png`): environment, model configuration,
# the growing cache and the 12 equivalence configurations, the causality and cache checks, the greedy
# generation, the broken variants, the cost model (counts, K/V sizes of published models, the count next
# to the measured time per step), the timing protocol with the raw samples of every path and its
# headline, the call times of the whole generation of 9.3 and the profile of 9.5. The file's fields are
# documented in the repository (`docs/kv-cache-results-schema.md`). On Colab the cell also offers the
# files for download. Sections 11 and 12 write nothing; the Hugging Face comparison's own results file
# belongs to the companion notebook `infra-benchmark/kv-cache-hf-gpt2`. The cell is bookkeeping, one
# dictionary that gathers what the sections above computed: nothing new is computed or checked in it.

# %% [markdown] lang="zh"
# ## 10. 保存结果
#
# 本次运行的结果写入 `OUTPUT_DIR` 下的 `results.json`，与四幅图（`masks.png`、`cache_growth.png`、`timing.png`、`generation.png`）放在一起，包括：运行环境、模型配置、逐步增长的缓存和 12 种等价性配置、因果性与缓存检查、贪心生成、改坏的版本、开销模型（乘加次数、公开模型的 K/V 大小、乘加次数与实测每步时间的对照）、计时规程和每条路径的原始样本及主要结论、9.3 中一次完整生成里每次调用的时刻，以及 9.5 的性能分析结果。各字段的含义见仓库中的 `docs/kv-cache-results-schema.md`。在 Colab 上，这个单元格还会把这些文件下载到本地。第 11、12 节不写任何文件；与 Hugging Face 比较的结果文件属于配套笔记本 `infra-benchmark/kv-cache-hf-gpt2`。这个单元格只做记录：它用一个字典汇总前面各节算出的结果，不做新的计算，也不做新的检查。

# %% tags=["hide-input"]
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
    "negative_controls": NEGATIVE_CONTROLS,
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
            "continuation_tokens": CONTINUATION, "order_rotation": True, "paths": list(PATHS),
            "clock": "time.perf_counter_ns", "unit": "ms",
        },
        "rows": TIMING_ROWS,
        "headline": {"prompt_tokens": longest["prompt_tokens"], "speedup_p50": SPEEDUP, "speedup_cpu_p50": SPEEDUP_CPU_P50,
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
                          "cpu_ms": GEN_CPU, "faults": GEN_FAULTS},
    "figures": [MASKS_PNG.name, CACHE_GROWTH_PNG.name, TIMING_PNG.name, GENERATION_PNG.name],
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

say(en=f"Wrote `{RESULTS_JSON.name}` and " + ", ".join(f"`{name}`" for name in RESULTS["figures"]) + ".",
    zh=f"已写入 `{RESULTS_JSON.name}` 和 " + "、".join(f"`{name}`" for name in RESULTS["figures"]) + "。")

if IN_COLAB:
    from google.colab import files
    for name in [RESULTS_JSON.name, *RESULTS["figures"]]:
        files.download(str(OUT / name))
