# %% [markdown] lang="en"
# **The receptive field of a windowed model.** The window applies *per layer*: position $t$ of layer 2 reads
# layer-1 outputs back to $t - W + 1$, each of which read back another $W - 1$ positions, so $L$ layers reach
# $L(W - 1)$ positions into the past, not $W - 1$. The cell runs the model on the last `length` tokens only, as a
# fresh call that keeps their true positions (`crop_logits`), and compares with the cached windowed model
# (`run_chunked`, one token per call) at every position $t \ge W$ (FP64): a crop of $L(W - 1) + 1 = 15$ tokens
# (`crop_receptive_field`) must reproduce it, a crop of 14 (`crop_receptive_field_minus_1`) or of $W = 8$
# (`crop_W_true_positions`) must not.

# %% [markdown] lang="zh"
# **滑动窗口模型的感受野。** 窗口是**逐层**生效的：第 2 层在位置 $t$ 上读取第 1 层直到 $t - W + 1$ 的输出，而这些输出又各自向前读取了 $W - 1$ 个位置，所以 $L$ 层加起来能回溯 $L(W - 1)$ 个位置，而不是 $W - 1$ 个。下面的单元格只把最后 `length` 个 token 重新送入模型，并保留它们的真实位置（`crop_logits`），再在每个 $t \ge W$ 的位置上（FP64）与带缓存的滑动窗口模型（`run_chunked`，每次调用一个 token）相比较：裁剪到 $L(W - 1) + 1 = 15$ 个 token（`crop_receptive_field`）必须与它一致，裁剪到 14 个（`crop_receptive_field_minus_1`）或 $W = 8$ 个（`crop_W_true_positions`）则必须不一致。

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


def crop_vs_windowed(length: int, true_positions: bool):
    logits = torch.stack([crop_logits(windowed64, STREAM[:1], t, length, true_positions) for t in range(WINDOW, STREAM_LEN)], 1)
    return logits, max_abs_err(logits, reference_logits[:, WINDOW:])


crops, CROP = {}, {}
for name, length in [("crop_receptive_field", RECEPTIVE_FIELD), ("crop_receptive_field_minus_1", RECEPTIVE_FIELD - 1),
                     ("crop_W_true_positions", WINDOW)]:
    crops[name], CROP[name] = crop_vs_windowed(length, True)
say_table([[f"`{name}`", f"{value:.2e}"] for name, value in CROP.items()],
          en=[f"crop with true positions vs the windowed model (FP64, positions {WINDOW} to {STREAM_LEN - 1})", "max abs logit difference"],
          zh=[f"保留真实位置的裁剪对照滑动窗口模型（FP64，位置 {WINDOW}–{STREAM_LEN - 1}）", "logits 最大绝对误差"])
assert CROP["crop_receptive_field"] < 1e-10 < 1e-6 < min(CROP["crop_receptive_field_minus_1"], CROP["crop_W_true_positions"])

# %% [markdown] lang="en"
# **Negative control 3: cropping the context to $W$ tokens instead of masking.** The damage comes from the crop
# alone. The shortcut: to produce the logits at position $t$, run the model on the last $W$ tokens only, as a
# fresh sequence with positions restarting at 0 (`crop_W_restart`). The comparison with the windowed model must
# catch it (first row below): the crop cuts off the receptive field, as the last row above showed. The second row,
# `restart_vs_true_positions`, compares it with the same crop at its true positions and must find nothing beyond
# FP64 rounding: the restart is harmless, because RoPE scores depend only on position differences (section 5's
# lesson).

# %% [markdown] lang="zh"
# **负对照 3：把上下文裁剪到 $W$ 个 token，而不是使用掩码。** 问题只出在裁剪本身。这条捷径是：要得到位置 $t$ 的 logits，只把最后 $W$ 个 token 当作一条新序列送入模型，位置从 0 重新开始（`crop_W_restart`）。与滑动窗口模型的比较必须查出它（下表第一行）：裁剪切掉了感受野的一部分，上表最后一行已经说明了这一点。第二行 `restart_vs_true_positions` 把它与保留真实位置的同样裁剪相比较，最大绝对误差必须在 FP64 的舍入误差以内：位置从 0 重新开始并无害处，因为 RoPE 的注意力分数只依赖位置之差（第 5 节的教训）。

# %%
crops["crop_W_restart"], CROP["crop_W_restart"] = crop_vs_windowed(WINDOW, False)
CROP["restart_vs_true_positions"] = max_abs_err(crops["crop_W_restart"], crops["crop_W_true_positions"])
crop_caught = CROP["crop_W_restart"] > 1e-2
CONTROLS["crop_to_window"] = {"section": 6, "check": "crop_vs_windowed", "caught": crop_caught}
say_table([[f"`{name}`", f"{CROP[name]:.2e}"] for name in ("crop_W_restart", "restart_vs_true_positions")],
          en=[f"comparison (FP64, positions {WINDOW} to {STREAM_LEN - 1})", "max abs logit difference"],
          zh=[f"比较（FP64，位置 {WINDOW}–{STREAM_LEN - 1}）", "logits 最大绝对误差"])
assert crop_caught and CROP["restart_vs_true_positions"] < 1e-10
