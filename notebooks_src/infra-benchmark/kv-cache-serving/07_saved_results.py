# %% tags=["record"]
# [en] The build's record (not shown in the editions): results.json, schema in docs/kv-cache-serving-results-schema.md.
# [zh] 构建时的记录（各版本中不显示）：results.json，结构见 docs/kv-cache-serving-results-schema.md。
def control_entry(control: dict) -> dict:
    return {"max_abs_logit_err": finite_or_none(control["max_abs_logit_err"]),
            "finite": bool(control["finite"]), "detected": bool(control["detected"])}


RESULTS = {
    "schema_version": 4,
    "notebook": "infra-benchmark/kv-cache-serving",
    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "quick": bool(QUICK),
    "environment": ENVIRONMENT,
    "config": {"vocab": cfg.vocab, "width": cfg.width, "heads": cfg.heads, "head_dim": cfg.head_dim,
               "layers": cfg.layers, "mlp": cfg.mlp, "max_positions": cfg.max_positions, "seed": SEED},
    "tolerances": {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]},
    "padding": {
        "criterion": "close(row_logits, alone_logits) and row_tokens == alone_tokens",
        "prompt_lengths": list(PROMPT_LENGTHS), "decode_steps": DECODE_STEPS,
        "runs": {name: {"max_abs_logit_err": r["max_abs_logit_err"], "tokens_identical": r["tokens_identical"], "passed": r["passed"]}
                 for name, r in PADDED.items()},
        "padding_content_bit_exact": bool(PAD_CONTENT_BIT_EXACT),
        "empty_row_ok": bool(EMPTY_ROW_OK),
        "negative_controls": {name: control_entry({**r, "detected": not r["passed"]}) for name, r in PADDING_CONTROL_RUNS.items()},
    },
    "static": {
        "criterion": "close(static, torch_cat) and tokens_identical and pointers_fixed and finite and unused_slots_nan and length == t_max",
        "t_max": T_MAX,
        "runs": {name: {k: r[k] for k in ("t_max", "max_abs_logit_err", "close", "bit_exact", "tokens_identical", "pointers_fixed",
                                          "finite", "length", "unused_slots_nan", "calls")} for name, r in STATIC.items()},
        "overflow_error": OVERFLOW_ERROR,
        "reuse_with_reset_bit_exact": bool(REUSE_WITH_RESET["bit_exact"]),
        "reuse_with_reset_close": bool(REUSE_WITH_RESET["close"]),
        "negative_controls": {name: control_entry({**c, "detected": not c["close"]}) for name, c in STATIC_CONTROLS.items()},
        "step_timing": {
            "protocol": {"threads": torch.get_num_threads(), "dtype": "fp32", "batch": 1, "warmups": STEP_WARMUPS,
                         "repeats": STEP_REPEATS, "order": "rotating", "clock": "time.perf_counter_ns", "unit": "ms"},
            "rows": STEP_TIMING,
        },
        "profile": {"prefix": STEP_PREFIXES[-1], "steps": PROFILE_STEPS,
                    "ops": {name: {op: {"calls": calls} for op, calls in ops.items()} for name, ops in PROFILE.items()}},
    },
    "paged": {
        "criterion": "equal(paged, contiguous) and equal(paged_kv, contiguous_kv) and close(paged, torch_cat)",
        "block_size": BLOCK_SIZE,
        "runs": {name: {k: r[k] for k in ("max_abs_logit_err", "close_vs_cat", "bit_exact_vs_cat", "bit_exact_vs_contiguous",
                                          "kv_bit_exact_vs_contiguous", "tokens_identical", "pool_fixed", "contiguous_fixed", "lengths",
                                          "tables")} for name, r in PAGED.items()},
        "block_boundaries": BOUNDARY,
        "reuse": {k: REUSE[k] for k in ("bit_exact_vs_contiguous", "tokens_as_alone", "close_to_alone", "max_abs_logit_err_vs_alone",
                                        "reused_blocks", "all_returned", "within_reservation", "requests")}
                 | {"schedule": SCHEDULES["six"]},
        "prefix_sharing": {k: SHARED[k] for k in ("bit_exact_vs_contiguous", "close_to_full", "tokens_as_full",
                                                  "max_abs_logit_err_vs_full", "shared_blocks", "partial_block_copied",
                                                  "blocks_in_use", "blocks_without_sharing")},
        "negative_controls": {name: control_entry(c) for name, c in PAGED_CONTROLS.items()}
                             | {"reused_block_not_cleared": control_entry({
                                 "max_abs_logit_err": not_cleared["max_abs_logit_err_vs_contiguous"], "finite": not_cleared["finite"],
                                 "detected": not_cleared_caught})},
    },
    "memory": {
        "workload": {"requests": N_REQUESTS, "seed": SEED, "prompt": f"log_uniform({MIN_LEN}, {MAX_LEN})",
                     "output": f"log_uniform({MIN_LEN}, {MAX_LEN})", "t_max": T_LIMIT,
                     "bytes_per_token": BYTES_PER_TOKEN, "used": "sum(p + j for j in range(o))"},
        "table": MEMORY,
        "vllm_paper_used_pct": VLLM_PAPER_USED_PCT,
    },
    "continuous_batching": {
        "criterion": "tokens == alone_tokens and close(logits, alone_logits) and used_within_reserved and all_returned and schedule['kept']",
        "pool": {"blocks": STREAM_BLOCKS, "block_size": STREAM_BLOCK_SIZE, "max_batch": STREAM_MAX_BATCH},
        "requests": [{"prompt_tokens": p, "output_tokens": o, "arrival": a, "admitted": r.admitted, "finished": r.finished}
                     for (p, o, a), r in zip(STREAM_SPECS, stream_requests)],
        "summary": CONTINUOUS | {"schedule": SCHEDULES["stream"]},
        "trace": TRACE,
    },
    "figures": [MASKS_PNG.name, PADDING_PNG.name, STEP_PNG.name, BLOCK_TABLE_PNG.name, MEMORY_PNG.name, SERVING_PNG.name],
    "peer": PEER,
}
RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
