# %% [markdown] lang="en"
# **Negative control 3: cropping the context instead of masking.** A tempting shortcut: to produce the logits at
# position $t$, run the model on the last $W$ tokens only, as a fresh sequence with positions restarting at 0.
# Two things are wrong with it. The positions restart, which RoPE happens not to see (section 5's lesson: a crop
# that keeps its true positions gives the same logits). And the window applies *per layer*: position $t$ of
# layer 2 reads layer-1 outputs back to $t - W + 1$, each of which read back another $W - 1$ positions, so two
# layers reach $2(W - 1)$ positions into the past, not $W - 1$. A crop to $W$ tokens cuts that off. The cell
# compares crops with the cached windowed model (`run_chunked`, one token per call) at every position $t \ge W$
# (FP64), then confirms the receptive field: a crop of $L(W - 1) + 1 = 15$ tokens reproduces the windowed
# model, a crop of 14 does not. The table's rows: `crop_W_restart` (the last $W$ tokens, positions from 0),
# `crop_W_true_positions` (the same crop with its true positions), `crop_receptive_field` and
# `crop_receptive_field_minus_1` (crops of 15 and 14 tokens, true positions), and `restart_vs_true_positions` (the
# first two rows against each other).

# %% [markdown] lang="zh"
# **负对照 3：裁剪上下文，而不是使用掩码。** 一条看似省事的捷径：要得到位置 $t$ 的 logits，只把最后 $W$ 个 token 当作一条新序列送入模型，位置从 0 重新开始。这种做法错在两处。第一，位置重新开始了，不过 RoPE 恰好看不到这一点（第 5 节的教训：保留真实位置的裁剪给出相同的 logits）。第二，窗口是**逐层**生效的：第 2 层在位置 $t$ 上读取第 1 层直到 $t - W + 1$ 的输出，而这些输出又各自向前读取了 $W - 1$ 个位置，所以两层加起来能回溯 $2(W - 1)$ 个位置，而不是 $W - 1$ 个。裁剪到 $W$ 个 token 就把这部分切掉了。下面的单元格在每个 $t \ge W$ 的位置上（FP64），把裁剪的结果与带缓存的滑动窗口模型（`run_chunked`，每次调用一个 token）相比较，然后验证感受野：裁剪到 $L(W - 1) + 1 = 15$ 个 token 能复现滑动窗口模型，只保留 14 个则不能。表中各行的含义：`crop_W_restart` 是最后 $W$ 个 token、位置从 0 重新编号；`crop_W_true_positions` 是同样的裁剪、保留真实位置；`crop_receptive_field` 和 `crop_receptive_field_minus_1` 分别裁剪到 15 个和 14 个 token，保留真实位置；`restart_vs_true_positions` 是前两行彼此之间的差。

# %%
@torch.inference_mode()
def crop_logits(net, ids, t: int, length: int, true_positions: bool):
    # [en] Logits at position t from the last `length` tokens only, as a fresh call.
    # [zh] 只用最后 `length` 个 token 重新调用一次，得到位置 t 的 logits。
    start = max(0, t + 1 - length)
    positions = start + torch.arange(t + 1 - start) if true_positions else None
    return net(ids[:, start:t + 1], positions=positions)[0][:, -1]


RECEPTIVE_FIELD = LLAMA_CFG.layers * (WINDOW - 1) + 1
windowed64 = window_model().double()
reference_logits, _ = run_chunked(windowed64, STREAM[:1], 1)
crops = {name: torch.stack([crop_logits(windowed64, STREAM[:1], t, length, true) for t in range(WINDOW, STREAM_LEN)], 1)
         for name, length, true in [("crop_W_restart", WINDOW, False), ("crop_W_true_positions", WINDOW, True),
                                    ("crop_receptive_field", RECEPTIVE_FIELD, True),
                                    ("crop_receptive_field_minus_1", RECEPTIVE_FIELD - 1, True)]}
CROP = {name: max_abs_err(logits, reference_logits[:, WINDOW:]) for name, logits in crops.items()}
CROP["restart_vs_true_positions"] = max_abs_err(crops["crop_W_restart"], crops["crop_W_true_positions"])
CONTROLS["crop_to_window"] = {"section": 6, "check": "run_chunked", "measured": CROP["crop_W_restart"],
                              "caught": CROP["crop_W_restart"] > 1e-2}
say_table([[f"`{name}`", f"{value:.2e}"] for name, value in CROP.items()],
          en=[f"comparison (FP64, positions {WINDOW} to {STREAM_LEN - 1})", "max abs logit difference"],
          zh=[f"比较（FP64，位置 {WINDOW}–{STREAM_LEN - 1}）", "logits 最大绝对误差"])
assert CONTROLS["crop_to_window"]["caught"] and CROP["crop_receptive_field_minus_1"] > 1e-6
assert CROP["restart_vs_true_positions"] < 1e-10 and CROP["crop_receptive_field"] < 1e-10
