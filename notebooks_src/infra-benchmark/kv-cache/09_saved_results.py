# %% [markdown] lang="en"
# ## 9. Saved results
#
# The results of this run go into `results.json` in `OUTPUT_DIR`, next to
# `masks.png` and `timing.png`: environment, model configuration, the 12 equivalence
# configurations, the causality and cache checks, the greedy generation, the broken variants, the
# cost model (counts, K/V sizes of published models, the count next to the measured time per step),
# and the timing protocol with the raw samples of every path. The file's fields are documented in the
# repository (`docs/kv-cache-results-schema.md`). On Colab the cell also offers the files for
# download. The closing check after it (prefill, then one token at a time) only asserts and shows its
# table; it adds nothing to the file. Section 10 writes nothing; the Hugging Face comparison's own results file belongs to the
# companion notebook `infra-benchmark/kv-cache-hf-gpt2`.

# %% [markdown] lang="zh"
# ## 9. 保存结果
#
# 本次运行的结果写入 `OUTPUT_DIR` 下的 `results.json`，与 `masks.png`、`timing.png` 放在一起，包括：运行环境、模型配置、12 种等价性配置、因果性与缓存检查、贪心生成、改坏的版本、开销模型（乘加次数、公开模型的 K/V 大小、乘加次数与实测每步时间的对照），以及计时规程和每条路径的原始样本。各字段的含义见仓库中的 `docs/kv-cache-results-schema.md`。在 Colab 上，这个单元格还会把这些文件下载到本地。它后面的收尾检查（先预填充，再逐个 token）只做断言并显示表格，不往文件里写任何内容。第 10 节不写任何文件；与 Hugging Face 比较的结果文件属于配套笔记本 `infra-benchmark/kv-cache-hf-gpt2`。

# %%
RESULTS = {
    "schema_version": 1,
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
        "stream_tokens": STREAM_LEN,
        "tolerances": {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]},
        "configs": [{k: r[k] for k in ("batch", "chunk", "dtype", "max_abs_logit_err", "max_abs_kv_err", "passed")}
                    for r in EQUIVALENCE],
        "causality": CAUSALITY,
        "causality_ok": bool(CAUSALITY_OK),
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
    },
    "figures": [MASKS_PNG.name, TIMING_PNG.name],
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
assert json.loads(RESULTS_JSON.read_text(encoding="utf-8"))["equivalence"]["configs"] == RESULTS["equivalence"]["configs"]
assert MASKS_PNG.exists() and TIMING_PNG.exists()

say(en=f"Wrote `{RESULTS_JSON.name}`, `{MASKS_PNG.name}` and `{TIMING_PNG.name}`.",
    zh=f"已写入 `{RESULTS_JSON.name}`、`{MASKS_PNG.name}` 和 `{TIMING_PNG.name}`。")
controls = ", ".join(f"`{k}` ({v['max_abs_logit_err']:.3e})" for k, v in NEGATIVE_CONTROLS.items())
say(en=f"Parameters {N_PARAMS:,}; equivalence {sum(r['passed'] for r in EQUIVALENCE)}/12 passed; largest logit error "
       f"FP32 {WORST_LOGIT_ERR['fp32']:.3e}, FP64 {WORST_LOGIT_ERR['fp64']:.3e}; greedy generation: same tokens "
       f"with and without the cache; negative controls detected: {controls}.",
    zh=f"参数量 {N_PARAMS:,}；等价性 {sum(r['passed'] for r in EQUIVALENCE)}/12 通过；logits 最大误差 "
       f"FP32 为 {WORST_LOGIT_ERR['fp32']:.3e}，FP64 为 {WORST_LOGIT_ERR['fp64']:.3e}；贪心生成：用与不用缓存，生成的 token 都相同；"
       f"查出的负对照："
       + "、".join(f"`{k}`（{v['max_abs_logit_err']:.3e}）" for k, v in NEGATIVE_CONTROLS.items()) + "。")

if IN_COLAB:
    from google.colab import files
    for path in (RESULTS_JSON, MASKS_PNG, TIMING_PNG):
        files.download(str(path))

# %% [markdown] lang="en"
# **Prefill, then one token at a time.** Start from a prefill of 1, 4 or 8 tokens of the stream of
# section 6 and consume the rest one token at a time, comparing every call with a full recomputation
# of the prefix it has seen so far. The cell below does exactly that and asserts each step; as a
# negative control, positions that restart at zero (section 7) must fail the same check.
#
# **Next: padding.** A batch whose sequences have different lengths needs a padding mask, kept
# separate from the causal mask so that each can be checked on its own. The companion notebook
# `infra-benchmark/kv-cache-serving` takes this up ([open it in Colab]({{colab:infra-benchmark/kv-cache-serving}})).

# %% [markdown] lang="zh"
# **先预填充，再逐个 token**：取第 6 节的序列，先预填充 1、4 或 8 个 token，再逐个处理剩下的 token，并把每次调用的结果与对当前已处理前缀的完整重算比较。下面的单元格正是这样做的，并对每一步都做了断言；作为负对照，从零重新计数的位置（第 7 节）必须通不过同样的检查。
#
# **下一步是填充（padding）**：如果同一 batch 中的序列长度不同，就需要填充掩码；它应当与因果掩码分开构造，这样两者才能各自单独检查。配套笔记本 `infra-benchmark/kv-cache-serving` 会接着讨论这个问题（[在 Colab 中打开]({{colab:infra-benchmark/kv-cache-serving}})）。

# %%
# [en] Prefill prefill_len tokens, then one token per call; compare each call with full recomputation.
# [zh] 先预填充 prefill_len 个 token，再每次调用送入一个 token；每次调用都与完整重算比较。
@torch.inference_mode()
def prefill_then_step(model, stream, prefill_len: int) -> float:
    logits, cache = model(stream[:, :prefill_len])
    full, _ = model(stream[:, :prefill_len])
    worst = (logits - full).abs().max().item()
    for t in range(prefill_len, stream.shape[1]):
        step_logits, cache = model(stream[:, t:t + 1], cache)
        full, _ = model(stream[:, :t + 1])
        torch.testing.assert_close(step_logits[:, 0], full[:, -1], atol=1e-5, rtol=1e-5)
        worst = max(worst, (step_logits[:, 0] - full[:, -1]).abs().max().item())
    assert cache[0][0].shape[-2] == stream.shape[1]
    return worst


STEPWISE = {prefill_len: prefill_then_step(model, STREAM[:1], prefill_len) for prefill_len in (1, 4, 8)}
say_table([[str(n), f"{err:.3e}"] for n, err in STEPWISE.items()],
          en=["prefill tokens, then one per call", "max abs difference from full recomputation"],
          zh=["先预填充的 token 数（之后每次一个）", "与完整重算的最大绝对差"])

# [en] Negative control: with positions restarting at zero the same check must fail.
# [zh] 负对照：位置从零重新计数时，同样的检查必须失败。
with model.hooks(positions_fn=restart_positions):
    try:
        prefill_then_step(model, STREAM[:1], 4)
        stepwise_caught = False
    except AssertionError:
        stepwise_caught = True
assert stepwise_caught
