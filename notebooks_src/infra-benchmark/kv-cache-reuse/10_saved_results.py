# %% tags=["record"]
import json
from datetime import datetime, timezone

CONTROLS = {
    **{name: {"section": "prefix_cache", "scenario": c["scenario"], "wrong_requests": c["wrong_requests"],
              "max_abs_logit_err": finite_or_none(c["max_abs_logit_err"]), "finite": c["finite"], "caught": c["caught"]}
       for name, c in PREFIX_CONTROLS.items()},
    "target_cache_not_cropped": {"section": "speculative", "k": no_rollback["k"], "tokens_identical": no_rollback["tokens_identical"],
                                 "max_abs_logit_err": finite_or_none(no_rollback["max_abs_logit_err"]), "caught": spec_caught},
    "merge_without_rescaling": {"section": "split_k", "splits": [n for n in SPLIT_COUNTS if n > 1],
                                "max_abs_err_fp32": [c["fp32"]["max_abs_err"] for c in SPLIT_K_CONTROL if c["splits"] > 1],
                                "caught": all(SPLIT_K_CAUGHT[n] for n in SPLIT_COUNTS if n > 1)},
    "keys_without_the_new_token": {"section": "decode_cost", "flops": [r["control"] for r in COUNT_GRID], "caught": COUNT_CONTROL_CAUGHT},
    "llama_3_1_8b_with_32_kv_heads": {"section": "decode_cost", **SIZE_CONTROL},
    "largest_batch_memory_bound": {"section": "roofline", "batch": WEIGHT_SWEEP[-1]["batch"],
                                   "bandwidth_share": WEIGHT_SWEEP[-1]["gbs"] * 1e9 / BANDWIDTH, "peak_share": WEIGHT_SWEEP[-1]["gflops"] * 1e9 / PEAK, **ROOFLINE_CONTROLS["largest_batch_memory_bound"]},
    "weights_not_amortized": {"section": "roofline", **ROOFLINE_CONTROLS["weights_not_amortized"]},
}
if ASSISTED_CONTROL is not None:
    CONTROLS["referee_rejects_no_rollback"] = {"section": "assisted_generation", **ASSISTED_CONTROL}

RESULTS = {
    "schema_version": 3,
    "notebook": "infra-benchmark/kv-cache-reuse",
    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "quick": bool(QUICK),
    "environment": ENVIRONMENT,
    "config": {"vocab": cfg.vocab, "width": cfg.width, "heads": cfg.heads, "head_dim": cfg.head_dim,
               "layers": cfg.layers, "mlp": cfg.mlp, "max_positions": cfg.max_positions, "seed": SEED},
    "tolerances": {DTYPE_NAME[dtype]: tol for dtype, tol in TOLERANCE.items()},
    "prefix_cache": {
        "block_size": BLOCK_SIZE,
        "stream": {"requests": STREAM_REQUESTS, "system_prompt_lengths": list(SYSTEM_LENGTHS),
                   "system_prompt_weights": list(SYSTEM_WEIGHTS), "question_tokens": [2, 12], "new_tokens": [3, 10],
                   "arrivals_per_iteration": 1},
        "sweep": [{key: r[key] for key in ("blocks", "hit_rate", "prefill_tokens_saved", "prompt_tokens", "requests_with_hit",
                                           "evictions", "iterations", "max_abs_logit_err_hits", "min_margin",
                                           "misses_bit_identical", "whole_blocks", "finite", "within_reservation", "all_released", "close")}
                  for r in SWEEP],
        "scenarios": {scenario: {key: r[key] for key in ("blocks", "requests_with_hit", "hit_tokens", "iterations", "close", "finite")}
                      for scenario, r in CONTROL_RUNS["correct"].items()},
    },
    "speculative": {
        "draft": {"layers": draft.config.layers, "parameters": sum(p.numel() for p in draft.parameters()),
                  "agreement": DRAFT_AGREEMENT},
        "prompts": len(SPEC_PROMPTS), "prompt_tokens": len(SPEC_PROMPTS[0]), "new_tokens": SPEC_NEW,
        "runs": [{key: r[key] for key in ("k", "target_calls", "plain_calls", "draft_calls", "budget_cut", "accepted_per_call", "tokens_per_call",
                                          "tokens_identical", "logits_close", "max_abs_logit_err", "min_margin")} for r in SPEC],
        "formula_tokens_per_call": SPEC_FORMULA,
    },
    "split_k": {
        "keys": SPLIT_KEYS, "padding": SPLIT_PADDING, "decoder_prompt": SPLIT_PROMPT,
        "rows": [{"splits": r["splits"], "fully_masked": r["fully_masked"], "max_abs_err_fp32": r["fp32"]["max_abs_err"],
                  "max_abs_err_fp64": r["fp64"]["max_abs_err"], "max_abs_err_decoder": r["decoder"]["max_abs_err"]} for r in SPLIT_K],
    },
    "decode_cost": {
        "count_grid": COUNT_GRID,
        "context": COST_CONTEXT, "bytes_per_element": BF16,
        "published": [{"name": s.name, "source": s.source, "parameters": c["counted"], "published_parameters": c["published"],
                       "matrices_per_token": parameters(s)["per_token"],
                       "decode_step": {str(batch): COSTS[s.name][batch] for batch in (1, 64)}} for s, c in zip(SHAPES, SIZE_CHECK)],
        "our_decoder": [{"batch": b, **c} for b, c in zip(OUR_BATCHES, OUR_COSTS)],
    },
    "roofline": {
        "protocol": {"threads": torch.get_num_threads(), "dtype": "fp32", "rounds": ROUNDS, "statistic": "median",
                     "order": "rotating", "clock": "time.process_time"},
        "stream": {"elements": STREAM_ELEMENTS, "bytes_per_element": STREAM_BYTES,
                   "bytes_per_s": STREAM_RATES, "spread": {name: spread(SECONDS[name]) for name in STREAM_BYTES}},
        "matmul": {"size": MATMUL_SIZE, "flops_per_s": MATMUL_RATE, "spread": spread(SECONDS["matmul"])},
        "roof": {"bandwidth_bytes_per_s": BANDWIDTH, "flops_per_s": PEAK, "ridge_flop_per_byte": RIDGE},
        "weight_sweep": WEIGHT_SWEEP, "cache_sweep": CACHE_SWEEP,
        "batch_1": {"bandwidth_share": WEIGHT_SWEEP[0]["gbs"] * 1e9 / BANDWIDTH, "peak_share": WEIGHT_SWEEP[0]["gflops"] * 1e9 / PEAK},
        "cache_batch_1": {"bandwidth_share": CACHE_SWEEP[0]["gbs"] * 1e9 / BANDWIDTH, "peak_share": CACHE_SWEEP[0]["gflops"] * 1e9 / PEAK,
                          "memory_bound": memory_bound(CACHE_SWEEP[0])},
        "score_product": {"batch": CACHE_BATCHES[-1], "bytes": SCORE_BYTES, "forms": SCORES},
        "value_product": {"batch": CACHE_BATCHES[-1], "bytes": SCORE_BYTES, "forms": {"w @ v": PRODUCTS["w @ v"]}},
        "checks": ROOFLINE_CHECKS,
        "gpu_reference": {"name": "NVIDIA H100 SXM", "source": "datasheet", "bf16_dense_flops_per_s": GPU_PEAK,
                          "bandwidth_bytes_per_s": GPU_BANDWIDTH},
    },
    "assisted_generation": {"skipped": ASSISTED is None, "runs": ASSISTED},
    "controls": CONTROLS,
    "figures": [MASKS_PNG.name, HIT_RATE_PNG.name, SPEC_PNG.name, ROOFLINE_PNG.name],
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")

# %% tags=["prose-values"]
one_token_8b = decode_step_cost(llama_8b, 1, COST_CONTEXT, BF16)


# [en] A range in words, or one value when its two ends read the same.
# [zh] 用文字说出一个范围；两端格式化后相同时只说一个值。
def span(lo, hi, fmt, one, two):
    return one.format(f"{lo:{fmt}}") if f"{lo:{fmt}}" == f"{hi:{fmt}}" else two.format(f"{lo:{fmt}}", f"{hi:{fmt}}")


several = len(SMALL_BATCHES) > 1
few_rows = {
    "en": span(SMALL_BATCHES[0], SMALL_BATCHES[-1], "d", "over {} rows", "over {} to {} rows") + ", "
          + span(min(FLOOR_RATIOS.values()), max(FLOOR_RATIOS.values()), ".2f",
                 "a floor of {} one-row calls" + (" at every row count" if several else ""), "floors of {} to {}") + ", "
          + span(min(CALL_RATIOS.values()), max(CALL_RATIOS.values()), ".1f",
                 "a time of {}" + (" at every row count" if several else ""), "times of {} to {}"),
    "zh": span(SMALL_BATCHES[0], SMALL_BATCHES[-1], "d", "处理 {} 行的调用", "处理 {} 到 {} 行的调用") + "，"
          + span(min(FLOOR_RATIOS.values()), max(FLOOR_RATIOS.values()), ".2f",
                 ("每种行数的下界都是 {}" if several else "下界为 {}"), "下界为 {} 到 {}") + "，"
          + span(min(CALL_RATIOS.values()), max(CALL_RATIOS.values()), ".1f",
                 ("每种行数的实测耗时都是 {}" if several else "实测耗时为 {}"), "实测耗时为 {} 到 {}")}
# [en] The middle k's verifying call (k + 1 rows) against its tokens per call, if section 9 timed a product over k + 1 rows.
# [zh] 中间那个 k 的验证调用（k + 1 行）的耗时与它每次得到的 token 数之比较，前提是第 9 节给处理 k + 1 行的乘法计过时。
mid = SPEC[(len(SPEC) - 1) // 2]
mid_rows = mid["k"] + 1
if mid_rows in CALL_RATIOS:
    cost, tokens = round(CALL_RATIOS[mid_rows], 2), round(mid["tokens_per_call"], 2)
    head = {"en": (f"For a target whose weights, like this matrix's, exceed the CPU's caches (section 6's toy target's stay in them), "
                   f"take speculative decoding at $k = {mid['k']}$: its verifying call covers {mid_rows} rows, the {mid['k']} drafts plus "
                   f"the newest confirmed token. It takes about {cost:.2f} one-row calls (the table's time at {mid_rows} rows) and yields "
                   f"{tokens:.2f} tokens (section 6's tokens per target call at $k = {mid['k']}$), so on this CPU "),
            "zh": (f"对于权重像这个矩阵一样超出 CPU 高速缓存的目标模型（第 6 节玩具目标模型的权重留在高速缓存里），以 $k = {mid['k']}$ 的投机解码为例："
                   f"它的验证调用处理 {mid_rows} 行，即 {mid['k']} 个草稿加上最新的已确认 token。这次调用的耗时约为 {cost:.2f} 次单行调用"
                   f"（下表中 {mid_rows} 行的耗时），得到 {tokens:.2f} 个 token（第 6 节中 $k = {mid['k']}$ 时每次目标模型调用得到的 token 数），"
                   "所以在本机 CPU 上，")}
    if cost >= tokens:
        mid_verdict = {"en": head["en"] + "it does not pay, even before the draft's calls are counted.",
                       "zh": head["zh"] + "即使不计草稿模型的调用，它也不划算。"}
    else:
        mid_verdict = {"en": head["en"] + (f"it pays only if the round's {mid['k']} draft calls together cost less than "
                                           f"{tokens - cost:.2f} of the target's one-row calls."),
                       "zh": head["zh"] + (f"只有当一轮的 {mid['k']} 次草稿模型调用合计少于目标模型的 {tokens - cost:.2f} 次"
                                           "单行调用时，它才划算。")}
else:
    mid_verdict = {"en": f"(This run timed no product over $k + 1 = {mid_rows}$ rows, the verifying call at $k = {mid['k']}$, "
                         "so it does not say whether that call pays on this CPU.)",
                   "zh": f"（本次运行没有给处理 $k + 1 = {mid_rows}$ 行（$k = {mid['k']}$ 时的验证调用）的乘法计时，"
                         "因此无法判断这次调用在本机 CPU 上是否划算。）"}
{"prefix": {
    "requests": STREAM_REQUESTS, "smallest_pool": SWEEP[0]["blocks"], "hits_largest": SWEEP[-1]["requests_with_hit"],
    "largest_request_blocks": max(blocks_needed(Request(0, prompt, max_new), BLOCK_SIZE) for prompt, max_new, _ in STREAM),
    "hit_rate_smallest": SWEEP[0]["hit_rate"], "hit_rate_largest": SWEEP[-1]["hit_rate"],
    "iterations_smallest": SWEEP[0]["iterations"], "iterations_largest": SWEEP[-1]["iterations"],
    "controls": {name: float(c["max_abs_logit_err"]) for name, c in PREFIX_CONTROLS.items() if c["finite"]},
    "full_pool_iterations": {name: CONTROL_RUNS[name]["full_pool"]["iterations"] for name in ("correct", "held_block_evicted")}},
 "spec": {"prompts": len(SPEC_PROMPTS), "new_tokens": SPEC_NEW, "plain_calls": SPEC[0]["plain_calls"],
          "calls_k1": SPEC[0]["target_calls"], "calls_kmax": SPEC[-1]["target_calls"], "kmax": SPEC[-1]["k"],
          "agreement": DRAFT_AGREEMENT, "formula_k1": SPEC_FORMULA[0], "tokens_k1": SPEC[0]["tokens_per_call"],
          "formula_kmax": SPEC_FORMULA[-1], "tokens_kmax": SPEC[-1]["tokens_per_call"],
          "budget_cut_k1": SPEC[0]["budget_cut"], "budget_cut_kmax": SPEC[-1]["budget_cut"],
          "mid_verdict": mid_verdict, "draft_share": DRAFT_PARAMS / N_PARAMS, "outside_share": DRAFT_OUTSIDE_BLOCKS / N_PARAMS, "positions": cfg.max_positions},
 "splitk": {"keys": SPLIT_KEYS, "padding": SPLIT_PADDING, "prompt": SPLIT_PROMPT,
            "max_err_fp32": max(r["fp32"]["max_abs_err"] for r in SPLIT_K), "max_err_fp64": max(r["fp64"]["max_abs_err"] for r in SPLIT_K),
            "control_err_s2": SPLIT_K_CONTROL[1]["fp32"]["max_abs_err"],
            "control_err_min": min(c["fp32"]["max_abs_err"] for c in SPLIT_K_CONTROL if c["splits"] > 2),
            "control_err_max": max(c["fp32"]["max_abs_err"] for c in SPLIT_K_CONTROL if c["splits"] > 2)},
 "cost": {"context": COST_CONTEXT, "our_parameters": parameters(OURS)["total"],
          "min_intensity_b1": min(COSTS[s.name][1]["intensity"] for s in SHAPES),
          "max_intensity_b1": max(COSTS[s.name][1]["intensity"] for s in SHAPES),
          "llama2_b64": COSTS["Llama 2 7B"][64]["intensity"], "llama70_b64": COSTS["Llama 3.1 70B"][64]["intensity"],
          "llama2_cache": COSTS["Llama 2 7B"][1]["cache_intensity"], "llama70_cache": COSTS["Llama 3.1 70B"][1]["cache_intensity"],
          "deepseek_cache": COSTS["DeepSeek-V2-Lite"][1]["cache_intensity"],
          "mla_factor": COSTS["DeepSeek-V2-Lite"][1]["cache_intensity"] / (2 / BF16),
          "deepseek_experts_b64": SHAPES[-1].experts * (1 - (1 - SHAPES[-1].experts_per_token / SHAPES[-1].experts) ** 64)},
 "roofline": {"rounds": ROUNDS, "cache_keys": CACHE_KEYS, "matmul_intensity": 2 * MATMUL_SIZE**3 / (3 * FP32 * MATMUL_SIZE**2),
              "weight_batch_max": WEIGHT_SWEEP[-1]["batch"], "ridge": RIDGE, "peak_gflops": PEAK / 1e9, "matmul_gflops": MATMUL_RATE / 1e9, "bandwidth_gbs": BANDWIDTH / 1e9,
              "intensity_b1": WEIGHT_SWEEP[0]["intensity"], "intensity_bmax": WEIGHT_SWEEP[-1]["intensity"], "gflops_b1": WEIGHT_SWEEP[0]["gflops"], "weight_gbs_b1": WEIGHT_SWEEP[0]["gbs"],
              "b1_bandwidth_share": WEIGHT_SWEEP[0]["gbs"] * 1e9 / BANDWIDTH, "b1_peak_share": WEIGHT_SWEEP[0]["gflops"] * 1e9 / PEAK,
              "gflops_bmax": WEIGHT_SWEEP[-1]["gflops"], "amortization": weight_ms[0] / weight_ms[-1],
              "cache_ms_first": cache_ms[0], "cache_ms_last": cache_ms[-1], "cache_batch_max": CACHE_SWEEP[-1]["batch"],
              "cache_bandwidth_share": CACHE_SWEEP[0]["gbs"] * 1e9 / BANDWIDTH, "cache_peak_share": CACHE_SWEEP[0]["gflops"] * 1e9 / PEAK,
              "cache_bandwidth_share_bmax": CACHE_SWEEP[-1]["gbs"] * 1e9 / BANDWIDTH,
              "cache_memory_bound": memory_bound(CACHE_SWEEP[0]),
              "small_batch_lo": SMALL_BATCHES[0], "small_batch_hi": SMALL_BATCHES[-1],
              "few_rows": few_rows,
              "scores_qk_share": SCORES["q @ k^T"]["gbs"] * 1e9 / BANDWIDTH, "scores_kq_share": SCORES["k @ q^T"]["gbs"] * 1e9 / BANDWIDTH,
              "values_share": PRODUCTS["w @ v"]["gbs"] * 1e9 / BANDWIDTH, "scores_qk_attention_share": PRODUCTS["q @ k^T"]["attention_share"],
              "values_attention_share": PRODUCTS["w @ v"]["attention_share"], "b1_roof_share": WEIGHT_SWEEP[0]["roof_share"],
              "small_roof_share_min": min(r["roof_share"] for r in WEIGHT_SWEEP if r["batch"] in SMALL_BATCHES),
              "small_roof_share_max": max(r["roof_share"] for r in WEIGHT_SWEEP if r["batch"] in SMALL_BATCHES),
              "gpu_peak_tflops": GPU_PEAK / 1e12, "gpu_bandwidth_tbs": GPU_BANDWIDTH / 1e12, "gpu_ridge": GPU_RIDGE},
 "exercise": {"llama_limit": 2 * (one_token_8b["weight_macs"] + one_token_8b["attention_macs"]) / one_token_8b["kv_bytes"]}}
