# %% [markdown] lang="en"
# ## 10. Summary and saved results
#
# Three tables sum up the run: every exact variant, every negative control and every referee. The build also
# writes all of it to `results.json` (schema: `docs/kv-cache-architectures-results-schema.md` in the repository),
# published with the figures in `outputs/infra-benchmark/kv-cache-architectures/`; a reader who runs the notebook
# finds the figures in `OUTPUT_DIR`.

# %% [markdown] lang="zh"
# ## 10. 汇总与保存的结果
#
# 三张表汇总本次运行：每个精确变体、每个负对照和每个裁判。构建时还会把这些内容全部写入 `results.json`（文件格式见仓库中的 `docs/kv-cache-architectures-results-schema.md`），与图片一起发布在 `outputs/infra-benchmark/kv-cache-architectures/` 下；自己运行本笔记本的读者可以在 `OUTPUT_DIR` 中找到这些图片。

# %%
EXACT_GRIDS = {"gqa2": GQA_GRIDS["gqa2"], "mqa": GQA_GRIDS["mqa"], "rope": ROPE_GRID, "window": WINDOW_GRID,
               "window_ring_chunks": RING_CHUNK_RUNS, "window_wider_than_stream": WINDOW_WIDER_THAN_STREAM,
               "sdpa_bool_mask": SDPA_GRIDS["sdpa_bool_mask"], "sdpa_lower_right": SDPA_GRIDS["sdpa_lower_right"]}
REFEREES = {"Llama": LLAMA_CROSS["hf_precision"], "Mistral": MISTRAL_CROSS["hf_precision"]} if HAVE_HF else {}

# %% tags=["record"]
CONTROL_FIELDS = {
    "tiled_kv_heads": {"measured": HEAD_LOOP["tiled"], "cached_vs_full_passed": all(r["passed"] for r in TILED_GRID)},
    "rope_turned_backwards": {"measured": ROPE_FORMULA["backwards"],
                              "shift_test_passed": ROPE_FORMULA["backwards_shift_error"] < 1e-12},
    "rotated_from_zero": rotated,
    "window_one_key_too_wide": wide | {"keys_read_last": wide_keys[-1]},
    "window_one_key_too_narrow": {"cached_vs_full_passed": narrow_passed, "keys_read_last": narrow_keys[-1],
                                  "measured": sum(n != k for n, k in zip(narrow_keys, KEYS_READ))},
    "crop_to_window": {"measured": CROP["crop_W_restart"]},
    "scale_forgotten": {"measured": FORGOTTEN["max_abs_logit_err"], "agreement": FORGOTTEN["agreement"]},
    "is_causal_after_cache": sdpa_control | {"measured": min(sdpa_control["errors"][2:])},
}
if HAVE_HF:
    CONTROL_FIELDS["tiled_kv_heads"]["referee_full_logit_err"] = LLAMA_CROSS["tiled_kv_heads"]["full"]
    CONTROL_FIELDS["window_one_key_too_wide"]["referee_full_logit_err"] = MISTRAL_CROSS["window_one_key_too_wide"]["full"]
for name, fields in CONTROL_FIELDS.items():
    CONTROLS[name] = CONTROLS[name] | {key: value for key, value in fields.items() if key not in CONTROLS[name]}
RESULTS = {
    "config": {
        "base": {"vocab": cfg.vocab, "width": cfg.width, "heads": cfg.heads, "head_dim": cfg.head_dim,
                 "layers": cfg.layers, "mlp": cfg.mlp, "max_positions": cfg.max_positions, "seed": SEED},
        "llama_like": {"kv_heads": LLAMA_CFG.n_kv, "rope": LLAMA_CFG.rope, "rope_theta": LLAMA_CFG.rope_theta, "norm": LLAMA_CFG.norm,
                       "eps": LLAMA_CFG.eps, "mlp_kind": LLAMA_CFG.mlp_kind, "bias": LLAMA_CFG.bias},
        "stream_tokens": STREAM_LEN,
        "tolerances": {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]},
    },
    "exact": {name: {"largest_logit_err": {dtype: largest(rows, dtype) for dtype in ("fp32", "fp64")}, "grid": rows}
              for name, rows in EXACT_GRIDS.items()},
    "gqa": {"mha_reproduces_decoder": MHA_SAME,
            "layout_demo": {"lengths": len(LAYOUT_DIFF), "lengths_differing": LAYOUT["lengths_differing"],
                            "max_abs_diff": LAYOUT["max_abs_diff"]},
            "head_map": HEAD_MAP, "payload": {str(h): v for h, v in GQA_PAYLOAD.items()}, "head_loop": HEAD_LOOP},
    "rope": {"relative_position": RELATIVE | {"shifts": SHIFTS}, "formula": ROPE_FORMULA, "uniform_shift": SHIFT_LESSON},
    "sliding_window": {"window": WINDOW, "ring_slots": WINDOW - 1, "ring_held": RING_HELD, "ring_bytes": RING_FORMULA_BYTES,
                       "keys_read": KEYS_READ, "crop": CROP},
    "quantized": {"residual": RESIDUAL, "group": GROUP, "prompt_tokens": PROMPT_LEN, "steps": GEN_STEPS,
                  "bounds": {str(b): v for b, v in BOUNDS.items()},
                  "exact_while_window_covers": {str(b): v for b, v in QUANT_EXACT_WINDOW.items()},
                  "runs": {str(b): {k: v for k, v in r.items() if k != "cache"} for b, r in QUANT.items()},
                  "memory": QUANT_MEMORY, "round_trip_steps": QUANT_ROUND_TRIP},
    "fused": {"timing": {"protocol": {"threads": torch.get_num_threads(), "dtype": "fp32", "prompt_tokens": TIMING_PROMPT,
                                      "warmups": WARMUPS, "repeats": REPEATS, "order": "alternating",
                                      "clock": "time.perf_counter_ns", "unit": "ms"},
                         "results": FUSED_TIMING},
              "decode_profile": {"rounds": PROFILE_ROUNDS, "steps_per_round": PROFILE_STEPS, "paths": DECODE_PROFILE}},
    "memory_table": {"config": "Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json)", "context": CONTEXT,
                     "window": MISTRAL_WINDOW, "kivi_group": KIVI_GROUP, "kivi_residual": KIVI_RESIDUAL,
                     "bytes_per_element": FP16, "rows": MEMORY_TABLE} | MEMORY,
    "cross_checks": {"transformers": ENVIRONMENT["transformers"], "skipped": HF_SKIP, "tolerance": TOLERANCE[torch.float64],
                     "llama_fp32_steps": LLAMA_FP32_STEPS, "llama": LLAMA_CROSS, "mistral": MISTRAL_CROSS},
    "controls": CONTROLS,
}
FIGURES = [MASKS_PNG.name, GQA_PNG.name, WINDOW_PNG.name, QUANT_PNG.name, MEMORY_PNG.name]
RESULTS_JSON = save_results("infra-benchmark/kv-cache-architectures", 3, RESULTS, FIGURES)
