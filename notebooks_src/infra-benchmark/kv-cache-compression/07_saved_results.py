# %% [markdown] lang="en"
# ## 9. Saved results
#
# Everything this run checked and measured goes into `results.json` in `OUTPUT_DIR`, next to the figures: every
# grid row of every exact variant, the MLA memory and multiply-add counts, the DeepSeek-V3 and Gemma 3 tables, the
# streaming and eviction measurements with their bounds, the referees' errors (or why they were skipped), and
# every negative control with what it measured and whether it was caught. The schema is documented in
# `docs/kv-cache-compression-results-schema.md` in the repository. The tables below are built from the same
# dictionary that is written.

# %% [markdown] lang="zh"
# ## 9. 保存结果
#
# 本次运行检查和测量的全部内容都写入 `OUTPUT_DIR` 下的 `results.json`，与图片放在一起：每种精确变体的每一行网格结果，MLA 的内存与乘加次数，DeepSeek-V3 与 Gemma 3 的表格，流式缓存与淘汰策略的测量结果及其误差界，各裁判的误差（或跳过的原因），以及每个负对照测得的数值和是否被查出。文件格式见仓库中的 `docs/kv-cache-compression-results-schema.md`。下面的表格就是由写入文件的同一个字典生成的。

# %%
EXACT_GRIDS = {"gqa_base": BASE_GRID, "mla_naive": MLA_GRIDS["naive"], "mla_latent": MLA_GRIDS["latent"],
               "mla_absorbed": MLA_GRIDS["absorbed"], "mla_absorbed_vs_naive": ABSORBED_VS_NAIVE,
               "local_global": LOCAL_GLOBAL_GRID, "shared_pairs": SHARED_GRID, "sinks_and_window": STREAMING_GRID}
RESULTS = {
    "schema_version": 1,
    "notebook": "infra-benchmark/kv-cache-compression",
    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "quick": bool(QUICK),
    "environment": ENVIRONMENT,
    "config": {
        "model": {"vocab": llama_cfg.vocab, "width": llama_cfg.width, "heads": llama_cfg.heads, "kv_heads": llama_cfg.kv_heads,
                  "head_dim": llama_cfg.head_dim, "layers": llama_cfg.layers, "mlp": llama_cfg.mlp, "rope_theta": llama_cfg.rope_theta,
                  "eps": llama_cfg.eps, "seed": SEED},
        "mla": {"latent": mla_cfg.latent, "rope_dim": mla_cfg.rope_dim, "nope_dim": mla_cfg.nope_dim, "value_dim": mla_cfg.value_dim},
        "window": WINDOW, "sinks": SINKS, "local_global_pattern": LOCAL_GLOBAL, "stream_tokens": STREAM_LEN,
        "tolerances": {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]},
    },
    "exact": {name: {"largest_logit_err": {dtype: largest(rows, dtype) for dtype in ("fp32", "fp64")}, "grid": rows}
              for name, rows in EXACT_GRIDS.items()},
    "mla": {"memory": MLA_MEMORY, "decode_macs": {form: {str(k): v for k, v in by_keys.items()} for form, by_keys in MACS.items()},
            "why_rope_split": {str(d): e for d, e in WHY_ROPE_SPLIT.items()},
            "deepseek_v3": {"source": "deepseek-ai/DeepSeek-V3 config.json", "layers": DEEPSEEK_V3.layers, "heads": DEEPSEEK_V3.heads,
                            "latent": DEEPSEEK_V3.latent, "rope_dim": DEEPSEEK_V3.rope_dim, "nope_dim": DEEPSEEK_V3.nope_dim,
                            "value_dim": DEEPSEEK_V3.value_dim, "bytes_per_element": BF16, "context": CONTEXT_128K,
                            "elements_per_token_per_layer": DEEPSEEK_MEMORY, "decode_trade": MLA_TRADE}},
    "local_global": {"memory": LOCAL_GLOBAL_MEMORY,
                     "gemma3_27b": {"source": "google/gemma-3-27b-it config.json (text_config)", **GEMMA3_27B, **GEMMA3_MEMORY,
                                    "context": CONTEXT_128K, "bytes_per_element": BF16}},
    "shared_pairs": {"caches": len(distinct(shared_cache)), "growth": {name: [sum(h) for h in held] for name, held in GROWTH.items()}},
    "streaming": {"dense_distance": DENSE_DISTANCE, "distances": SINK_DISTANCES},
    "eviction": {"prompt_tokens": PROMPT_LEN, "prompts": PROMPTS_N, "decode_steps": STEPS, "budgets": BUDGETS,
                 "query_biases": QUERY_BIASES, "bounds": EVICTION_BOUNDS, "runs": EVICTION},
    "referees": {"transformers": ENVIRONMENT["transformers"], "skipped": HF_SKIP, "tolerance": TOLERANCE[torch.float64],
                 "deepseek_v3": DEEPSEEK_REFEREE, "ministral": MINISTRAL_REFEREE},
    "controls": CONTROLS,
    "figures": [MASKS_PNG.name, MLA_COST_PNG.name, GROWTH_PNG.name, SINKS_PNG.name, EVICTION_PNG.name],
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
assert json.loads(RESULTS_JSON.read_text(encoding="utf-8")) == json.loads(json.dumps(RESULTS))

# %% [markdown] lang="en"
# The exact variants: for each, the largest difference between its cached path and its full recomputation over the 12
# configurations, in FP32 and FP64 (the absorbed-versus-naive row compares two forms instead). All sit at the rounding
# level of their dtype.

# %% [markdown] lang="zh"
# 各精确变体：每一种在 12 种配置上，缓存路径与完整重算之间的最大差异，分 FP32 和 FP64 列出（“吸收对照朴素”一行比较的是两种形式）。它们都处在各自精度的舍入误差水平。

# %%
say_table([[f"`{name}`", f"{v['largest_logit_err']['fp32']:.1e}", f"{v['largest_logit_err']['fp64']:.1e}"]
           for name, v in RESULTS["exact"].items()],
          en=["variant", "largest logit error, FP32", "largest logit error, FP64"],
          zh=["变体", "logits 最大误差（FP32）", "logits 最大误差（FP64）"])

# %% [markdown] lang="en"
# The negative controls: each broke one thing on purpose, and each check caught it. The measured column is the
# smallest logit error of the failing runs (for the eviction control, the smallest ratio of random eviction's mean
# error to the worse policy's). The control recorded only with `transformers` is the shifted layer pattern, which
# only the Ministral referee can see.

# %% [markdown] lang="zh"
# 负对照：每一个都故意改坏了一处，每一处都被相应的检查查出。“测得值”一列是失败运行中最小的 logits 误差（对淘汰策略的负对照，则是随机淘汰的平均误差与较差策略的平均误差之比的最小值）。只有安装了 `transformers` 才会记录的负对照是错开一层的模式，只有 Ministral 裁判能发现它。

# %%
say_table([[f"`{name}`", str(c["section"]), f"`{c['check']}`",
            f"{c.get('max_abs_logit_err', c.get('smallest_error_ratio')):.2f}", f"`{c['caught']}`"] for name, c in CONTROLS.items()],
          en=["control", "section", "check", "measured", "caught"], zh=["负对照", "节", "检查", "测得值", "查出"])
assert all(c["caught"] for c in CONTROLS.values())
if HAVE_HF:
    say(en=f"Referees, transformers {ENVIRONMENT['transformers']} (FP64): DeepSeek-V3 "
           f"{max(DEEPSEEK_REFEREE['absorbed_hf_precision'].values()):.1e}, Ministral {max(MINISTRAL_REFEREE['hf_precision'].values()):.1e}.",
        zh=f"裁判，transformers {ENVIRONMENT['transformers']}（FP64）：DeepSeek-V3 "
           f"{max(DEEPSEEK_REFEREE['absorbed_hf_precision'].values()):.1e}，Ministral {max(MINISTRAL_REFEREE['hf_precision'].values()):.1e}。")
else:
    say(en=f"The Hugging Face referees are skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"Hugging Face 裁判已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")

if IN_COLAB:
    from google.colab import files
    for name in ["results.json"] + RESULTS["figures"]:
        files.download(str(OUT / name))
