# %% [markdown] lang="en"
# ## 11. Version notes, saved results and closing note
#
# This notebook was written against transformers 5.23.0, the version pinned for this repository. The
# comparison, the traps and the GELU study have also run end to end with 4.57.1 and 5.0.0, with the same
# results; the `DynamicCache` walk-through, the timing race and the profile have run with 5.23.0 only.
#
# What the notebook needs from the library is a `DynamicCache` built with `config=` that keeps each
# layer's K and V as `cache.layers[i].keys` and `.values`. Section 4 checks this with a one-layer model
# before anything else. Older releases such as 4.51.3 lack it: there, as when the library is not
# installed, section 4 says so in one sentence and the notebook does nothing else. With any other
# version that has this API, the notebook runs and says that it was not checked with that version; if
# an assertion then fails, that version computes something differently.
#
# One detail changed between versions: in 5.23.0, `crop` accepts only a negative count of positions to
# remove, the form section 9 uses. Its source (`DynamicLayer.crop` in `transformers/cache_utils.py`) still
# names a positive argument, the final length to keep, as the legacy form, and refuses it with a
# `ValueError`. The next cell checks the refusal on the pinned version.
#
# The results go to `results.json` in `OUTPUT_DIR`: the environment, the decoder's configuration and,
# in its `peer` block, this notebook's errors, traps, GELU study, cache reuse, timing and profile (or
# the reason the comparison was skipped). The last cell prints the closing note with the measured
# numbers.

# %% [markdown] lang="zh"
# ## 11. 版本说明、保存结果与结语
#
# 本笔记本是按本仓库锁定的 transformers 5.23.0 编写的。比较、陷阱和 GELU 实验也在 4.57.1 和 5.0.0 上完整运行过，结果相同；`DynamicCache` 的逐步演示、计时比赛和性能分析只在 5.23.0 上运行过。
#
# 本笔记本对这个库只有一个要求：能用 `config=` 构造 `DynamicCache`，并把每一层的 K 和 V 存为 `cache.layers[i].keys` 和 `.values`。第 4 节在做任何别的事之前，先用一个单层模型检查这一点。较早的版本（例如 4.51.3）不满足这个要求，这时的处理与没有安装这个库相同：第 4 节用一句话说明原因，笔记本不再做别的事。换成其他满足要求的版本，笔记本照常运行，并说明没有在该版本上检查过；如果随后有断言失败，说明该版本的某处计算方式不同。
#
# 有一处细节在不同版本之间发生了变化：5.23.0 的 `crop` 只接受负数参数，表示要去掉的位置数，第 9 节用的正是这种写法。它的源代码（`transformers/cache_utils.py` 中的 `DynamicLayer.crop`）仍把正数参数称为旧写法，表示截短后要保留的长度，并以 `ValueError` 拒绝它。下一个单元格在锁定的版本上核对：传入正数时，它确实会拒绝。
#
# 结果写入 `OUTPUT_DIR` 下的 `results.json`，内容包括运行环境、解码器的配置，以及 `peer` 部分中本笔记本的各项结果：误差、陷阱、GELU 实验、缓存复用、计时与性能分析；如果比较被跳过，则只记录跳过的原因。最后一个单元格打印结语，列出实测的数值。

# %%
if HAVE_TRANSFORMERS and transformers.__version__ == PINNED_TRANSFORMERS:
    probe_cache = copy.deepcopy(snapshot)
    length_before = probe_cache.get_seq_length()
    try:
        probe_cache.crop(CROP_PREFIX - 1)
        crop_refusal = None
    except ValueError as error:
        crop_refusal = str(error).strip().splitlines()[0]
    # [en] The quoted error holds backticks of its own: a double-backtick code span keeps it whole.
    # [zh] 引用的报错信息本身带有反引号：用双反引号的代码片段才能完整显示。
    say(en=f"transformers {transformers.__version__}, `crop({CROP_PREFIX - 1})`: `` {crop_refusal} ``",
        zh=f"transformers {transformers.__version__} 执行 `crop({CROP_PREFIX - 1})` 的结果：`` {crop_refusal} ``")
    # [en] Refused, and the cache keeps its length.
    # [zh] 被拒绝，缓存长度保持不变。
    assert crop_refusal is not None and probe_cache.get_seq_length() == length_before

# %%
RESULTS = {
    "schema_version": 1,
    "notebook": "infra-benchmark/kv-cache-hf-gpt2",
    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "quick": bool(QUICK),
    "environment": ENVIRONMENT,
    "config": {"vocab": cfg.vocab, "width": cfg.width, "heads": cfg.heads, "head_dim": cfg.head_dim,
               "layers": cfg.layers, "mlp": cfg.mlp, "max_positions": cfg.max_positions,
               "params": sum(p.numel() for p in model.parameters()), "seed": SEED},
}
if HAVE_TRANSFORMERS:
    RESULTS["peer"] = {
        "reference": "transformers.GPT2LMHeadModel",
        "transformers": transformers.__version__,
        "attn_implementation": gpt2_64.config._attn_implementation,
        "dtype": "fp64",
        "tolerance": TOLERANCE[torch.float64],
        "input": {"batch": int(peer_ids.shape[0]), "tokens": int(peer_ids.shape[1]), "chunks": PEER_CHUNKS},
        "max_abs_error": peer_errors,
        "agrees": agrees(peer_errors),
        "traps": {name: {"max_abs_error": errors, "caught": not agrees(errors)} for name, errors in trap_errors.items()},
        "gelu_new": {
            "curve_gap": curve_gap,
            "median_gap_at_mlp_inputs": median_gap,
            "fp32_tolerance": TOLERANCE[torch.float32],
            "logit_error": {label: {f"{dtype}_{variant}": worst_logit_error(errors)
                                    for (dtype, variant), errors in row.items()}
                            for label, row in gelu_rows.items()},
        },
        "cache_reuse": {
            "prefix_tokens": CROP_PREFIX,
            "removed_tokens": CROP_TOKENS,
            "max_abs_error": crop_errors,
            "agrees": max(crop_errors["cropped_kv"], crop_errors["logits_after_crop"]) <= TOLERANCE[torch.float64],
            "equals_deep_copy": crop_errors["crop_vs_deep_copy"] == 0.0,
            "negative_control_caught": crop_errors["logits_without_crop"] > TOLERANCE[torch.float64],
        },
        "timing": {
            "window": "cached continuation", "prompt_tokens": PEER_PROMPT, "continuation_tokens": CONTINUATION,
            "dtype": "fp32", "threads": torch.get_num_threads(), "warmups": WARMUPS, "repeats": REPEATS,
            "order_rotation": True, "gpt2_cache_per_round": "deep copy of the prefilled prompt cache, untimed",
            "clock": "time.perf_counter_ns", "unit": "ms",
            "ours_ms": race_timing["ours"], "gpt2_ms": race_timing["gpt2"], "p50_ratio_gpt2_over_ours": race_ratio,
            "profile": {key: {"aten_op_calls": step_profile[key]["aten_calls"],
                              "aten_self_ms_profiled": step_profile[key]["aten_ms"],
                              "python_function_calls": step_profile[key]["python_calls"],
                              "matmul_flops": step_profile[key]["matmul_flops"]}
                        for key in ("ours", "gpt2", "ours_no_cache")},
        },
    }
else:
    RESULTS["peer"] = {"skipped": SKIP_NOTE}

RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
say(en=f"Wrote `{RESULTS_JSON.name}`, top-level fields: {', '.join(f'`{k}`' for k in RESULTS)}.",
    zh=f"已写入 `{RESULTS_JSON.name}`，顶层字段：{'、'.join(f'`{k}`' for k in RESULTS)}。")

if HAVE_TRANSFORMERS:
    worst_kv = max(peer_errors["k"] + peer_errors["v"])
    worst_full_cached = max(peer_errors["full_logits"], peer_errors["cached_logits"])
    smallest_trap = min(worst_logit_error(errors) for errors in trap_errors.values())
    say(en=f"**Closing note** (transformers {transformers.__version__}, `GPT2LMHeadModel`, eager attention, FP64, "
           f"tolerance $10^{{-10}}$). Largest |GPT-2 - ours|: logits {worst_full_cached:.1e} with and without "
           f"the cache, cached K/V {worst_kv:.1e}. All three traps caught; the smallest, `gelu_new`, at "
           f"{smallest_trap:.1e}. After `crop(-{CROP_TOKENS})` the two caches agree within {crop_errors['cropped_kv']:.1e} "
           f"and the continuations within {crop_errors['logits_after_crop']:.1e}. Cached decoding, {CONTINUATION} "
           f"tokens after {PEER_PROMPT}: `GPT2LMHeadModel` p50 {race_timing['gpt2']['p50']:.2f} ms, ours "
           f"{race_timing['ours']['p50']:.2f} ms, with the same {step_profile['ours']['matmul_flops']:,} matrix-product "
           f"FLOPs per step and {step_profile['gpt2']['python_calls']:,} against {step_profile['ours']['python_calls']:,} "
           f"Python function calls (one run on one machine).",
        zh=f"**结语**（transformers {transformers.__version__}，`GPT2LMHeadModel`，eager 注意力，FP64，"
           f"容差 $10^{{-10}}$）。GPT-2 与我们的解码器之间的最大绝对误差：无论用不用缓存，logits 都不超过 {worst_full_cached:.1e}，"
           f"缓存的 K/V 不超过 {worst_kv:.1e}。三个陷阱全部查出，其中误差最小的 `gelu_new` 为 {smallest_trap:.1e}。"
           f"执行 `crop(-{CROP_TOKENS})` 之后，两份缓存相差不超过 {crop_errors['cropped_kv']:.1e}，"
           f"续写的 logits 相差不超过 {crop_errors['logits_after_crop']:.1e}。带缓存解码（在 {PEER_PROMPT} 个 token 的提示"
           f"之后再处理 {CONTINUATION} 个 token）：`GPT2LMHeadModel` 的 p50 为 {race_timing['gpt2']['p50']:.2f} 毫秒，"
           f"我们的为 {race_timing['ours']['p50']:.2f} 毫秒；每步的矩阵乘法浮点运算次数同为 "
           f"{step_profile['ours']['matmul_flops']:,}，Python 函数调用次数分别为 {step_profile['gpt2']['python_calls']:,} 次"
           f"和 {step_profile['ours']['python_calls']:,} 次（一台机器上的一次运行）。")
else:
    say(en="**Closing note.** The comparison with Hugging Face GPT-2 was skipped (see section 4); "
           "`results.json` records why.",
        zh="**结语**：与 Hugging Face GPT-2 的比较已跳过（原因见第 4 节），`results.json` 记录了跳过的原因。")
