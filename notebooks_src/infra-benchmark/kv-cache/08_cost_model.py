# %% [markdown] lang="en"
# ## 8. What caching removes, and what remains
#
# Equivalence holds, so we may now ask what the cache saves. We first count the work of one step from
# the configuration alone and check the count against the matrix products that actually run. The count
# answers three questions learners often ask. We then scale the cache to published models. Section 9
# measures time on this CPU and puts the measurements next to the count.
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
# 等价性已经成立，现在可以问缓存到底省了什么。我们先只根据配置算出一步的工作量，再与实际执行的矩阵乘法核对；这个计数也回答了学习者常问的三个问题。然后把缓存大小的计算推广到公开模型上。第 9 节再在这台 CPU 上计时，并把测量结果与计数放在一起比较。
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
# predicts: the bytes of K and V a cached step reads. One token's K and V over all layers take
# `kv_bytes_per_token` bytes, $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ for $s$ bytes per element (the
# formula of the helpers in section 1); a step at length $T$ and batch $B$ reads $B \cdot T$ times that.
# A forward hook on every attention module catches the K and V that the step really multiplied. A step
# reads the **whole** cache, every step. Our `torch.cat` adds a copy on top: the hook also confirms that
# each step's K lives in new memory, so the step reads the old $T - 1$ rows once more to copy them.
# Three cells: the hook's plumbing (folded), the measurement at the four lengths, then the table and
# its assertions.

# %% [markdown] lang="zh"
# 下面的单元格在 $T = 16$、64、128、256 时，对两条路径分别比较公式与实测计数（缓存路径的一步带着 $T - 1$ 个位置的缓存）。顺便再测一个公式能预测的量：缓存路径每一步读取的 K/V 字节数。一个 token 在所有层上的 K/V 占 `kv_bytes_per_token` 字节，即 $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$，其中 $s$ 是每个元素的字节数（第 1 节辅助工具中的公式）；长度为 $T$、batch 大小为 $B$ 时，一步读取的字节数是它的 $B \cdot T$ 倍。每个注意力模块上都挂了一个前向钩子，截下这一步真正参与乘法的 K 和 V。每一步都要把**整个**缓存读一遍，而我们的 `torch.cat` 还额外多了一次复制：钩子同时确认了每一步的 K 都位于新分配的内存中，也就是说，这一步为了复制，又把旧的 $T - 1$ 行读了一遍。下面分三个单元格：钩子的辅助代码（已折叠）、在四个长度上的测量，以及表格和断言。

# %% tags=["hide-input"]
COST_LENGTHS = (16, 64, 128, 256)
gen = torch.Generator().manual_seed(SEED + 2)
COST_STREAM = torch.randint(0, cfg.vocab, (1, max(COST_LENGTHS)), generator=gen)
FP32_BYTES = 4


def cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for pair in cache for t in pair)


# [en] The K and V each attention module multiplied, and whether its K is a new tensor (not the cache's).
# [zh] 每个注意力模块实际参与乘法的 K 和 V，以及它的 K 是否是新张量（而不是缓存里的那个）。
caught_bytes, caught_fresh = [], []


def catch_kv(module, args, output):
    # [en] Attention.forward(x, allowed, past) returns (attended, (k, v)): k, v are what it multiplied.
    # [zh] Attention.forward(x, allowed, past) 返回 (attended, (k, v))：k、v 就是它实际参与乘法的张量。
    x, allowed, (past_k, past_v) = args
    attended, (k, v) = output
    caught_bytes.append(k.numel() * k.element_size() + v.numel() * v.element_size())
    caught_fresh.append(k.data_ptr() != past_k.data_ptr())

# %%
COST_ROWS = []
for T in COST_LENGTHS:
    ids = COST_STREAM[:, :T]
    with torch.inference_mode():
        # [en] The cache holds T - 1 positions.
        # [zh] 缓存中有 T - 1 个位置。
        _, past = model(ids[:, :-1])
    caught_bytes.clear()
    caught_fresh.clear()
    hooks = [block.attn.register_forward_hook(catch_kv) for block in model.blocks]
    try:
        cached = counted_macs(lambda: model(ids[:, -1:], past))
    finally:
        for hook in hooks:
            hook.remove()
    COST_ROWS.append({"T": T, "full": counted_macs(lambda: model(ids)), "cached": cached,
                      "kv_read_bytes": sum(caught_bytes), "fresh_storage": all(caught_fresh)})

# %%
say_table(
    [[str(r["T"]), f"{r['full']['total']:,}", f"{r['cached']['total']:,}", f"{r['full']['total'] / r['cached']['total']:g}",
      f"{r['cached']['attention'] / r['cached']['total']:.0%}", f"{r['kv_read_bytes']:,}"] for r in COST_ROWS],
    en=["$T$", "full step, multiply-adds", "cached step, multiply-adds", "full / cached",
        "attention share of the cached step", "K/V bytes read by the cached step (fp32)"],
    zh=["$T$", "完整重算一步的乘加次数", "缓存路径一步的乘加次数", "完整 / 缓存",
        "缓存路径一步中注意力的占比", "缓存路径一步读取的 K/V 字节数（FP32）"],
)
# [en] Formula = count, part by part, for both paths; the K/V caught = T * kv_bytes_per_token, in new memory.
# [zh] 两条路径的公式与实测计数逐项相等；截下的 K/V = T * kv_bytes_per_token，且位于新分配的内存中。
assert all(r["full"] == with_total(full_step_macs(cfg, r["T"])) and r["cached"] == with_total(cached_step_macs(cfg, r["T"]))
           and r["kv_read_bytes"] == r["T"] * kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, FP32_BYTES)
           and r["fresh_storage"] for r in COST_ROWS)

# %% [markdown] lang="en"
# At $T = 256$ a full step costs {{run:count.full_256:,}} multiply-adds and a cached step
# {{run:count.cached_256:,}}: exactly $T = 256$ times fewer, at every length of the table. Every term of
# the formula is proportional to $N$, the number of positions that pass through the network, and the
# full path has $N = T$ where the cached path has $N = 1$.
#
# That "exactly" depends on how naive our full path is, in two places. Its score matrix is dense: the
# masked half, the scores of keys in each query's future, is computed and then thrown away. And it
# projects every position to the vocabulary, although only the last position's logits choose the next
# token. A full step that computed only the allowed scores ($T(T+1)/2$ per head instead of $T^2$) and
# projected only the last position would cost {{run:count.lean_full_256:,}} multiply-adds at $T = 256$,
# {{run:count.lean_ratio_256:.0f}} times a cached step rather than 256. The cache still saves two orders
# of magnitude of arithmetic; the exact factor $T$ is a property of the naive baseline. Either way, the
# cached step still reads {{run:count.kv_read_256:,}} bytes of K and V, the whole cache.

# %% [markdown] lang="zh"
# 当 $T = 256$ 时，完整重算的一步要做 {{run:count.full_256:,}} 次乘加，缓存路径的一步只要 {{run:count.cached_256:,}} 次，正好是前者的 $1/T$，即 1/256；表中每个长度都是如此。公式中的每一项都与 $N$ 成正比，$N$ 是经过网络的位置数：完整路径的 $N = T$，缓存路径的 $N = 1$。
#
# 之所以“正好”，是因为我们的完整路径写得很朴素，体现在两处。其一，它的分数矩阵是稠密的：被掩码遮住的那一半（每个查询对其未来位置上的键的分数）也照样算出来，然后丢掉。其二，它把每个位置都投影到词表上，而决定下一个 token 的只有最后一个位置的 logits。如果完整重算的一步只计算允许读取的分数（每个头 $T(T+1)/2$ 个，而不是 $T^2$ 个），并且只投影最后一个位置，那么在 $T = 256$ 时只需 {{run:count.lean_full_256:,}} 次乘加，是缓存路径一步的 {{run:count.lean_ratio_256:.0f}} 倍，而不是 256 倍。缓存省下的计算量仍有两个数量级；“正好 $T$ 倍”只是朴素基线的性质。无论哪种情形，缓存路径的一步仍要读取 {{run:count.kv_read_256:,}} 字节的 K/V，也就是整个缓存。

# %% tags=["prose-values"]
# [en] A full step without the masked scores and with one vocabulary projection (formula only).
# [zh] 不算被遮住的分数、只做一次词表投影的完整重算一步（只用公式计算）。
def lean_full_step_macs(c: DecoderConfig, total_len: int) -> int:
    per_layer = 4 * total_len * c.width**2 + total_len * (total_len + 1) * c.width + 2 * total_len * c.width * c.mlp
    return c.layers * per_layer + c.width * c.vocab


at_256 = next(r for r in COST_ROWS if r["T"] == 256)
{"count": {"full_256": at_256["full"]["total"], "cached_256": at_256["cached"]["total"],
           "lean_full_256": lean_full_step_macs(cfg, 256),
           "lean_ratio_256": lean_full_step_macs(cfg, 256) / at_256["cached"]["total"],
           "kv_read_256": at_256["kv_read_bytes"]}}
