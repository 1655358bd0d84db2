# %% [markdown] lang="en"
# ## 8. What this run checked
#
# The tables below sum up the run: every exact variant, every negative control (the shifted-pattern one needs `transformers`), the referees. The build also writes
# them, with every measured number above, to `results.json` (schema: `docs/kv-cache-compression-results-schema.md`)
# in `outputs/infra-benchmark/kv-cache-compression/`; a reader who runs the notebook gets the figures in
# `OUTPUT_DIR`. The folded cell names the grids and referee results the tables read.

# %% [markdown] lang="zh"
# ## 8. 本次运行检查了什么
#
# 下面的表格汇总本次运行：每个精确变体、每个负对照（错开一层的模式需要 `transformers`）和各个裁判。构建时还会把它们连同上文测得的每个数值写入 `outputs/infra-benchmark/kv-cache-compression/` 下的 `results.json`（格式见 `docs/kv-cache-compression-results-schema.md`）；读者自己运行本笔记本时，图片保存在 `OUTPUT_DIR` 中。折叠的单元格给出表格所用的各个网格和裁判结果。

# %% tags=["hide-input"]
EXACT_GRIDS = {"gqa_base": BASE_GRID, "mla_naive": MLA_GRIDS["naive"], "mla_latent": MLA_GRIDS["expand_on_read"],
               "mla_absorbed": MLA_GRIDS["absorbed"], "mla_absorbed_vs_naive": ABSORBED_VS_NAIVE,
               "local_global": LOCAL_GLOBAL_GRID, "shared_pairs": SHARED_GRID, "sinks_and_window": STREAMING_GRID}
REFEREES = ({"DeepSeek-V3": DEEPSEEK_REFEREE["absorbed_hf_precision"], "Ministral": MINISTRAL_REFEREE["hf_precision"]}
            if HAVE_HF else {})

# %% tags=["record"]
CONTROLS["rope_on_compressed_part"] |= {"own_cache_exact": all(r["passed"] for rows in ROPE_ON_COMPRESSED_OWN.values() for r in rows),
                                         "distance_errors": WHY_ROPE_SPLIT}
if HAVE_HF:
    CONTROLS["rope_on_compressed_part"]["referee_full_logit_err"] = DEEPSEEK_REFEREE["rope_on_compressed_part"]["full"]
    CONTROLS["pattern_shifted_by_one_layer"]["own_cache_exact"] = shifted_own["passed"]
CONTROLS["shared_cache_written_twice"]["seen_after_stream"] = doubled_cache[0].seen
CONTROLS["random_eviction"]["other_prompt_sets"] = min(min(r.values()) for name, r in RANDOM_RATIOS.items() if name != "main")
RESULTS = {
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
            "why_rope_split": {str(d): e for d, e in WHY_ROPE_SPLIT.items()}, "expanded_per_decode_step": MATERIALISED,
            "deepseek_v3": {"source": "deepseek-ai/DeepSeek-V3 config.json", "layers": DEEPSEEK_V3.layers, "heads": DEEPSEEK_V3.heads,
                            "latent": DEEPSEEK_V3.latent, "rope_dim": DEEPSEEK_V3.rope_dim, "nope_dim": DEEPSEEK_V3.nope_dim,
                            "value_dim": DEEPSEEK_V3.value_dim, "bytes_per_element": BF16, "context": CONTEXT_128K,
                            "elements_per_token_per_layer": DEEPSEEK_MEMORY, "decode_trade": MLA_TRADE, "intensity": MLA_INTENSITY}},
    "local_global": {"memory": LOCAL_GLOBAL_MEMORY,
                     "gemma3_27b": {"source": "google/gemma_pytorch gemma/config.py, get_config_for_27b_v3", **GEMMA3_27B, **GEMMA3_MEMORY,
                                    "context": CONTEXT_128K, "bytes_per_element": BF16}},
    "shared_pairs": {"caches": len(distinct(shared_cache)), "vs_ordinary_max_abs_logit_err": SHARED_VS_ORDINARY, "growth": {name: [sum(h) for h in held] for name, held in GROWTH.items()}},
    "streaming": {"examples": {f"S={s},W={w},p={q}": {"text_positions": text, "cache_positions": cached}
                               for (s, w, q), (text, cached) in SINK_EXAMPLES.items()},
                  "dense_distance": DENSE_DISTANCE, "distances": SINK_DISTANCES},
    "eviction": {"prompt_tokens": PROMPT_LEN, "prompts": PROMPTS_N, "decode_steps": STEPS, "budgets": BUDGETS,
                 "query_biases": QUERY_BIASES, "budget_cache_positions_shape": BUDGET_SHAPES, "bounds": EVICTION_BOUNDS, "runs": EVICTION, "random_error_ratios": RANDOM_RATIOS},
    "referees": {"transformers": ENVIRONMENT["transformers"], "skipped": HF_SKIP, "tolerance": TOLERANCE[torch.float64],
                 "deepseek_v3": DEEPSEEK_REFEREE, "ministral": MINISTRAL_REFEREE},
    "controls": CONTROLS,
}
FIGURES = [MLA_COST_PNG.name, GROWTH_PNG.name, SINKS_PNG.name, EVICTION_PNG.name]
RESULTS_JSON = save_results("infra-benchmark/kv-cache-compression", 4, RESULTS, FIGURES)

# %% tags=["prose-values"]
plain_vs_h2o = {b: EVICTION["plain"][f"random/{b}"]["mean_max_abs_logit_err"] / EVICTION["plain"][f"h2o/{b}"]["mean_max_abs_logit_err"]
                for b in BUDGETS if b < PROMPT_LEN}
lowest_highest = lambda ratios: {"lowest": min(ratios.values()), "lowest_budget": min(ratios, key=ratios.get),
                                 "highest": max(ratios.values()), "highest_budget": max(ratios, key=ratios.get)}
{"mla": {"absorbed_vs_naive_macs": per_key_absorbed / per_key_naive,
         "absorbed_vs_naive_total_macs": MLA_TRADE["forms"]["absorbed"]["macs"] / MLA_TRADE["forms"]["naive"]["macs"], "naive_vs_latent_bytes": expanded_elements(DEEPSEEK_V3) / mla_elements(DEEPSEEK_V3),
         "absorbed_vs_naive_fp64": largest(ABSORBED_VS_NAIVE, "fp64"),
         "absorbed_vs_naive_fp64_exponent": round(math.log10(largest(ABSORBED_VS_NAIVE, "fp64"))), "tp8_mha_per_gpu": DEEPSEEK_MEMORY["mha"] // 8,
         "latent_expanded_gib": materialised_bytes(DEEPSEEK_V3, "expand_on_read", MLA_TRADE["context"]) / GiB,
         "expand_on_read_traffic_ratio": EXPAND_ON_READ_TRAFFIC_RATIO, "expand_on_read_macs_ratio": EXPAND_ON_READ_MACS_RATIO,
         "naive_flop_per_byte": MLA_INTENSITY["naive_flop_per_byte"], "absorbed_flop_per_byte": MLA_INTENSITY["absorbed_flop_per_byte"],
         "h100_ridge": MLA_INTENSITY["h100_ridge"]},
 "local_global": {"gemma3_uniform_gib": GEMMA3_MEMORY["uniform_gib"], "gemma3_mixed_gib": GEMMA3_MEMORY["mixed_gib"],
                  "gemma3_local_layers": GEMMA3_MEMORY["local_layers"], "gemma3_global_layers": GEMMA3_MEMORY["global_layers"]},
 "shared": {"vs_ordinary": SHARED_VS_ORDINARY, "crossover": GROWTH_CROSSOVER},
 "sinks": {"max_cache_distance": SINK_DISTANCES["max_cache_distance"], "max_text_distance": SINK_DISTANCES["max_text_distance"],
           "agreement_with_sinks": DENSE_DISTANCE["sinks_and_window"]["greedy_agreement"],
           "agreement_window_only_same_positions": DENSE_DISTANCE["window_only"]["greedy_agreement"]},
 "eviction": {"h2o_half_agreement": fav[f"h2o/{half}"]["greedy_agreement"], "h2o_half_error": fav[f"h2o/{half}"]["mean_max_abs_logit_err"],
              "snapkv_half_agreement": fav[f"snapkv/{half}"]["greedy_agreement"],
              "snapkv_half_error": fav[f"snapkv/{half}"]["mean_max_abs_logit_err"],
              "random_ratio_smallest": RANDOM_RATIOS["main"][min(RANDOM_RATIOS["main"])], "random_ratio_half": RANDOM_RATIOS["main"][half],
              "random_ratio": lowest_highest(RANDOM_RATIOS["main"]),
              "random_ratio_other_prompts": min(min(r.values()) for name, r in RANDOM_RATIOS.items() if name != "main"),
              "plain_random_vs_h2o": lowest_highest(plain_vs_h2o) | {"random_closer": sum(q < 1 for q in plain_vs_h2o.values()),
                                                                     "budgets": len(plain_vs_h2o)}},
 "takeaways": {"deepseek_latent": DEEPSEEK_MEMORY["mla_latent"], "deepseek_expanded": DEEPSEEK_MEMORY["mla_naive"],
               "mla_fp32": max(largest(MLA_GRIDS[form], "fp32") for form in MLA_FORMS),
               "absorbed_vs_naive_fp32": largest(ABSORBED_VS_NAIVE, "fp32")}}
