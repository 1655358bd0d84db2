# %% [markdown] lang="en"
# The exact variants: for each, how many of its configurations passed, and the largest difference between its
# cached path and its full recomputation (or its reference) over them, logits and cached tensors, in FP32 and FP64.
# All sit at the rounding level of their dtype.

# %% [markdown] lang="zh"
# 各精确变体：每一种通过了几种配置，以及在这些配置上，缓存路径与完整重算（或参照模型）之间 logits 和缓存张量的最大绝对误差，分 FP32 和 FP64 列出。它们都处在各自精度的舍入误差水平。

# %%
summary_table({f"`{name}`": rows for name, rows in EXACT_GRIDS.items()})

# %% [markdown] lang="en"
# The negative controls: each broke one thing on purpose, and each was caught by the check named in its row. The
# measured column is the number that check judged, and the next column says what that number is. Last, the Hugging Face referees: for each, the largest FP64 difference from our model, logits and
# caches, full and cached (or why they were skipped).

# %% [markdown] lang="zh"
# 负对照：每一个都故意改坏了一处，每一处都被该行所列的检查查出。“测得值”一列是该检查据以判断的数值，下一列说明这个数值是什么。最后是 Hugging Face 裁判：每个裁判与我们的模型在 FP64 下的最大绝对误差，包括 logits 和缓存、完整路径和缓存路径（或者说明为什么跳过）。

# %% tags=["hide-input"]
def controls_table(controls: dict) -> None:
    def table(header: list[str], cached: str, difference: str, count: str, units: dict[str, str]) -> str:
        # [en] One Markdown table. What the measured number is: the label of the control's own "unit" when it
        # [en] has one; otherwise `run_control`'s own check, a count when it is an integer, or else the largest
        # [en] difference its check found (its section says which).
        # [zh] 生成一张 Markdown 表格。测得值是什么：负对照记录里有 "unit" 的，用它对应的说明；否则看是不是
        # [zh] `run_control` 自己的检查；整数为计数；其余是该检查测得的最大绝对误差（具体是什么，见所在的节）。
        def what(c: dict) -> str:
            if c.get("unit") in units:
                return units[c["unit"]]
            if c["check"] == "check_cached":
                return cached
            return count if isinstance(c["measured"], int) else difference
        rows = [[f"`{name}`", str(c["section"]), f"`{c['check']}`", f"{c['measured']:.3g}", what(c), f"`{c['caught']}`"]
                for name, c in controls.items()]
        return "\n".join("| " + " | ".join(row) + " |" for row in [header, ["---"] * len(header)] + rows)

    say(en=table(["control", "section", "check", "measured", "what was measured", "caught"],
                 "max abs logit error, smallest of its failing runs", "max abs difference", "a count",
                 {"ratio": "a ratio", "head_loop": "max abs difference of the layer's output from the head-by-head loop",
                  "rope_formula": "max abs difference from the rotation formula",
                  "wrong_key_count": "query positions reading the wrong number of keys",
                  "crop_logits": "max abs logit difference from the windowed model",
                  "quant_logits": "max abs logit error against the exact cache"}),
        zh=table(["负对照", "节", "检查", "测得值", "测得的是什么", "查出"],
                 "各次失败运行中最小的 logits 最大绝对误差", "最大绝对误差", "计数",
                 {"ratio": "比值", "head_loop": "注意力层输出与逐头循环的最大绝对误差",
                  "rope_formula": "与旋转公式的最大绝对误差",
                  "wrong_key_count": "读取键数不对的查询位置数",
                  "crop_logits": "与滑动窗口模型相比的 logits 最大绝对误差",
                  "quant_logits": "与精确缓存相比的 logits 最大绝对误差"}))


# %%
controls_table(CONTROLS)
assert all(c["caught"] for c in CONTROLS.values())
if HAVE_HF:
    say_table([[name, f"{max(errors.values()):.1e}"] for name, errors in REFEREES.items()],
              en=[f"referee, transformers {ENVIRONMENT['transformers']}", "largest difference (FP64)"],
              zh=[f"裁判，transformers {ENVIRONMENT['transformers']}", "最大绝对误差（FP64）"])
else:
    say(en=f"The Hugging Face referees are skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"Hugging Face 裁判已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
