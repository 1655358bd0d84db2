# %% [markdown] lang="en"
# ## 10. Saved results
#
# Everything this run checked and measured goes into `results.json` in `OUTPUT_DIR`, next to the figures:
# per variant the criteria with their largest errors, the negative controls, the cross-checks with
# Hugging Face (or why they were skipped), the quantization bounds and measurements, the attention
# timings with their raw samples, and the memory table. The schema is documented in
# `docs/kv-cache-architectures-results-schema.md` in the repository. The summary table below is built from
# the same dictionary that is written.

# %% [markdown] lang="zh"
# ## 10. 保存结果
#
# 本次运行检查和测量的全部内容都写入 `OUTPUT_DIR` 下的 `results.json`，与图片放在一起：每种变体的判据及其最大误差、负对照、与 Hugging Face 的交叉核对（或跳过的原因）、量化的误差界与测量结果、注意力计时及其原始样本，以及内存表。文件格式见仓库中的 `docs/kv-cache-architectures-results-schema.md`。下面的汇总表就是由写入文件的同一个字典生成的。

# %%
def grid_rows(rows: list[dict]) -> list[dict]:
    keys = ("batch", "chunk", "dtype", "max_abs_logit_err", "max_abs_kv_err", "passed")
    return [{k: r[k] for k in keys if k in r} for r in rows]


def largest(rows: list[dict]) -> float:
    return max(r["max_abs_logit_err"] for r in rows)


def control_rows(rows: list[dict]) -> list[dict]:
    return [{k: r[k] for k in ("chunk", "max_abs_logit_err", "passed")} for r in rows]


RESULTS = {
    "schema_version": 1,
    "notebook": "infra-benchmark/kv-cache-architectures",
    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "quick": bool(QUICK),
    "environment": ENVIRONMENT,
    "config": {
        "base": {"vocab": cfg.vocab, "width": cfg.width, "heads": cfg.heads, "head_dim": cfg.head_dim,
                 "layers": cfg.layers, "mlp": cfg.mlp, "max_positions": cfg.max_positions, "seed": SEED},
        "llama_like": {"kv_heads": LLAMA_CFG.n_kv, "norm": LLAMA_CFG.norm, "mlp_kind": LLAMA_CFG.mlp_kind,
                       "bias": LLAMA_CFG.bias, "rope_theta": LLAMA_CFG.rope_theta},
        "stream_tokens": STREAM_LEN,
        "tolerances": {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]},
    },
    "gqa": {
        "mha_reproduces_decoder": MHA_SAME,
        "layout_demo": {"lengths": len(LAYOUT_DIFF), "lengths_differing": LAYOUT["lengths_differing"],
                        "max_abs_diff": LAYOUT["max_abs_diff"]},
        "grids": {name: grid_rows(rows) for name, rows in GQA_GRIDS.items()},
        "payload": {str(h): v for h, v in GQA_PAYLOAD.items()},
        "head_loop": HEAD_LOOP,
        "controls": {"tile_kv": TILE_CONTROL},
    },
    "rope": {
        "relative_position": RELATIVE | {"shifts": SHIFTS},
        "formula": ROPE_FORMULA,
        "grid": grid_rows(ROPE_GRID),
        "controls": {
            "rotated_from_zero": control_rows(ROPE_FROM_ZERO),
            "uniform_shift": {"rope_max_abs_logit_diff": SHIFT_LESSON["rope_max_abs_logit_diff"],
                              "learned_max_abs_logit_diff": SHIFT_LESSON["learned_max_abs_logit_diff"],
                              "rope_cached_vs_full_passed": SHIFT_LESSON["rope_cached_vs_full"]["passed"],
                              "learned_cached_vs_full_passed": SHIFT_LESSON["learned_cached_vs_full"]["passed"]},
        },
    },
    "sliding_window": {
        "window": WINDOW,
        "ring_slots": WINDOW - 1,
        "grid": grid_rows(WINDOW_GRID),
        "ring_chunks": grid_rows(RING_CHUNK_RUNS),
        "window_ge_stream_grid": grid_rows(WINDOW_EQUALS_UNWINDOWED),
        "ring_max_stored": RING_MAX_STORED,
        "controls": {"off_by_one": control_rows(OFF_BY_ONE), "crop": CROP},
    },
    "quantized": {
        "residual": 16, "group": 8, "prompt_tokens": PROMPT_LEN, "steps": GEN_STEPS,
        "bounds": {str(b): v for b, v in BOUNDS.items()},
        "exact_while_window_covers": {str(b): v for b, v in QUANT_EXACT_WINDOW.items()},
        "runs": {str(b): {k: v for k, v in r.items() if k != "cache"} for b, r in QUANT.items()},
        "memory": QUANT_MEMORY,
        "round_trip_steps": QUANT_ROUND_TRIP,
        "controls": {"dropped_scale": {k: v for k, v in DROPPED_SCALE.items() if k not in ("cache", "per_step_max_abs_logit_err")}},
    },
    "fused": {
        "grids": {name: grid_rows(rows) for name, rows in SDPA_GRIDS.items()},
        "controls": {"is_causal_if_several": control_rows(IS_CAUSAL_CONTROL)},
        "timing": {"protocol": {"threads": torch.get_num_threads(), "dtype": "fp32", "prompt_tokens": TIMING_PROMPT,
                                "warmups": WARMUPS, "repeats": REPEATS, "order": "alternating",
                                "clock": "time.perf_counter_ns", "unit": "ms"},
                   "results": FUSED_TIMING},
    },
    "memory_table": {"config": "Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json)", "context": CONTEXT,
                     "window": MISTRAL_WINDOW, "kivi_group": KIVI_GROUP, "kivi_residual": KIVI_RESIDUAL,
                     "bytes_per_element": FP16, "weights_gib": weights_gib, "rows": MEMORY_TABLE},
    "cross_checks": {"transformers": ENVIRONMENT["transformers"], "skipped": HF_SKIP,
                     "llama_fp32_steps": LLAMA_FP32_STEPS, "llama": LLAMA_CROSS, "mistral": MISTRAL_CROSS,
                     "tolerance": TOLERANCE[torch.float64]},
    "figures": [MASKS_PNG.name, WINDOW_PNG.name, QUANT_PNG.name, MEMORY_PNG.name],
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
assert json.loads(RESULTS_JSON.read_text(encoding="utf-8")) == json.loads(json.dumps(RESULTS))
assert all((OUT / name).exists() for name in RESULTS["figures"])

# %% [markdown] lang="en"
# The summary. For each variant: how many configurations its criterion covered, the largest logit error
# over them (for the quantized caches, the largest error over 64 steps for 8, 4 and 2 bits), its
# negative control, the control's logit error and how many of the control's runs the check caught. The
# tiled K/V heads pass all 12 cached-versus-full runs; section 4's head-by-head check (`heads_by_loop`)
# and the Hugging Face cross-check (HF) catch them, as section 4 explained; the `is_causal` control's three errors are for chunks of 1, 2 and
# 5, and only the first passes.

# %% [markdown] lang="zh"
# 汇总表。对每种变体依次给出：判据覆盖的配置数；这些配置上 logits 的最大误差（对量化缓存，是 8、4、2 比特下 64 步中的最大误差）；它的负对照；负对照的 logits 误差；以及检查在负对照的几次运行中查出了几次。平铺 K/V 头在 12 次“缓存对照完整重算”中全部通过，要靠第 4 节的逐头检查（`heads_by_loop`）和与 Hugging Face 的交叉核对（HF）才能抓住它，原因见第 4 节；`is_causal` 负对照的三个误差依次对应分块长度 1、2、5，只有第一个能通过。

# %%
def fmt(x: float) -> str:
    return f"{x:.1e}"


def caught(rows: list[dict]) -> str:
    return f"{sum(not r['passed'] for r in rows)}/{len(rows)}"


SUMMARY = [
    ["GQA, MQA", "24", fmt(max(largest(r) for r in GQA_GRIDS.values())), "`tile_kv`",
     f"{fmt(LLAMA_CROSS['tiled_kv_control']['full'])} (HF)" if LLAMA_CROSS else "-", "0/12 + `heads_by_loop` + HF" if LLAMA_CROSS else "0/12 + `heads_by_loop`"],
    ["RoPE", "12", fmt(largest(ROPE_GRID)), "`ChunkLocalRotary`", fmt(min(r["max_abs_logit_err"] for r in ROPE_FROM_ZERO)),
     caught(ROPE_FROM_ZERO)],
    [f"`window_mask({WINDOW})`", f"12 + {len(RING_CHUNK_RUNS)} + 12", fmt(max(largest(WINDOW_GRID), largest(RING_CHUNK_RUNS), largest(WINDOW_EQUALS_UNWINDOWED))),
     "`window_mask_off_by_one`", fmt(min(r["max_abs_logit_err"] for r in OFF_BY_ONE)), caught(OFF_BY_ONE)],
    [f"`window_mask({WINDOW})`", "-", "-", "`crop_logits`", fmt(CROP["crop_W_restart"]), "1/1"],
    ["int8, int4, int2", "64", " / ".join(f"{QUANT[b]['max_abs_logit_err']:.1e}" for b in (8, 4, 2)),
     "`dequantize_without_scale`", fmt(DROPPED_SCALE["max_abs_logit_err"]), "1/1"],
    ["SDPA", "24", fmt(max(largest(r) for r in SDPA_GRIDS.values())), "`sdpa_causal_if_several`",
     " / ".join(fmt(r["max_abs_logit_err"]) for r in IS_CAUSAL_CONTROL), caught(IS_CAUSAL_CONTROL)],
]
say_table(SUMMARY, en=["variant", "configurations", "largest logit error", "negative control", "its logit error", "caught"],
          zh=["变体", "配置数", "logits 最大误差", "负对照", "负对照的 logits 误差", "查出"])
if HAVE_HF:
    say(en=f"Cross-checks with transformers {ENVIRONMENT['transformers']} (FP64): Llama {fmt(max(LLAMA_CROSS['hf_precision'].values()))}, "
           f"Mistral {fmt(max(MISTRAL_CROSS['hf_precision'].values()))}.",
        zh=f"与 transformers {ENVIRONMENT['transformers']} 的交叉核对（FP64）：Llama {fmt(max(LLAMA_CROSS['hf_precision'].values()))}，"
           f"Mistral {fmt(max(MISTRAL_CROSS['hf_precision'].values()))}。")
else:
    say(en=f"The Hugging Face cross-checks are skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"与 Hugging Face 的交叉核对已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")

if IN_COLAB:
    from google.colab import files
    for name in ["results.json"] + RESULTS["figures"]:
        files.download(str(OUT / name))
