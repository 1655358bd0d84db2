# %% [markdown] lang="en"
# First the exact variants: for each, how many of its configurations passed, and the largest difference between
# its cached path and its full recomputation (or its reference) over them, logits and cached tensors, in FP32 and
# FP64; all sit at the rounding level of their dtype. Then the negative controls: each broke one thing on purpose
# and was caught by the check in its row (its section printed what that check found). Last, the
# Hugging Face referees: for each, the largest FP64 difference from our model, logits and caches, full and cached
# (or why they were skipped).

# %% [markdown] lang="zh"
# 先是各精确变体：每一种通过了几种配置，以及在这些配置上，缓存路径与完整重算（或参照模型）之间 logits 和缓存张量的最大绝对误差，分 FP32 和 FP64 列出；它们都处在各自精度的舍入误差水平。然后是负对照：每一个都故意改坏了一处，并被该行所列的检查查出（该检查的结果已在它所在的节打印）。最后是 Hugging Face 裁判：每个裁判与我们的模型在 FP64 下的最大绝对误差，包括 logits 和缓存、完整路径和缓存路径（或者说明为什么跳过）。

# %%
summary_table({f"`{name}`": rows for name, rows in EXACT_GRIDS.items()})
say_table([[f"`{name}`", str(c["section"]), f"`{c['check']}`", "✓" if c["caught"] else "✗"] for name, c in CONTROLS.items()],
          en=["control", "section", "check", "caught"], zh=["负对照", "节", "检查", "查出"])
assert all(c["caught"] for c in CONTROLS.values())
if HAVE_HF:
    say_table([[name, f"{max(errors.values()):.1e}"] for name, errors in REFEREES.items()],
              en=[f"referee, transformers {ENVIRONMENT['transformers']}", "largest difference (FP64)"],
              zh=[f"裁判，transformers {ENVIRONMENT['transformers']}", "最大绝对误差（FP64）"])
else:
    say(en=f"The Hugging Face referees are skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"Hugging Face 裁判已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
