# %% [markdown] lang="en"
# ## 4. One attention head that reuses K and V
#
# Before stacking layers, check the core idea on a single head. Take 10 input vectors. The full path
# projects all 10 into Q, K and V and applies the causal mask. The cached path projects the first 7
# once and stores their K and V; later it projects only the last 3, concatenates their K and V onto the
# stored ones and uses the offset mask from section 3. The three outputs of the cached path must match
# rows 7–9 of the full path within the FP32 tolerance (a 7-row and a 3-row product may round differently
# from one 10-row product), and the joined K and V must equal the full path's K and V row for row.

# %% [markdown] lang="zh"
# ## 4. 复用 K/V 的单头注意力
#
# 在堆叠多层之前，先在单个注意力头上验证核心思路。取 10 个输入向量。完整路径把 10 个向量全部投影成 Q、K、V，再施加因果掩码。缓存路径先把前 7 个向量投影一次，存下它们的 K 和 V；之后只投影最后 3 个，把它们的 K/V 拼接到缓存的 K/V 之后，并使用第 3 节带偏移的掩码。缓存路径的 3 个输出应当与完整路径的第 7–9 行在 FP32 容差内一致（分成 7 行和 3 行做的两次乘法，舍入结果可能与一次 10 行的乘法不同）。拼接后的 K 和 V 也应当与完整路径的 K 和 V 逐行一致。

# %%
HEAD_DIM = 16
gen = torch.Generator().manual_seed(SEED)
# [en] Inputs of one head.
# [zh] 单个注意力头的输入。
head_x = torch.randn(1, 10, HEAD_DIM, generator=gen)                 # [B, T, D]
w_q, w_k, w_v = (torch.randn(HEAD_DIM, HEAD_DIM, generator=gen) / HEAD_DIM**0.5 for _ in range(3))

with torch.inference_mode():
    # [en] Full recomputation: every position projected, ordinary causal mask (past_len = 0).
    # [zh] 完整重算：每个位置都做投影，使用普通的因果掩码（past_len = 0）。
    full_out = masked_attention(head_x @ w_q, head_x @ w_k, head_x @ w_v, causal_mask(0, 10))

    # [en] Cached path: project the first 7 once and keep K and V ...
    # [zh] 缓存路径：前 7 个只投影一次，保存 K 和 V……
    cached_k, cached_v = head_x[:, :7] @ w_k, head_x[:, :7] @ w_v
    # [en] ... then project only the 3 new rows and read the cache.
    # [zh] ……之后只投影新来的 3 行，并读取缓存。
    new_x = head_x[:, 7:]
    head_k = torch.cat((cached_k, new_x @ w_k), dim=-2)
    head_v = torch.cat((cached_v, new_x @ w_v), dim=-2)
    chunk_out = masked_attention(new_x @ w_q, head_k, head_v, causal_mask(7, 3))

say(en=f"Single head: max abs error between the 3 cached-path outputs and rows 7 to 9 of the full path: "
       f"{max_abs_err(chunk_out, full_out[:, 7:]):.3e}.",
    zh=f"单头注意力：缓存路径的 3 个输出与完整路径第 7–9 行之间的最大绝对误差为 {max_abs_err(chunk_out, full_out[:, 7:]):.3e}。")
assert close(chunk_out, full_out[:, 7:])
# [en] The joined K/V are the full path's K/V, row for row: cached rows first, new rows after.
# [zh] 拼接后的 K/V 与完整路径的 K/V 逐行一致：缓存的行在前，新行在后。
assert close(head_k, head_x @ w_k) and close(head_v, head_x @ w_v)
