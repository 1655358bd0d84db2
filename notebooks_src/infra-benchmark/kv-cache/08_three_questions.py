# %% [markdown] lang="en"
# ### 8.2 Three questions learners ask
#
# **Why is Q not cached?** A query is used exactly once, by its own position: row $i$ of the attention
# output is built from query $i$ and the keys and values $0 \dots i$. Once position $i$ has produced its
# output, its query is never read again. Keys and values are different: every later query reads them.
# The cell changes every query except the last one and checks that the last output row does not move,
# and that the last row can be computed from its own query alone, reading the full K and V. The control:
# the changed queries did move their own rows, so the change was not too small to see.

# %% [markdown] lang="zh"
# ### 8.2 学习者常问的三个问题
#
# **为什么不缓存 Q？** 每个查询只用一次，而且只给它自己的位置用：注意力输出的第 $i$ 行由查询 $i$ 以及位置 $0 \dots i$ 的键和值算出。位置 $i$ 的输出一旦算好，它的查询就再也不会被读取。键和值则不同：之后的每一个查询都要读它们。下面的单元格改动除最后一个以外的所有查询，检查输出的最后一行保持不变，并验证只用最后一个位置自己的查询、读取完整的 K 和 V，就能算出这一行。作为对照，被改动的查询确实改变了各自的输出行，说明这次改动并没有小到看不出来。

# %%
with torch.inference_mode():
    gen = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(1, cfg.heads, 8, cfg.head_dim, generator=gen) for _ in range(3))   # [1, H, 8, Dh]
    out = masked_attention(q, k, v, causal_mask(0, 8))
    q_changed = q.clone()
    # [en] Change queries 0–6.
    # [zh] 改动第 0–6 个查询。
    q_changed[:, :, :7] += 1.0
    out_changed = masked_attention(q_changed, k, v, causal_mask(0, 8))
    last_alone = masked_attention(q[:, :, 7:], k, v, causal_mask(7, 1))   # [1, H, 1, Dh]

say(en=f"Changing queries 0 to 6 moved their own output rows by up to {max_abs_err(out_changed[:, :, :7], out[:, :, :7]):.3f} "
       f"and the last row by {max_abs_err(out_changed[:, :, 7], out[:, :, 7]):.1e}; the last row computed from its own "
       f"query alone differs from the computation over all 8 positions by {max_abs_err(last_alone[:, :, 0], out[:, :, 7]):.1e}.",
    zh=f"改动查询 0–6 后，它们各自的输出行的最大绝对误差为 {max_abs_err(out_changed[:, :, :7], out[:, :, :7]):.3f}，"
       f"最后一行的最大绝对误差为 {max_abs_err(out_changed[:, :, 7], out[:, :, 7]):.1e}；只用最后一个位置自己的查询算出的那一行，"
       f"与 8 个位置一起计算的结果之间的最大绝对误差为 {max_abs_err(last_alone[:, :, 0], out[:, :, 7]):.1e}。")
assert close(out_changed[:, :, 7], out[:, :, 7]) and close(last_alone[:, :, 0], out[:, :, 7])
assert not close(out_changed[:, :, :7], out[:, :, :7])

# %% [markdown] lang="en"
# **Why cache K and V, and not each layer's hidden states?** One could instead keep each layer's
# input $X_\ell$ and compute K and V from it when needed. The decoder of *Dive into Deep Learning*
# (d2l) does exactly that: its cache holds every block's inputs, and every step concatenates the new
# input and projects keys and values for **all** positions again. The answers are the same; the work is
# not. Each step re-projects K and V for the $T - 1$ cached positions: $2L(T-1)W^2$ extra
# multiply-adds. In exchange the cache is smaller: $L \cdot T \cdot W$ numbers instead of
# $2L \cdot T \cdot H_{kv} D_h$, half as much for a model like ours where $H_{kv} D_h = W$ (with
# grouped-query attention, 8.3 below, the K/V cache can even be the smaller one). The cell implements
# that variant with our weights, checks that it returns the same logits, and counts its multiply-adds
# and the bytes of both caches at $T = 256$.

# %% [markdown] lang="zh"
# **为什么缓存 K/V，而不是每层的隐藏状态？** 也可以只保存每层的输入 $X_\ell$，需要时再从它算出 K 和 V。《动手学深度学习》（d2l）的解码器正是这样做的：它的缓存里存的是每个 Transformer 块的输入，每一步把新输入拼接上去，再为**所有**位置重新投影出键和值。结果相同，工作量却不同：每一步都要为缓存中的 $T - 1$ 个位置重新投影 K 和 V，多出 $2L(T-1)W^2$ 次乘加。换来的是更小的缓存：$L \cdot T \cdot W$ 个数，而不是 $2L \cdot T \cdot H_{kv} D_h$ 个；对我们这样 $H_{kv} D_h = W$ 的模型，正好少一半（若使用分组查询注意力，见下文 8.3，K/V 缓存反而可能更小）。下面的单元格用我们的权重实现这种做法，检查它返回相同的 logits，并统计 $T = 256$ 时它的乘加次数和两种缓存的字节数。

# %%
# [en] The alternative cache: each layer's input X (one tensor per layer, [B, T, width]); K and V of
# [en] every position are projected again at every step.
# [zh] 另一种缓存：每层的输入 X（每层一个张量，形状 [B, T, width]）；每一步都为所有位置重新投影 K 和 V。
@torch.inference_mode()
def hidden_state_forward(model: CacheDecoder, ids: torch.Tensor, cache=None):
    past_len = 0 if cache is None else cache[0].shape[1]
    new_len = ids.shape[1]
    x = model.wte(ids) + model.wpe(model.positions_fn(past_len, new_len))      # [B, T_new, width]
    allowed = model.mask_fn(past_len, new_len)                                  # [T_new, T_total]
    new_cache = []
    for layer, block in enumerate(model.blocks):
        x_all = x if cache is None else torch.cat((cache[layer], x), dim=1)     # [B, T_total, width]
        new_cache.append(x_all)
        attn, h_all = block.attn, block.ln_1(x_all)
        q = attn.split_heads(attn.q(h_all[:, past_len:]))                       # [B, H, T_new, Dh]
        k = attn.split_heads(attn.k(h_all))                                     # [B, H, T_total, Dh]
        v = attn.split_heads(attn.v(h_all))
        context = masked_attention(q, k, v, allowed).transpose(1, 2).reshape(x.shape)
        x = x + attn.proj(context)
        x = x + block.mlp(block.ln_2(x))
    return model.lm_head(model.ln_f(x)), new_cache


def hidden_state_extra_macs(c: DecoderConfig, total_len: int) -> int:
    return 2 * c.layers * (total_len - 1) * c.width * c.width


T = 256
ids = COST_STREAM[:, :T]
with torch.inference_mode():
    _, kv_past = model(ids[:, :-1])
    kv_logits, _ = model(ids[:, -1:], kv_past)
_, x_past = hidden_state_forward(model, ids[:, :-1])
x_logits, x_cache = hidden_state_forward(model, ids[:, -1:], x_past)
HIDDEN_STATE = {
    "T": T,
    "kv_step_macs": with_total(cached_step_macs(cfg, T))["total"],
    "hidden_state_step_macs": counted_macs(lambda: hidden_state_forward(model, ids[:, -1:], x_past))["total"],
    "extra_macs": hidden_state_extra_macs(cfg, T),
    "kv_cache_bytes": cache_bytes(kv_past),
    "hidden_state_cache_bytes": sum(x.numel() * x.element_size() for x in x_past),
}
say_table(
    [["K, V", f"{HIDDEN_STATE['kv_step_macs']:,}", f"{HIDDEN_STATE['kv_cache_bytes']:,}"],
     ["X", f"{HIDDEN_STATE['hidden_state_step_macs']:,}", f"{HIDDEN_STATE['hidden_state_cache_bytes']:,}"]],
    en=["cache holds", f"multiply-adds of one step at $T = {T}$", f"cache of {T - 1} positions, bytes"],
    zh=["缓存的内容", f"$T = {T}$ 时一步的乘加次数", f"{T - 1} 个位置的缓存（字节）"],
)
say(en=f"Same logits: max abs error {max_abs_err(x_logits, kv_logits):.1e}.",
    zh=f"logits 相同：最大绝对误差 {max_abs_err(x_logits, kv_logits):.1e}。")
# [en] Same logits; the step costs 2L(T-1)W^2 more multiply-adds; the cache holds half the bytes.
# [zh] logits 相同；一步多出 2L(T-1)W^2 次乘加；缓存的字节数是 K/V 缓存的一半。
assert (close(x_logits, kv_logits)
        and HIDDEN_STATE["hidden_state_step_macs"] == HIDDEN_STATE["kv_step_macs"] + HIDDEN_STATE["extra_macs"]
        and 2 * HIDDEN_STATE["hidden_state_cache_bytes"] == HIDDEN_STATE["kv_cache_bytes"])

# %% [markdown] lang="en"
# At $T = 256$ the hidden-state cache costs {{run:questions.hidden_over_kv:.1f}} times the multiply-adds of
# the K/V cache per step, to keep half the bytes. For a model like ours that is a poor trade; serving
# systems keep K and V.
#
# **Why does a cached step still grow with $T$?** Because the new query has to read every key and value
# of the history. In the table of 8.1 the cached step grows by exactly $2LW$ multiply-adds per
# extra position, {{run:questions.slope}} here (two products of length $W$ per layer: $q k^\top$ and the
# weighted sum of $V$), and the attention share of the step rises from {{run:questions.share_min:.0%}} at $T = 16$ to
# {{run:questions.share_max:.0%}} at $T = 256$; the K/V it reads grows linearly too. The cache removes
# the recomputation of old positions, not the reading of them. The cell checks the slope between every
# two lengths of the table.

# %% [markdown] lang="zh"
# 在 $T = 256$ 时，缓存隐藏状态每一步的乘加次数是缓存 K/V 的 {{run:questions.hidden_over_kv:.1f}} 倍，换来的只是少一半的字节数。对我们这样的模型来说，这笔交易并不划算；推理服务系统缓存的都是 K 和 V。
#
# **为什么缓存路径的一步仍随 $T$ 增长？** 因为新的查询必须读取历史上所有的键和值。在 8.1 的表中，序列每多一个位置，缓存路径的一步正好多 $2LW$ 次乘加，这里是 {{run:questions.slope}} 次（每层两次长度为 $W$ 的点积：$q k^\top$ 和对 $V$ 的加权求和）；注意力在这一步中的占比从 $T = 16$ 时的 {{run:questions.share_min:.0%}} 升到 $T = 256$ 时的 {{run:questions.share_max:.0%}}；它读取的 K/V 也随之线性增长。缓存省掉的是旧位置的重新计算，而不是对它们的读取。下面的单元格核对表中每两个相邻长度之间的斜率。

# %%
slopes = [(longer["cached"]["total"] - shorter["cached"]["total"]) / (longer["T"] - shorter["T"])
          for shorter, longer in zip(COST_ROWS, COST_ROWS[1:])]
attention_share = [r["cached"]["attention"] / r["cached"]["total"] for r in COST_ROWS]
say_table([[str(a["T"]), str(b["T"]), f"{s:g}"] for a, b, s in zip(COST_ROWS, COST_ROWS[1:], slopes)],
          en=["from $T$", "to $T$", "multiply-adds per extra position"], zh=["起点 $T$", "终点 $T$", "每多一个位置增加的乘加次数"])
assert slopes == [2 * cfg.layers * cfg.width] * len(slopes)

# %% tags=["prose-values"]
{"questions": {"hidden_over_kv": HIDDEN_STATE["hidden_state_step_macs"] / HIDDEN_STATE["kv_step_macs"],
               "slope": 2 * cfg.layers * cfg.width,
               "share_min": attention_share[0], "share_max": attention_share[-1]}}
