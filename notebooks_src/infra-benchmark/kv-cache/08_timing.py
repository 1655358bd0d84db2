# %% [markdown] lang="en"
# ## 8. What caching removes, and what remains
#
# Equivalence holds, so we may now ask what the cache saves. We first count the work of one step from
# the configuration alone and check the count against the matrix products that actually run. The count
# answers three questions learners often ask. We then scale the cache to published models, and only
# at the end measure time on this CPU and put the measurements next to the count.
#
# ### 8.1 Counting the multiply-adds of one step
#
# Write $W$ for the width, $M$ for the MLP hidden width, $V$ for the vocabulary size and $L$ for the
# number of layers. Take one step at length $T$: the sequence then holds $T$ tokens, the newest at
# position $T - 1$. When $N$ positions pass through a layer and their queries read $T$ keys, the layer
# performs
#
# * $4NW^2$ multiply-adds in the projections $Q$, $K$, $V$ and the output projection;
# * $2NTW$ in attention: $NTW$ for the scores $QK^\top$ and $NTW$ for the weighted sum of $V$ (each sums $N \cdot T \cdot D_h$ over the $H$ heads, and $H D_h = W$);
# * $2NWM$ in the MLP;
#
# and the vocabulary projection adds $NWV$ once. The **full recomputation** runs every position again,
# $N = T$: its step costs $L(4TW^2 + 2T^2W + 2TWM) + TWV$, growing like $TW^2 + T^2W$. (The dense score
# matrix includes the masked half; our code computes it and then discards it.) The **cached step** runs
# one position, $N = 1$: $L(4W^2 + 2TW + 2WM) + WV$. Everything except attention is now a constant, of
# order $W^2$; attention still grows like $TW$.
#
# Only the multiply-adds of matrix products are counted; LayerNorm, softmax, GELU, bias additions and
# embedding lookups are left out. To check the formula we count independently:
# `torch.utils.flop_counter.FlopCounterMode` records every matrix product that actually runs, with the
# shapes it ran on, per module (one multiply-add is two floating-point operations).

# %% [markdown] lang="zh"
# ## 8. 缓存省掉了什么，又留下了什么
#
# 等价性已经成立，现在可以问缓存到底省了什么。我们先只根据配置算出一步的工作量，再与实际执行的矩阵乘法核对；这个计数也回答了学习者常问的三个问题。然后把缓存大小的计算推广到公开模型上。最后才在这台 CPU 上计时，并把测量结果与计数放在一起比较。
#
# ### 8.1 统计一步的乘加次数
#
# 记宽度为 $W$，MLP 隐藏层宽度为 $M$，词表大小为 $V$，层数为 $L$。考虑长度为 $T$ 时的一步：此时序列共有 $T$ 个 token，最新的一个位于位置 $T - 1$。若有 $N$ 个位置经过某一层，且它们的查询读取 $T$ 个键，这一层要做：
#
# * 投影 $Q$、$K$、$V$ 和输出投影：$4NW^2$ 次乘加；
# * 注意力：$2NTW$ 次，其中分数 $QK^\top$ 占 $NTW$，对 $V$ 的加权求和占 $NTW$（两者都是对 $H$ 个头各做 $N \cdot T \cdot D_h$ 次，而 $H D_h = W$）；
# * MLP：$2NWM$ 次；
#
# 词表投影不分层，只另加一次 $NWV$。**完整重算**把每个位置都重新算一遍，即 $N = T$：一步的开销为 $L(4TW^2 + 2T^2W + 2TWM) + TWV$，按 $TW^2 + T^2W$ 增长。（稠密的分数矩阵包含被掩码遮住的那一半：我们的代码照样把它算出来，然后丢弃。）**缓存路径**的一步只算一个位置，即 $N = 1$：$L(4W^2 + 2TW + 2WM) + WV$。除注意力以外的部分都成了常数，量级为 $W^2$；注意力部分仍按 $TW$ 增长。
#
# 这里只统计矩阵乘法的乘加次数，不计 LayerNorm、softmax、GELU、偏置加法和嵌入查表。为了核对公式，我们再独立地数一遍：`torch.utils.flop_counter.FlopCounterMode` 会按模块记录实际执行的每一次矩阵乘法及其形状（一次乘加算两次浮点运算）。

# %%
from torch.utils.flop_counter import FlopCounterMode

PARTS = ("projections", "attention", "mlp", "vocab")


# [en] The formula: multiply-adds of one call in which new_len positions pass through the network and
# [en] their queries read total_len keys.
# [zh] 公式：一次调用中有 new_len 个位置经过网络、它们的查询读取 total_len 个键时的乘加次数。
def step_macs(c: DecoderConfig, total_len: int, new_len: int) -> dict:
    return {
        "projections": c.layers * 4 * new_len * c.width * c.width,
        "attention": c.layers * 2 * new_len * total_len * c.width,
        "mlp": c.layers * 2 * new_len * c.width * c.mlp,
        "vocab": new_len * c.width * c.vocab,
    }


def full_step_macs(c: DecoderConfig, total_len: int) -> dict:
    return step_macs(c, total_len, total_len)


def cached_step_macs(c: DecoderConfig, total_len: int) -> dict:
    return step_macs(c, total_len, 1)


# [en] The count: run the call under FlopCounterMode and sort its matrix products by module.
# [zh] 实测计数：在 FlopCounterMode 下执行这次调用，并按模块归类其中的矩阵乘法。
@torch.inference_mode()
def counted_macs(call) -> dict:
    with FlopCounterMode(display=False) as counter:
        call()
    parts = dict.fromkeys(PARTS, 0)
    for module, ops in counter.get_flop_counts().items():
        by_op = {str(op): flops // 2 for op, flops in ops.items()}
        if module.endswith(".attn"):
            # [en] Linear layers q, k, v, proj (addmm); q k^T and weights @ v (bmm).
            # [zh] 线性层 q、k、v、proj（addmm）；q k^T 与 weights @ v（bmm）。
            parts["projections"] += by_op.get("aten.addmm", 0)
            parts["attention"] += by_op.get("aten.bmm", 0)
        elif module.endswith(".mlp"):
            parts["mlp"] += sum(by_op.values())
        elif module.endswith(".lm_head"):
            parts["vocab"] += sum(by_op.values())
    parts["total"] = counter.get_total_flops() // 2
    return parts


def with_total(parts: dict) -> dict:
    return {**parts, "total": sum(parts[p] for p in PARTS)}

# %% [markdown] lang="en"
# The cell compares formula and count at $T = 16$, 64, 128 and 256 for both paths (the cached step
# gets a cache of $T - 1$ positions). Along the way it measures one more quantity the formula
# predicts: the bytes of K and V a cached step reads, $2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h
# \cdot s$ for batch $B$ and $s$ bytes per element. A forward hook on every attention module catches the
# K and V that the step really multiplied. A step reads the **whole** cache, every step. Our `torch.cat`
# adds a copy on top: the hook also confirms that each step's K lives in new memory, so the step reads
# the old $T - 1$ rows once more to copy them.

# %% [markdown] lang="zh"
# 下面的单元格在 $T = 16$、64、128、256 时，对两条路径分别比较公式与实测计数（缓存路径的一步带着 $T - 1$ 个位置的缓存）。顺便再测一个公式能预测的量：缓存路径每一步读取的 K/V 字节数，即 $2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$（$B$ 为 batch 大小，$s$ 为每个元素的字节数）。每个注意力模块上都挂了一个前向钩子，截下这一步真正参与乘法的 K 和 V。每一步都要把**整个**缓存读一遍，而我们的 `torch.cat` 还额外多了一次复制：钩子同时确认了每一步的 K 都位于新分配的内存中，也就是说，这一步为了复制，又把旧的 $T - 1$ 行读了一遍。

# %%
COST_LENGTHS = (16, 64, 128, 256)
gen = torch.Generator().manual_seed(SEED + 2)
COST_STREAM = torch.randint(0, cfg.vocab, (1, max(COST_LENGTHS)), generator=gen)


def kv_read_bytes(c: DecoderConfig, batch: int, total_len: int, kv_heads: int, bytes_per_element: int) -> int:
    return 2 * batch * total_len * c.layers * kv_heads * c.head_dim * bytes_per_element


def kv_payload_bytes(batch: int, length: int, config: DecoderConfig, bytes_per_element: int) -> int:
    return 2 * batch * length * config.layers * config.heads * config.head_dim * bytes_per_element


def cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for pair in cache for t in pair)


COST_ROWS = []
for T in COST_LENGTHS:
    ids = COST_STREAM[:, :T]
    with torch.inference_mode():
        # [en] The cache holds T - 1 positions.
        # [zh] 缓存中有 T - 1 个位置。
        _, past = model(ids[:, :-1])
    read, fresh_storage = [], []

    # [en] The K and V this attention module multiplied, and whether K is a new tensor.
    # [zh] 这个注意力模块实际参与乘法的 K 和 V，以及 K 是否是新张量。
    def catch_kv(module, args, output):
        (k, v), (past_k, _) = output[1], args[2]
        read.append(k.numel() * k.element_size() + v.numel() * v.element_size())
        fresh_storage.append(k.data_ptr() != past_k.data_ptr())

    hooks = [block.attn.register_forward_hook(catch_kv) for block in model.blocks]
    try:
        cached = counted_macs(lambda: model(ids[:, -1:], past))
    finally:
        for hook in hooks:
            hook.remove()
    full = counted_macs(lambda: model(ids))
    assert full == with_total(full_step_macs(cfg, T)), (T, full)
    assert cached == with_total(cached_step_macs(cfg, T)), (T, cached)
    assert sum(read) == kv_read_bytes(cfg, 1, T, cfg.heads, 4) == kv_payload_bytes(1, T, cfg, 4)
    assert len(fresh_storage) == cfg.layers and all(fresh_storage)
    COST_ROWS.append({"T": T, "full": full, "cached": cached, "kv_read_bytes": sum(read)})

# [en] The numbers the text quotes, at T = 256; a full step is exactly T cached steps.
# [zh] 正文引用的 T = 256 时的数字；完整重算一步的乘加次数恰好是缓存路径一步的 T 倍。
assert COST_ROWS[-1]["full"]["total"] == 43_532_288 and COST_ROWS[-1]["cached"]["total"] == 170_048
assert all(r["full"]["total"] == r["T"] * r["cached"]["total"] for r in COST_ROWS)
assert COST_ROWS[-1]["kv_read_bytes"] == 262_144
say_table(
    [[str(r["T"]), f"{r['full']['total']:,}", f"{r['cached']['total']:,}",
      f"{r['cached']['attention'] / r['cached']['total']:.0%}", f"{r['kv_read_bytes']:,}"] for r in COST_ROWS],
    en=["T", "full step, multiply-adds", "cached step, multiply-adds", "attention share of the cached step",
        "K/V bytes read by the cached step (fp32)"],
    zh=["T", "完整重算一步的乘加次数", "缓存路径一步的乘加次数", "缓存路径一步中注意力的占比",
        "缓存路径一步读取的 K/V 字节数（FP32）"],
)
say(en="Formula and count agree for every part (projections, attention, MLP, vocabulary) at every length, "
       "for both paths; the K/V the hooks caught have exactly the predicted size.",
    zh="在每个长度上、对两条路径，公式与实测计数的每一部分（投影、注意力、MLP、词表投影）都完全一致；"
       "钩子截下的 K/V 大小也与预测完全相同。")

# %% [markdown] lang="en"
# At $T = 256$ a full step costs 43,532,288 multiply-adds and a cached step 170,048: exactly $T = 256$
# times fewer, as the two formulas say (the full step is $T$ times the cached one). The cached step
# still reads 262,144 bytes of K and V, the whole cache.
#
# ### 8.2 Three questions learners ask
#
# **Why is Q not cached?** A query is used exactly once, by its own position: row $i$ of the attention
# output is built from query $i$ and the keys and values $0 \dots i$. Once position $i$ has produced its
# output, its query is never read again. Keys and values are different: every later query reads them.
# The cell changes every query except the last one and checks that the last output row does not move,
# and that the last row can be computed from its own query alone, reading the full K and V.

# %% [markdown] lang="zh"
# 当 $T = 256$ 时，完整重算的一步要做 43,532,288 次乘加，缓存路径的一步只要 170,048 次，正好是前者的 $1/T = 1/256$，与两个公式相符（完整重算一步的开销正好是缓存路径一步的 $T$ 倍）。但缓存路径的一步仍要读取 262,144 字节的 K/V，也就是整个缓存。
#
# ### 8.2 学习者常问的三个问题
#
# **为什么不缓存 Q？** 每个查询只用一次，而且只给它自己的位置用：注意力输出的第 $i$ 行由查询 $i$ 以及位置 $0 \dots i$ 的键和值算出。位置 $i$ 的输出一旦算好，它的查询就再也不会被读取。键和值则不同：之后的每一个查询都要读它们。下面的单元格改动除最后一个以外的所有查询，检查输出的最后一行保持不变，并验证只用最后一个位置自己的查询、读取完整的 K 和 V，就能算出这一行。

# %%
with torch.inference_mode():
    gen = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(1, cfg.heads, 8, cfg.head_dim, generator=gen) for _ in range(3))   # [1, H, 8, Dh]
    out = masked_attention(q, k, v, causal_mask(0, 8))
    q_changed = q.clone()
    # [en] Change queries 0..6.
    # [zh] 改动第 0..6 个查询。
    q_changed[:, :, :7] += 1.0
    out_changed = masked_attention(q_changed, k, v, causal_mask(0, 8))
    last_alone = masked_attention(q[:, :, 7:], k, v, causal_mask(7, 1))   # [1, H, 1, Dh]

# [en] The last row did not move; the changed queries moved their own rows.
# [zh] 最后一行没有变化；被改动的查询只改变了它们自己的行。
torch.testing.assert_close(out_changed[:, :, 7], out[:, :, 7])
assert not torch.allclose(out_changed[:, :, :7], out[:, :, :7])
torch.testing.assert_close(last_alone[:, :, 0], out[:, :, 7])
say(en=f"Changing queries 0-6 moved their own output rows by up to {(out_changed - out)[:, :, :7].abs().max().item():.3f} "
       f"and the last row by {(out_changed - out)[:, :, 7].abs().max().item():.1e}; the last row computed from its own query alone "
       f"matches the computation over all 8 positions.",
    zh=f"改动查询 0–6 后，它们各自的输出行最多变化 {(out_changed - out)[:, :, :7].abs().max().item():.3f}，"
       f"最后一行只变化 {(out_changed - out)[:, :, 7].abs().max().item():.1e}；只用最后一个位置自己的查询算出的那一行，"
       f"与 8 个位置一起计算时的结果一致。")

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
# at $T = 256$.

# %% [markdown] lang="zh"
# **为什么缓存 K/V，而不是每层的隐藏状态？** 也可以只保存每层的输入 $X_\ell$，需要时再从它算出 K 和 V。《动手学深度学习》（d2l）的解码器正是这样做的：它的缓存里存的是每个 Transformer 块的输入，每一步把新输入拼接上去，再为**所有**位置重新投影出键和值。结果相同，工作量却不同：每一步都要为缓存中的 $T - 1$ 个位置重新投影 K 和 V，多出 $2L(T-1)W^2$ 次乘加。换来的是更小的缓存：$L \cdot T \cdot W$ 个数，而不是 $2L \cdot T \cdot H_{kv} D_h$ 个；对我们这样 $H_{kv} D_h = W$ 的模型，正好少一半（若使用分组查询注意力，见下文 8.3，K/V 缓存反而可能更小）。下面的单元格用我们的权重实现这种做法，检查它返回相同的 logits，并统计它在 $T = 256$ 时的乘加次数。

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
torch.testing.assert_close(x_logits, kv_logits, atol=1e-5, rtol=1e-5)
hidden_counted = counted_macs(lambda: hidden_state_forward(model, ids[:, -1:], x_past))["total"]
HIDDEN_STATE = {
    "T": T,
    "kv_step_macs": with_total(cached_step_macs(cfg, T))["total"],
    "hidden_state_step_macs": hidden_counted,
    "extra_macs": hidden_state_extra_macs(cfg, T),
    "kv_cache_bytes": cache_bytes(kv_past),
    "hidden_state_cache_bytes": sum(x.numel() * x.element_size() for x in x_past),
}
assert hidden_counted == HIDDEN_STATE["kv_step_macs"] + HIDDEN_STATE["extra_macs"] == 170_048 + 4_177_920
assert 2 * HIDDEN_STATE["hidden_state_cache_bytes"] == HIDDEN_STATE["kv_cache_bytes"]
say(en=f"At T = {T}: same logits (max difference {(x_logits - kv_logits).abs().max().item():.1e}); a step with the "
       f"hidden-state cache costs {hidden_counted:,} multiply-adds, {hidden_counted / HIDDEN_STATE['kv_step_macs']:.1f} times "
       f"the K/V step, for a cache of {HIDDEN_STATE['hidden_state_cache_bytes']:,} instead of {HIDDEN_STATE['kv_cache_bytes']:,} bytes.",
    zh=f"T = {T} 时：logits 相同（最大差 {(x_logits - kv_logits).abs().max().item():.1e}）；缓存隐藏状态时，一步要做 "
       f"{hidden_counted:,} 次乘加，是缓存 K/V 时的 {hidden_counted / HIDDEN_STATE['kv_step_macs']:.1f} 倍；"
       f"换来的缓存是 {HIDDEN_STATE['hidden_state_cache_bytes']:,} 字节，而不是 {HIDDEN_STATE['kv_cache_bytes']:,} 字节。")

# %% [markdown] lang="en"
# **Why does a cached step still grow with $T$?** Because the new query has to read every key and value
# of the history. In the table of 8.1 the cached step grows by exactly $2LW = 256$ multiply-adds per
# extra position, and the attention share of the step rises from a few percent at $T = 16$ to over a
# third at $T = 256$; the K/V it reads grows linearly too. The cache removes the recomputation of old
# positions, not the reading of them. The cell checks the slope.

# %% [markdown] lang="zh"
# **为什么缓存路径的一步仍随 $T$ 增长？** 因为新的查询必须读取历史上所有的键和值。在 8.1 的表中，序列每多一个位置，缓存路径的一步正好多 $2LW = 256$ 次乘加；注意力在这一步中的占比从 $T = 16$ 时的百分之几，升到 $T = 256$ 时的三分之一以上；它读取的 K/V 也随之线性增长。缓存省掉的是旧位置的重新计算，而不是对它们的读取。下面的单元格核对这个斜率。

# %%
for shorter, longer in zip(COST_ROWS, COST_ROWS[1:]):
    slope = (longer["cached"]["total"] - shorter["cached"]["total"]) / (longer["T"] - shorter["T"])
    assert slope == 2 * cfg.layers * cfg.width == 256
    assert longer["kv_read_bytes"] > shorter["kv_read_bytes"]
attention_share = [r["cached"]["attention"] / r["cached"]["total"] for r in COST_ROWS]
assert attention_share[0] < 0.05 and attention_share[-1] > 1 / 3
assert all(a < b for a, b in zip(attention_share, attention_share[1:]))
say(en=f"Slope of the cached step: {2 * cfg.layers * cfg.width} multiply-adds per position; attention share "
       f"{attention_share[0]:.1%} at T = {COST_ROWS[0]['T']}, {attention_share[-1]:.1%} at T = {COST_ROWS[-1]['T']}.",
    zh=f"缓存路径一步的斜率：每多一个位置，多 {2 * cfg.layers * cfg.width} 次乘加；注意力占比在 T = {COST_ROWS[0]['T']} 时为 "
       f"{attention_share[0]:.1%}，在 T = {COST_ROWS[-1]['T']} 时为 {attention_share[-1]:.1%}。")

# %% [markdown] lang="en"
# ### 8.3 The cache of published models
#
# The same payload formula, per token: $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ bytes. The sizes of
# three published models are typed in below from their configuration files on the Hugging Face Hub
# (nothing is downloaded; the source of every number is named in the code). GPT-2 and Llama 2 7B give
# every attention head its own K and V. Llama 3.1 8B uses **grouped-query attention** (GQA): its 32
# query heads share 8 K/V heads, so its cache per token is a quarter of Llama 2 7B's, although the two
# models have the same number of layers and the same width (the companion notebook
# `infra-benchmark/kv-cache-architectures` builds GQA into our decoder). Before applying the formula to them, the
# cell checks it on our own decoder, in FP32 and in FP16, against real caches.

# %% [markdown] lang="zh"
# ### 8.3 公开模型的缓存有多大
#
# 还是同一个数据量公式，按每个 token 计算：$2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ 字节。下面录入了三个公开模型的尺寸，取自它们在 Hugging Face Hub 上的配置文件（不下载任何东西；每个数的出处都写在代码里）。GPT-2 和 Llama 2 7B 的每个注意力头都有自己的 K 和 V。Llama 3.1 8B 使用**分组查询注意力**（grouped-query attention，GQA）：32 个查询头共用 8 个 K/V 头，所以尽管它与 Llama 2 7B 层数相同、宽度相同，每个 token 的缓存却只有后者的四分之一（配套笔记本 `infra-benchmark/kv-cache-architectures` 会把 GQA 加进我们的解码器）。在把公式用到这些模型之前，这个单元格先在我们自己的解码器上，分别用 FP32 和 FP16 的真实缓存核对它。

# %%
@dataclass
class PublishedConfig:
    name: str
    source: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    max_positions: int


# [en] Typed from each model's config.json on the Hugging Face Hub (the field names are theirs).
# [zh] 取自各模型在 Hugging Face Hub 上的 config.json（字段名沿用原文件）。
PUBLISHED = [
    PublishedConfig("GPT-2 (124M)", "openai-community/gpt2 config.json: n_layer 12, n_head 12, n_embd 768, n_positions 1024",
                    layers=12, heads=12, kv_heads=12, head_dim=768 // 12, max_positions=1024),
    PublishedConfig("Llama 2 7B", "meta-llama/Llama-2-7b-hf config.json: num_hidden_layers 32, num_attention_heads 32, "
                    "num_key_value_heads 32, hidden_size 4096, max_position_embeddings 4096",
                    layers=32, heads=32, kv_heads=32, head_dim=4096 // 32, max_positions=4096),
    PublishedConfig("Llama 3.1 8B", "meta-llama/Llama-3.1-8B config.json: num_hidden_layers 32, num_attention_heads 32, "
                    "num_key_value_heads 8, head_dim 128, max_position_embeddings 131072",
                    layers=32, heads=32, kv_heads=8, head_dim=128, max_positions=131072),
]
CONTEXTS = (4096, 32768)
FP16_BYTES = 2


def binary_size(n_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:,.4g} {unit}"
    return f"{n_bytes} B"


# [en] The formula on our decoder, against real caches of 256 tokens in FP32 and in FP16.
# [zh] 先在我们的解码器上核对公式：FP32 和 FP16 下各取 256 个 token 的真实缓存。
for dtype in (torch.float32, torch.float16):
    with torch.inference_mode():
        _, real_cache = with_dtype(model, dtype)(COST_STREAM)
    per_token = kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, torch.empty((), dtype=dtype).element_size())
    assert all(t.dtype == dtype for pair in real_cache for t in pair)
    assert cache_bytes(real_cache) == COST_STREAM.shape[1] * per_token
assert kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, FP16_BYTES) == 512

KV_TABLE = [{"name": "`DecoderConfig()`", "layers": cfg.layers, "heads": cfg.heads, "kv_heads": cfg.heads,
             "head_dim": cfg.head_dim, "max_positions": cfg.max_positions, "source": "DecoderConfig()"}]
KV_TABLE += [{"name": p.name, "layers": p.layers, "heads": p.heads, "kv_heads": p.kv_heads, "head_dim": p.head_dim,
              "max_positions": p.max_positions, "source": p.source} for p in PUBLISHED]
for row in KV_TABLE:
    row["fp16_bytes_per_token"] = kv_bytes_per_token(row["layers"], row["kv_heads"], row["head_dim"], FP16_BYTES)
    row["fp16_bytes_per_context"] = {str(n): n * row["fp16_bytes_per_token"] for n in CONTEXTS}

by_name = {row["name"]: row for row in KV_TABLE}
assert by_name["GPT-2 (124M)"]["fp16_bytes_per_token"] == 36_864                       # 36 KiB
assert by_name["Llama 2 7B"]["fp16_bytes_per_token"] == 524_288                         # 512 KiB
assert by_name["Llama 3.1 8B"]["fp16_bytes_per_token"] == 131_072                       # 128 KiB
assert by_name["Llama 2 7B"]["fp16_bytes_per_token"] == 4 * by_name["Llama 3.1 8B"]["fp16_bytes_per_token"]
# [en] ... although the two have the same number of layers and the same width (query heads x head size).
# [zh] ……尽管两者的层数相同，宽度（查询头数 × 每头维度）也相同。
assert all(by_name["Llama 2 7B"][key] == by_name["Llama 3.1 8B"][key] for key in ("layers", "heads", "head_dim"))
# [en] With GQA the K/V cache is the smaller one (8.2): per layer and token it holds 2 * H_kv * D_h
# [en] numbers, fewer than the W of a hidden state.
# [zh] 有了 GQA，K/V 缓存反而比隐藏状态缓存更小（见 8.2）：每层每个 token 的 K/V 是 2 * H_kv * D_h
# [zh] 个数，少于隐藏状态的 W 个。
llama3 = by_name["Llama 3.1 8B"]
assert 2 * llama3["kv_heads"] * llama3["head_dim"] < llama3["heads"] * llama3["head_dim"]
assert by_name["Llama 3.1 8B"]["fp16_bytes_per_context"]["32768"] == 4 * 2**30          # 4 GiB
say_table(
    [[row["name"], str(row["layers"]), f"{row['heads']} / {row['kv_heads']}", str(row["head_dim"]),
      binary_size(row["fp16_bytes_per_token"])]
     + [binary_size(row["fp16_bytes_per_context"][str(n)]) + ("" if n <= row["max_positions"] else " *") for n in CONTEXTS]
     for row in KV_TABLE],
    en=["model", "layers L", "query heads / K/V heads", "head size D_h", "K/V per token (fp16)",
        "4,096-token context", "32,768-token context"],
    zh=["模型", "层数 L", "查询头 / K/V 头", "每头维度 D_h", "每个 token 的 K/V（FP16）",
        "4,096 个 token 的上下文", "32,768 个 token 的上下文"],
)
for row in KV_TABLE[1:]:
    print(f"{row['name']}: {row['source']}")

# %% [markdown] lang="en"
# An asterisk marks a context longer than the model's position table (GPT-2 has 1,024 positions, our
# decoder 512, Llama 2 4,096): the formula still gives the size such a cache would have. For one
# sequence of 32,768 tokens, Llama 3.1 8B keeps 4 GiB of K and V in FP16, per sequence, on top of its
# weights; without GQA it would be 16 GiB. As a general remark (nothing here measures it): at such
# sizes serving systems manage the cache as carefully as the weights, and reading the whole cache on
# every step, the growth with $T$ of 8.2, becomes a large part of what a decode step costs.
#
# ### 8.4 Timing on this CPU
#
# Now the clock. For prompts of $P = 16$, 64, 128 and 256 tokens we time three windows separately:
#
# * **prefill:** one call over the $P$ prompt tokens, building the cache;
# * **full recomputation:** consume $G = 16$ predetermined tokens, each step running the whole current prefix through the model without a cache;
# * **cached continuation:** consume the same 16 tokens one at a time, starting from an existing prefix cache (so prefill is not inside this window).
#
# Both continuation paths return logits after every token. Tokenization, sampling, queues and
# networking are outside all windows. Our full path is the naive one: it projects every prefix
# position to vocabulary logits and keeps the last (an optimized full path would project only the last
# position; we do not measure one). The dynamic `torch.cat` of the cached path allocates new tensors
# and copies the history on every step, and that cost is inside its window.
#
# Protocol: one thread, FP32, `eval()`, `inference_mode()`; 3 warm-up rounds and 15 measured rounds per
# path; in each round the order of the three paths is rotated (prefill–full–cached, full–cached–prefill,
# cached–prefill–full, …) so that no path always runs first; `time.perf_counter_ns`; we report the
# median (p50) and the 95th percentile (p95) of the measured rounds. `QUICK = True` keeps only 16 and 64
# tokens, 1 warm-up and 3 rounds. The measurement loop counts the warm-up runs of every path and
# records the order of every round, and asserts both.

# %% [markdown] lang="zh"
# 星号表示上下文长度超出了模型的位置嵌入表（GPT-2 有 1,024 个位置，我们的解码器有 512 个，Llama 2 有 4,096 个）：公式给出的仍是这样一份缓存应有的大小。对于一条 32,768 个 token 的序列，Llama 3.1 8B 在 FP16 下要为它保存 4 GiB 的 K/V，这还不算权重；如果不用 GQA，则要 16 GiB。顺带一提（这里并未实测）：到了这样的规模，推理服务系统管理缓存就要像管理权重一样精打细算；而每一步都要把整个缓存读一遍（也就是 8.2 中随 $T$ 的增长），这会成为解码一步的开销中很大的一部分。
#
# ### 8.4 在这台 CPU 上计时
#
# 现在开始计时。对长度 $P = 16$、64、128、256 的提示，我们分别测量三个窗口的耗时：
#
# * **预填充**：对 $P$ 个提示 token 调用一次模型，建立缓存；
# * **完整重算**：依次处理 $G = 16$ 个预先确定的 token，每一步都把当前的整个前缀送入模型，不用缓存；
# * **缓存续写**：从已有的前缀缓存出发，逐个处理同样的 16 个 token（因此预填充不在这个窗口内）。
#
# 两条续写路径在每个 token 之后都返回 logits。分词、采样、排队和网络传输都不在任何窗口之内。我们的完整路径是朴素的写法：把前缀每个位置都投影成词表 logits，再只取最后一个（优化过的完整路径只需投影最后一个位置，这里不测）。缓存路径每一步都用 `torch.cat` 动态拼接，要分配新张量并复制历史数据，这部分开销也算在它的窗口里。
#
# 测量规程：单线程、FP32、`eval()`、`inference_mode()`；每条路径预热 3 轮、正式测量 15 轮；每一轮都轮换三条路径的执行顺序（预填充→完整重算→缓存续写、完整重算→缓存续写→预填充、缓存续写→预填充→完整重算……），免得某条路径总是第一个运行；计时用 `time.perf_counter_ns`；报告正式测量轮次的中位数（p50）和第 95 百分位数（p95）。`QUICK = True` 时只测 16 和 64 个 token，预热 1 轮、测量 3 轮。测量循环会统计每条路径的预热次数，并记录每一轮的执行顺序，再用断言核对这两项。

# %%
PROMPTS = [16, 64] if QUICK else [16, 64, 128, 256]
WARMUPS, REPEATS = (1, 3) if QUICK else (3, 15)
CONTINUATION = 16
PATHS = ("prefill", "full", "cached")
gen = torch.Generator().manual_seed(SEED + 1)
TIMING_STREAM = torch.randint(0, cfg.vocab, (1, 256 + CONTINUATION), generator=gen)   # [1, 272]
assert TIMING_STREAM.shape[1] <= cfg.max_positions


# [en] The three windows; each returns what it fed to the model, so the work can be checked.
# [zh] 三个计时窗口；每个都返回它送入模型的位置数，以便核对工作量。
@torch.inference_mode()
def prefill(model, prompt):
    logits, cache = model(prompt)
    return cache, prompt.shape[1]


@torch.inference_mode()
def full_continuation(model, prompt, continuation):
    ids, fed, outputs = prompt, 0, []
    for step in range(continuation.shape[1]):
        ids = torch.cat((ids, continuation[:, step:step + 1]), dim=1)
        logits, _ = model(ids)                                   # [B, P + step + 1, vocab]
        outputs.append(logits[:, -1])
        fed += ids.shape[1]
    return torch.stack(outputs, dim=1), fed


@torch.inference_mode()
def cached_continuation(model, cache, continuation):
    fed, outputs = 0, []
    for step in range(continuation.shape[1]):
        logits, cache = model(continuation[:, step:step + 1], cache)   # [B, 1, vocab]
        outputs.append(logits[:, -1])
        fed += 1
    return torch.stack(outputs, dim=1), fed, cache

# %% [markdown] lang="en"
# Before timing anything, the two continuation paths must agree, and the work they do must match the
# formulas. After prefill, the full path feeds $P + j$ positions at step $j$, in total
# $\sum_{j=1}^{G} (P + j) = GP + G(G+1)/2$ positions per layer; the cached path feeds $G$. For
# $P = 256$, $G = 16$ that is 4,232 versus 16. The cell checks the formula against the positions the
# loops actually fed and against a forward pre-hook that counts what reached the model; a second hook
# on the vocabulary projection confirms that the full path projects every one of those positions. The
# ratio is not a latency prediction: matrix efficiency, memory traffic, dispatch and Python overhead
# differ between the paths.
#
# The payload of the cache, its logical size, is $M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$
# bytes, the per-token formula of 8.3 times the length $T$ and the batch $B$. With batch 1, final length 272, 2 layers, 4 K/V heads,
# head dimension 16 and 4-byte FP32, that is 278,528 bytes (272 KiB). The cell compares it with the
# sum of `numel() * element_size()` over the real cache. It counts neither the parameters, the
# attention scores, the temporary tensors of `torch.cat`, allocator overhead nor Python objects, so it
# is not the peak memory of the process.

# %% [markdown] lang="zh"
# 计时之前，两条续写路径的结果必须一致，它们的工作量也必须与公式相符。预填充之后，完整路径在第 $j$ 步送入 $P + j$ 个位置，每层合计 $\sum_{j=1}^{G} (P + j) = GP + G(G+1)/2$ 个位置；缓存路径只送入 $G$ 个。当 $P = 256$、$G = 16$ 时，两者分别是 4,232 和 16。下面的单元格把公式与两个来源核对：循环实际送入的位置数，以及一个前向预钩子（forward pre-hook）统计到的、真正到达模型的位置数；词表投影上的第二个钩子则确认，完整路径把这些位置全部投影成了 logits。这个比值并不能预测延迟：两条路径在矩阵运算效率、访存、调度和 Python 开销上都不一样。
#
# 缓存的数据量（即它的逻辑大小）为 $M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$ 字节，也就是 8.3 中每个 token 的公式再乘以长度 $T$ 和 batch 大小 $B$。取 batch 为 1、最终长度 272、2 层、4 个 K/V 头、每头 16 维、FP32 每元素 4 字节，合计 278,528 字节（272 KiB）。下面的单元格会把它与真实缓存上 `numel() * element_size()` 的总和比较。这个数不包括参数、注意力分数、`torch.cat` 产生的临时张量、内存分配器的额外开销和 Python 对象，因此并不是进程的峰值内存。

# %%
def projected_positions(prompt_len: int, generated: int) -> dict:
    return {"full": generated * prompt_len + generated * (generated + 1) // 2, "cached": generated}


fed_to_model, projected = [], []
counter = model.register_forward_pre_hook(lambda module, args: fed_to_model.append(args[0].shape[1]))
head_counter = model.lm_head.register_forward_pre_hook(lambda module, args: projected.append(args[0].shape[1]))
try:
    P = 256
    prompt, continuation = TIMING_STREAM[:, :P], TIMING_STREAM[:, P:P + CONTINUATION]
    ref_cache, _ = prefill(model, prompt)
    fed_to_model.clear()
    projected.clear()
    full_out, full_fed = full_continuation(model, prompt, continuation)
    full_hooked, full_projected = sum(fed_to_model), sum(projected)
    fed_to_model.clear()
    cached_out, cached_fed, ref_final_cache = cached_continuation(model, ref_cache, continuation)
    cached_hooked = sum(fed_to_model)
finally:
    counter.remove()
    head_counter.remove()

# [en] Logits after every token, the same on both paths, step by step.
# [zh] 每个 token 之后都有 logits，两条路径逐步相同。
assert tuple(full_out.shape) == tuple(cached_out.shape) == (1, CONTINUATION, cfg.vocab)
torch.testing.assert_close(cached_out, full_out, atol=1e-5, rtol=1e-5)
assert projected_positions(256, 16) == {"full": 4_232, "cached": 16}
assert (full_fed, cached_fed) == (full_hooked, cached_hooked) == (4_232, 16)
# [en] The naive full path projects every position it feeds.
# [zh] 朴素的完整路径会把送入的每个位置都投影成 logits。
assert full_projected == full_hooked
assert kv_payload_bytes(1, 272, cfg, 4) == cache_bytes(ref_final_cache) == 278_528
say(en=f"P = 256, G = 16: the full path fed {full_fed:,} positions, the cached path {cached_fed}; K/V payload at batch 1, "
       f"T = 272, fp32: {cache_bytes(ref_final_cache):,} bytes = {cache_bytes(ref_final_cache) // 1024} KiB; "
       f"max |cached - full| over the 16 steps: {(cached_out - full_out).abs().max().item():.3e}.",
    zh=f"P = 256、G = 16：完整路径送入 {full_fed:,} 个位置，缓存路径送入 {cached_fed} 个；batch 1、T = 272、FP32 时 "
       f"K/V 的数据量为 {cache_bytes(ref_final_cache):,} 字节，即 {cache_bytes(ref_final_cache) // 1024} KiB；"
       f"16 步中缓存路径与完整路径的最大绝对差为 {(cached_out - full_out).abs().max().item():.3e}。")

# %% [markdown] lang="en"
# The measurement loop. Only `perf_counter_ns` readings around each path are kept; every round
# rotates the order of the three paths.

# %% [markdown] lang="zh"
# 测量循环。只保留每条路径前后两次 `perf_counter_ns` 读数；每一轮都轮换三条路径的顺序。

# %%
def percentile_summary(samples_ns: list[int]) -> dict:
    ms = np.array(samples_ns) / 1e6
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "samples": [round(float(x), 6) for x in ms]}


def time_prompt(model, prompt_len: int) -> dict:
    prompt = TIMING_STREAM[:, :prompt_len]
    continuation = TIMING_STREAM[:, prompt_len:prompt_len + CONTINUATION]
    # [en] The cached path starts from this prefix cache, built outside its window.
    # [zh] 缓存路径从这份前缀缓存出发，它在计时窗口之外建好。
    prefix_cache, _ = prefill(model, prompt)
    runs = {
        "prefill": lambda: prefill(model, prompt),
        "full": lambda: full_continuation(model, prompt, continuation),
        "cached": lambda: cached_continuation(model, prefix_cache, continuation),
    }
    samples = {path: [] for path in PATHS}
    calls, orders = dict.fromkeys(PATHS, 0), []
    for round_index in range(WARMUPS + REPEATS):
        # [en] Rotate the order of the paths every round.
        # [zh] 每一轮都轮换各路径的顺序。
        shift = round_index % len(PATHS)
        orders.append(PATHS[shift:] + PATHS[:shift])
        for path in orders[-1]:
            start = time.perf_counter_ns()
            runs[path]()
            elapsed = time.perf_counter_ns() - start
            calls[path] += 1
            if round_index >= WARMUPS:
                samples[path].append(elapsed)
    # [en] Every warm-up ran; consecutive rounds never share an order; no path always runs first.
    # [zh] 每轮预热都执行了；相邻两轮的顺序从不相同；没有哪条路径总是第一个运行。
    assert {path: calls[path] - len(samples[path]) for path in PATHS} == dict.fromkeys(PATHS, WARMUPS)
    assert orders[:3] == [("prefill", "full", "cached"), ("full", "cached", "prefill"), ("cached", "prefill", "full")]
    assert all(a != b for a, b in zip(orders, orders[1:]))
    assert {order[0] for order in orders[WARMUPS:]} == set(PATHS)
    # [en] Untimed: the final cache, for its payload.
    # [zh] 不计时：取最终的缓存，核对它的数据量。
    _, _, final_cache = cached_continuation(model, prefix_cache, continuation)
    assert cache_bytes(final_cache) == kv_payload_bytes(1, prompt_len + CONTINUATION, cfg, 4)
    return {
        "prompt_tokens": prompt_len,
        "prefill_ms": percentile_summary(samples["prefill"]),
        "full_ms": percentile_summary(samples["full"]),
        "cached_ms": percentile_summary(samples["cached"]),
        "kv_bytes": cache_bytes(final_cache),
        "projected_positions": projected_positions(prompt_len, CONTINUATION),
    }


TIMING_ROWS = [time_prompt(model, p) for p in PROMPTS]
assert all(len(r[f"{path}_ms"]["samples"]) == REPEATS for r in TIMING_ROWS for path in PATHS)


def p50_p95(ms: dict) -> str:
    return f"{ms['p50']:.3f} / {ms['p95']:.3f}"


say_table(
    [[str(r["prompt_tokens"]), p50_p95(r["prefill_ms"]), p50_p95(r["full_ms"]), p50_p95(r["cached_ms"]),
      str(r["kv_bytes"] // 1024), f"{r['projected_positions']['full']:,} / {r['projected_positions']['cached']}"]
     for r in TIMING_ROWS],
    en=["prompt P", "prefill, ms p50 / p95", "full recomputation, 16 steps, ms p50 / p95",
        "cached continuation, 16 steps, ms p50 / p95", "final K/V KiB", "positions fed, full / cached"],
    zh=["提示长度 P", "预填充（毫秒，p50 / p95）", "完整重算 16 步（毫秒，p50 / p95）",
        "缓存续写 16 步（毫秒，p50 / p95）", "最终 K/V（KiB）", "送入的位置数（完整重算 / 缓存续写）"],
)

# %% [markdown] lang="en"
# ### 8.5 The count next to the clock
#
# To compare paths with different numbers of calls, the figure divides: the two continuation windows
# by their 16 steps (milliseconds per step), the prefill by its $P$ tokens (milliseconds per prompt
# token). Markers are p50, and a vertical line spans the range from p50 to p95. The left panel shows
# these times; the right panel shows how each continuation path grows with $P$ relative to the shortest
# prompt, measured (solid) and predicted by the multiply-add count of 8.1 averaged over the 16 steps of
# the window (dashed). In both panels only the vertical axis is logarithmic; the prompt-length axis is
# linear. The cell also checks the window average of the count against `FlopCounterMode` over one
# whole window of each path at the shortest prompt.

# %% [markdown] lang="zh"
# ### 8.5 把乘加次数与实测时间放在一起
#
# 为了比较调用次数不同的路径，图中做了换算：两个续写窗口的时间除以 16 步（得到每步毫秒数），预填充的时间除以 $P$ 个提示 token（得到每个提示 token 的毫秒数）。标记点是 p50，竖线表示从 p50 到 p95 的范围。左图画的是这些时间；右图画的是两条续写路径的每步开销相对最短提示随 $P$ 增长了多少倍：实线是测量值，虚线是预测值，即 8.1 的乘加次数在窗口 16 步上的平均。两幅图都只有纵轴是对数刻度，提示长度轴是线性的。这个单元格还会在最短提示下，用 `FlopCounterMode` 对每条路径完整地数一遍窗口内的乘加次数，与按公式求得的平均值核对。

# %%
def window_macs(prompt_len: int, path: str) -> float:
    step = full_step_macs if path == "full" else cached_step_macs
    return sum(sum(step(cfg, prompt_len + j).values()) for j in range(1, CONTINUATION + 1)) / CONTINUATION


def per_step_ms(row: dict, path: str) -> dict:
    divisor = row["prompt_tokens"] if path == "prefill" else CONTINUATION
    return {q: row[f"{path}_ms"][q] / divisor for q in ("p50", "p95")}


p_min = PROMPTS[0]
prompt, continuation = TIMING_STREAM[:, :p_min], TIMING_STREAM[:, p_min:p_min + CONTINUATION]
min_cache, _ = prefill(model, prompt)
assert counted_macs(lambda: cached_continuation(model, min_cache, continuation))["total"] == CONTINUATION * window_macs(p_min, "cached")
assert counted_macs(lambda: full_continuation(model, prompt, continuation))["total"] == CONTINUATION * window_macs(p_min, "full")

PER_STEP = [{
    "prompt_tokens": r["prompt_tokens"],
    "prefill_ms_per_token": per_step_ms(r, "prefill"),
    "full_ms_per_step": per_step_ms(r, "full"),
    "cached_ms_per_step": per_step_ms(r, "cached"),
    "model_full_macs_per_step": window_macs(r["prompt_tokens"], "full"),
    "model_cached_macs_per_step": window_macs(r["prompt_tokens"], "cached"),
} for r in TIMING_ROWS]

from matplotlib.ticker import NullFormatter, ScalarFormatter

fig, (ax_time, ax_growth) = plt.subplots(1, 2, figsize=(11, 4))
lengths = [r["prompt_tokens"] for r in PER_STEP]
COLORS = {"prefill": "tab:blue", "full": "tab:orange", "cached": "tab:green"}
series = {"prefill": ("prefill_ms_per_token", "prefill, per prompt token", "s"),
          "full": ("full_ms_per_step", "full recomputation, per step", "o"),
          "cached": ("cached_ms_per_step", "cached continuation, per step", "^")}
for path, (key, label, marker) in series.items():
    p50 = np.array([r[key]["p50"] for r in PER_STEP])
    p95 = np.array([r[key]["p95"] for r in PER_STEP])
    ax_time.plot(lengths, p50, marker=marker, color=COLORS[path], label=label)
    ax_time.vlines(lengths, p50, p95, color=COLORS[path], alpha=0.6)
ax_time.set_xlabel("prompt length P (tokens)")
ax_time.set_ylabel("ms (marker p50, line up to p95)")
ax_time.set_title(f"time per step or per token, {REPEATS} rounds", fontsize=10)
for path, marker in (("full", "o"), ("cached", "^")):
    measured = np.array([r[f"{path}_ms_per_step"]["p50"] for r in PER_STEP])
    modeled = np.array([r[f"model_{path}_macs_per_step"] for r in PER_STEP])
    ax_growth.plot(lengths, measured / measured[0], marker=marker, color=COLORS[path], label=f"{path}: measured time")
    ax_growth.plot(lengths, modeled / modeled[0], linestyle="--", color=COLORS[path], label=f"{path}: multiply-adds")
ax_growth.set_xlabel("prompt length P (tokens)")
ax_growth.set_ylabel(f"per step, relative to P = {lengths[0]}")
ax_growth.set_title("measured time vs counted multiply-adds", fontsize=10)
for ax in (ax_time, ax_growth):
    ax.set_xticks(lengths)
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
ax_growth.yaxis.set_major_formatter(ScalarFormatter())
ax_growth.yaxis.set_minor_formatter(NullFormatter())
assert ax_time.get_xscale() == ax_growth.get_xscale() == "linear" and ax_time.get_yscale() == ax_growth.get_yscale() == "log"
fig.suptitle("CPU, 1 thread, fp32", fontsize=10)
fig.tight_layout()
TIMING_PNG = OUT / "timing.png"
fig.savefig(TIMING_PNG, dpi=120)
plt.show()

say_table(
    [[str(r["prompt_tokens"]), f"{r['model_full_macs_per_step']:,.0f}", f"{r['full_ms_per_step']['p50']:.3f}",
      f"{r['model_cached_macs_per_step']:,.0f}", f"{r['cached_ms_per_step']['p50']:.3f}",
      f"{r['prefill_ms_per_token']['p50']:.4f}"] for r in PER_STEP],
    en=["prompt P", "full: multiply-adds per step", "full: ms per step (p50)", "cached: multiply-adds per step",
        "cached: ms per step (p50)", "prefill: ms per prompt token (p50)"],
    zh=["提示长度 P", "完整重算：每步乘加次数", "完整重算：每步耗时（毫秒，p50）", "缓存续写：每步乘加次数",
        "缓存续写：每步耗时（毫秒，p50）", "预填充：每个提示 token 的耗时（毫秒，p50）"],
)

# %% [markdown] lang="en"
# Three numbers summarize what the figure shows; the next cell computes them and hands them to the
# text below.
#
# * **Growth.** From the shortest to the longest prompt, the count predicts each path's per-step work to
#   grow by some factor; the clock shows by what factor its time changed.
# * **Calls versus tokens.** At $P = 16$, compare one prefill call over 16 tokens with the cached
#   continuation, 16 calls of one token each. Both push 16 positions through the network, and the
#   continuation even does slightly more multiply-adds ({{run:cost.cached16_extra_macs:.1%}} more: its
#   queries read more keys).
# * **How much of a cached step is arithmetic.** The prefill at the longest prompt shows how many
#   multiply-adds per millisecond this CPU sustains inside one large call. At that rate, the
#   multiply-adds of one cached step would take some time; the text below puts it next to the time the
#   step took. Matrix products with a single row run less efficiently than large ones, so this is a
#   rough estimate, not a decomposition.

# %% [markdown] lang="zh"
# 图中的信息可以归结为三组数字；下一个单元格把它们算出来，交给后面的正文引用。
#
# * **增长倍数**：从最短提示到最长提示，乘加计数预测每条路径每步的工作量会增长若干倍；计时则给出它的时间实际变化了多少倍。
# * **调用次数与 token 数**：在 $P = 16$ 时，比较一次处理 16 个 token 的预填充，与分 16 次调用、每次只处理一个 token 的缓存续写。两者都让 16 个位置经过网络，续写的乘加次数甚至还略多一些（多 {{run:cost.cached16_extra_macs:.1%}}，因为它的查询要读更多的键）。
# * **缓存路径一步中有多少是计算**：最长提示下的预填充反映了这台 CPU 在一次大调用中每毫秒能完成多少次乘加。按这个速度可以算出缓存路径一步的乘加需要多少时间；后面的正文把它与这一步的实测耗时放在一起比较。只有一行的矩阵乘法效率不如大矩阵乘法，所以这只是粗略的估计，而不是精确的分解。

# %% tags=["prose-values"]
first, last = PER_STEP[0], PER_STEP[-1]
row16 = next(r for r in TIMING_ROWS if r["prompt_tokens"] == 16)
# [en] The 16 cached one-token calls after a 16-token prompt do slightly more multiply-adds (under 5%
# [en] more) than one 16-token prefill call: their queries read more keys.
# [zh] 16 个提示 token 之后的 16 次单 token 缓存调用，乘加次数比一次 16 个 token 的预填充略多
# [zh] （不到 5%）：它们的查询要读更多的键。
cached16_extra_macs = CONTINUATION * window_macs(16, "cached") / sum(full_step_macs(cfg, 16).values()) - 1
assert 0 < cached16_extra_macs < 0.05
prefill_rate = sum(full_step_macs(cfg, last["prompt_tokens"]).values()) / TIMING_ROWS[-1]["prefill_ms"]["p50"]
TIMING_SUMMARY = {
    "p_min": int(first["prompt_tokens"]),
    "p_max": int(last["prompt_tokens"]),
    "full_ms_per_step_min": float(first["full_ms_per_step"]["p50"]),
    "full_ms_per_step_max": float(last["full_ms_per_step"]["p50"]),
    "cached_ms_per_step_min": float(first["cached_ms_per_step"]["p50"]),
    "cached_ms_per_step_max": float(last["cached_ms_per_step"]["p50"]),
    "model_full_growth": float(last["model_full_macs_per_step"] / first["model_full_macs_per_step"]),
    "measured_full_growth": float(last["full_ms_per_step"]["p50"] / first["full_ms_per_step"]["p50"]),
    "model_cached_growth": float(last["model_cached_macs_per_step"] / first["model_cached_macs_per_step"]),
    "measured_cached_growth": float(last["cached_ms_per_step"]["p50"] / first["cached_ms_per_step"]["p50"]),
    "prefill16_ms": float(row16["prefill_ms"]["p50"]),
    "cached16_ms": float(row16["cached_ms"]["p50"]),
    "cached16_over_prefill16": float(row16["cached_ms"]["p50"] / row16["prefill_ms"]["p50"]),
    "prefill_macs_per_ms": float(prefill_rate),
    "cached_step_arithmetic_ms": float(last["model_cached_macs_per_step"] / prefill_rate),
    "cached_step_arithmetic_share": float(last["model_cached_macs_per_step"] / prefill_rate / last["cached_ms_per_step"]["p50"]),
}
{"timing": TIMING_SUMMARY, "cost": {"cached16_extra_macs": float(cached16_extra_macs)}}

# %% [markdown] lang="en"
# **What this run says.** From $P = {{run:timing.p_min}}$ to $P = {{run:timing.p_max}}$, the count predicts
# the full path's work per step to grow {{run:timing.model_full_growth:.1f}}-fold; its measured time per
# step changed by a factor of {{run:timing.measured_full_growth:.1f}}, from {{run:timing.full_ms_per_step_min:.3f}} to
# {{run:timing.full_ms_per_step_max:.3f}} ms. For the cached step the count predicts growth by a factor of
# {{run:timing.model_cached_growth:.2f}}, the attention term of 8.2; the measured time per step changed
# by a factor of {{run:timing.measured_cached_growth:.2f}} ({{run:timing.cached_ms_per_step_min:.3f}} ms,
# then {{run:timing.cached_ms_per_step_max:.3f}} ms). The measured factors move from run to run, and
# nothing here asserts them. On this run, 16 cached one-token calls took
# {{run:timing.cached16_ms:.3f}} ms, {{run:timing.cached16_over_prefill16:.1f}} times the
# {{run:timing.prefill16_ms:.3f}} ms of one 16-token prefill call, although both push 16 positions
# through the network and the count differs by only {{run:cost.cached16_extra_macs:.1%}}: whatever
# separates these two times is not arithmetic but what every call pays regardless of its size (Python,
# operator dispatch, small allocations, the copy in `torch.cat`), paid 16 times by the continuation and
# once by the prefill. At the rate the largest prefill sustained, a cached step's multiply-adds would
# take about {{run:timing.cached_step_arithmetic_ms:.4f}} ms, roughly
# {{run:timing.cached_step_arithmetic_share:.0%}} of the measured step. Where that share is small,
# per-call overhead rather than the $TW$ term sets the time of a cached step, and the measured growth
# need not follow the count. With a real model's width and context (8.3), the arithmetic and the
# reading of K/V grow large enough to matter; that is a general remark, not something this CPU run
# measures.
#
# How to read the times. A p95 over 15 samples (3 with `QUICK = True`) is an empirical quantile, good
# for spotting noise but far too few samples to estimate a service's tail latency. What these numbers
# **do not** establish: speed-ups on a GPU, the latency of a serving system, client-side time to first
# token (TTFT) or inter-token latency (ITL), or how vLLM, SGLang or any production kernel, cache layout
# or scheduler would perform. Those need measurements on their own hardware and workloads.

# %% [markdown] lang="zh"
# **这次运行说明了什么**：从 $P = {{run:timing.p_min}}$ 到 $P = {{run:timing.p_max}}$，乘加计数预测完整路径每步的工作量增长到原来的 {{run:timing.model_full_growth:.1f}} 倍；实测每步时间的变化倍数是 {{run:timing.measured_full_growth:.1f}}，从 {{run:timing.full_ms_per_step_min:.3f}} 毫秒变为 {{run:timing.full_ms_per_step_max:.3f}} 毫秒。对缓存路径的一步，计数预测的增长倍数是 {{run:timing.model_cached_growth:.2f}}，来自 8.2 中的注意力项；实测每步时间的变化倍数则是 {{run:timing.measured_cached_growth:.2f}}（先是 {{run:timing.cached_ms_per_step_min:.3f}} 毫秒，后是 {{run:timing.cached_ms_per_step_max:.3f}} 毫秒）。实测的倍数每次运行都会有所不同，这里也不对它们做任何断言。在这次运行中，16 次单 token 的缓存调用共用了 {{run:timing.cached16_ms:.3f}} 毫秒，是一次 16 个 token 的预填充调用（{{run:timing.prefill16_ms:.3f}} 毫秒）的 {{run:timing.cached16_over_prefill16:.1f}} 倍，尽管两者都让 16 个位置经过了网络，乘加次数也只差 {{run:cost.cached16_extra_macs:.1%}}：这两个时间之间的差别不来自计算，而来自每次调用不论大小都要付出的固定开销（Python、算子调度、零碎的内存分配，以及 `torch.cat` 中的复制），缓存续写要付 16 次，预填充只付一次。按最长提示下预填充达到的速度，缓存路径一步的乘加大约需要 {{run:timing.cached_step_arithmetic_ms:.4f}} 毫秒，约占这次实测每步时间的 {{run:timing.cached_step_arithmetic_share:.0%}}。这个占比小的时候，决定缓存路径一步耗时的是每次调用的固定开销，而不是 $TW$ 项，实测的增长也就未必与计数一致。换成真实模型的宽度和上下文长度（见 8.3），计算量和对 K/V 的读取就会大到不容忽视；这是一般性的说明，并不是这次 CPU 运行测出来的。
#
# 如何解读这些时间：15 个样本（`QUICK = True` 时只有 3 个）的 p95 只是经验分位数，可以用来发现噪声，但样本远远不够，无法估计一个服务的尾延迟。这些数字**不能**说明：GPU 上的加速效果、推理服务系统的延迟、客户端的首 token 延迟（TTFT）或 token 间延迟（ITL），也不能说明 vLLM、SGLang 或任何生产级的算子、缓存布局或调度器的表现。这些都需要在各自的硬件和负载上实际测量。
