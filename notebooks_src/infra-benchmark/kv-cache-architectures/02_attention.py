# %% [markdown] lang="en"
# **Attention, computed from positions.** Four small functions serve every attention layer. `split_heads`
# and `merge_heads` reshape between `[B, T, heads * D]` and `[B, heads, T, D]`. `causal` is the offset mask
# written with positions: every cached key carries its absolute position, and query $i$ may read key $j$
# when $p^k_j \le p^q_i$. For keys at positions $0 \dots P + C - 1$ this is exactly the first notebook's
# `causal_mask(P, C)`, the lower triangle moved $P$ keys to the right (`tril(diagonal=P)`), and because it
# looks at positions rather than at indices, it stays right for a cache
# that keeps only some positions, or keeps them out of order. `softmax_attention` expands the $H_{kv}$ K/V
# heads to the $H$ query heads with `repeat_kv`, then computes attention explicitly: a score matrix, the
# mask, a softmax and a second product. `repeat_kv` is Hugging Face's rule (`repeat_kv` in
# `modeling_llama.py`, documented as `repeat_interleave`): for $H = 4$ and $H_{kv} = 2$ the query heads read
# K/V heads 0, 0, 1, 1.
#
# This is reference code, written to be read. `repeat_interleave` copies every K/V head $g$ times at every
# step, so attention ends up reading $H$ heads' worth of keys and values: attention's reads lose GQA's
# saving, though the cache still stores only $H_{kv}$ heads, $1/g$ of MHA's. A fused kernel written for GQA need make no copy: query head $h$ indexes K/V head
# $\lfloor h / g \rfloor$. PyTorch's SDPA takes `enable_gqa=True` for this; its documented meaning is
# `repeat_interleave`, and whether a backend copies internally is not measured here.

# %% [markdown] lang="zh"
# **由位置计算注意力。** 每个注意力层都要用到下面四个小函数。`split_heads` 和 `merge_heads` 在 `[B, T, heads * D]` 与 `[B, heads, T, D]` 之间变换形状。`causal` 是用位置写成的带偏移的掩码：缓存中的每个键都带着自己的绝对位置，当 $p^k_j \le p^q_i$ 时，查询 $i$ 可以读取键 $j$。如果键恰好位于位置 $0 \dots P + C - 1$，它就是第一份笔记本的 `causal_mask(P, C)`，即向右移动 $P$ 个键的下三角（`tril(diagonal=P)`）；又因为它看的是位置而不是下标，所以即使缓存只保留一部分位置，或者不按顺序保存，它仍然正确。`softmax_attention` 先用 `repeat_kv` 把 $H_{kv}$ 个 K/V 头扩展成 $H$ 个，再显式地计算注意力：分数矩阵、掩码、softmax，以及第二次矩阵乘法。`repeat_kv` 沿用 Hugging Face 的规则（`modeling_llama.py` 中的 `repeat_kv`，其文档说明它等价于 `repeat_interleave`）：$H = 4$、$H_{kv} = 2$ 时，各查询头依次读取 K/V 头 0、0、1、1。
#
# 这是参照实现，写出来是为了便于阅读。`repeat_interleave` 在每一步都把每个 K/V 头复制 $g$ 份，于是注意力最终读取的仍是 $H$ 个头的键和值：注意力读取的数据量没有因 GQA 而减少，不过缓存中存储的仍只有 $H_{kv}$ 个头，是 MHA 的 $1/g$。为 GQA 编写的融合内核可以不做这种复制，查询头 $h$ 直接按下标读取第 $\lfloor h / g \rfloor$ 个 K/V 头。PyTorch 的 SDPA 为此提供 `enable_gqa=True`；文档给出的语义等价于 `repeat_interleave`，至于某个后端内部是否复制，这里没有测量。

# %%
def split_heads(x, heads: int):                  # [B, T, heads * D] -> [B, heads, T, D]
    batch, length, _ = x.shape
    return x.view(batch, length, heads, -1).transpose(1, 2)


def merge_heads(x):                              # [B, heads, T, D] -> [B, T, heads * D]
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


def causal(query_pos, key_pos):
    # bool [..., T_new, T_keys]: allowed[i, j] = key_pos[j] <= query_pos[i]
    return key_pos[..., None, :] <= query_pos[:, None]


def repeat_kv(x, groups: int):                   # [B, H_kv, T, D] -> [B, H_kv * groups, T, D]
    # [en] Query head h reads K/V head h // groups.
    # [zh] 查询头 h 读取第 h // groups 个 K/V 头。
    return x.repeat_interleave(groups, dim=1)


def softmax_attention(q, keys, values, allowed):
    groups = q.shape[1] // keys.shape[1]
    keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)              # [B, H, T_keys, D]
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])                   # [B, H, T_new, T_keys]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ values    # [B, H, T_new, Dv]


# [en] 10 cached positions and a chunk of 3: the position rule gives the offset mask, the lower triangle moved 10 keys right.
# [zh] 缓存 10 个位置、新分块 3 个 token：由位置得到的规则就是带偏移的掩码，即向右移动 10 个键的下三角。
assert torch.equal(causal(10 + torch.arange(3), torch.arange(13)), torch.ones(3, 13, dtype=torch.bool).tril(diagonal=10))
