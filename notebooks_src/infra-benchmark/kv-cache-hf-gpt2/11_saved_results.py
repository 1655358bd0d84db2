# %% tags=["record"]
# [en] The run's record, results.json; schema: docs/kv-cache-hf-gpt2-results-schema.md.
# [zh] 本次运行的记录 results.json；格式见 docs/kv-cache-hf-gpt2-results-schema.md。
import json
from datetime import datetime, timezone

RESULTS = {
    "schema_version": 2,
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
                              "python_function_calls": step_profile[key]["python_calls"],
                              "matmul_flops": step_profile[key]["matmul_flops"]}
                        for key in ("ours", "gpt2", "ours_no_cache")},
        },
    }
else:
    RESULTS["peer"] = {"skipped": SKIP_NOTE}

RESULTS_JSON = OUT / "results.json"
RESULTS_JSON.write_text(json.dumps(RESULTS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
