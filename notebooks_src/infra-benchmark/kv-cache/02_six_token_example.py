# %% [markdown] lang="en"
# ## 2. A six-token example
#
# Take the token IDs `[12, 7, 31, 4, 9, 18]`. A first call (the **prefill**) has already consumed the
# first four, so the cache holds keys and values for absolute positions 0–3. The next call receives
# the last two IDs, 9 and 18, together; they sit at absolute positions 4 and 5.
#
# Before writing the real decoder, we walk through one attention layer of that second call with small
# random projections (width 64, 4 heads of 16 dimensions, a 97-token vocabulary, the sizes used later).
# Every shape and every position in the table below is read from a tensor the cell actually computed.
#
# One line of `toy_layer` runs ahead of the story: the mask. It lets a query at absolute position $p$
# read the keys at positions $0 \dots p$, counting positions from the start of the sequence rather
# than from the start of the call. This is the *offset* causal mask; section 3 derives it and shows the
# mistake it avoids. For now, read it as "no query sees its future".

# %% [markdown] lang="zh"
# ## 2. 六个 token 的例子
#
# 以 token ID 序列 `[12, 7, 31, 4, 9, 18]` 为例。第一次调用，即**预填充**（prefill），已经处理了前四个 token，因此缓存里存有绝对位置 0–3 的 K/V。下一次调用一次性送入剩下的两个 ID，即 9 和 18，它们的绝对位置是 4 和 5。
#
# 在写真正的解码器之前，我们先用一组小的随机投影，把第二次调用中的一层注意力走一遍。尺寸与后文一致：宽度 64，4 个头、每头 16 维，词表大小 97。下表中的每个形状和每个位置都读自这个单元格实际算出的张量。
#
# `toy_layer` 里有一行提前用到了后文的内容，那就是掩码：它让绝对位置为 $p$ 的查询读取位置 $0 \dots p$ 上的键；位置从序列的开头数起，而不是从本次调用的开头数起。这就是**带偏移的**因果掩码，第 3 节会推导它，并说明它避免了什么错误。这里只需把它理解为“任何查询都看不到自己的未来”。

# %%
IDS = [12, 7, 31, 4, 9, 18]
PAST_LEN, NEW_LEN = 4, 2
B, H, DH, WIDTH, VOCAB = 1, 4, 16, 64, 97

gen = torch.Generator().manual_seed(SEED)
# [en] A token embedding table, learned absolute positions (8 are enough here), three projections and
# [en] a vocabulary projection, all random.
# [zh] token 嵌入表、可学习的绝对位置嵌入（这里 8 个位置就够了）、三个投影和一个词表投影，全部随机生成。
toy = {
    "tok": torch.randn(VOCAB, WIDTH, generator=gen),
    "pos": torch.randn(8, WIDTH, generator=gen),
    "q": torch.randn(WIDTH, WIDTH, generator=gen) / WIDTH**0.5,
    "k": torch.randn(WIDTH, WIDTH, generator=gen) / WIDTH**0.5,
    "v": torch.randn(WIDTH, WIDTH, generator=gen) / WIDTH**0.5,
    "out": torch.randn(WIDTH, VOCAB, generator=gen) / WIDTH**0.5,
}


def split_heads(x):                                             # [B, T, WIDTH] -> [B, H, T, DH]
    return x.view(x.shape[0], x.shape[1], H, DH).transpose(1, 2)


# [en] One attention layer plus a vocabulary projection; returns every intermediate object.
# [zh] 一层注意力加一个词表投影；返回所有中间结果。
def toy_layer(ids, positions, past_k=None, past_v=None):
    x = toy["tok"][ids] + toy["pos"][positions]                 # [B, T, WIDTH]
    q, k_new, v_new = (split_heads(x @ toy[name]) for name in "qkv")
    k = k_new if past_k is None else torch.cat((past_k, k_new), dim=-2)
    v = v_new if past_v is None else torch.cat((past_v, v_new), dim=-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(DH)             # [B, H, T, T_total]
    key_pos = torch.arange(k.shape[-2])
    # [en] The offset causal mask (section 3): the query at absolute position p reads keys 0..p.
    # [zh] 带偏移的因果掩码（见第 3 节）：绝对位置为 p 的查询读取位置 0 到 p 的键。
    allowed = key_pos[None, :] <= positions[:, None]             # [T, T_total]
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    context = (weights @ v).transpose(1, 2).reshape(ids.shape[0], ids.shape[1], WIDTH)
    logits = context @ toy["out"]                                # [B, T, VOCAB]
    return {"q": q, "k": k, "v": v, "scores": scores, "weights": weights, "logits": logits}

# %% [markdown] lang="en"
# The prefill computes and keeps K and V for positions 0–3. The second call gets only IDs 9 and 18 at
# positions 4 and 5; its new keys and values are concatenated onto the cached ones. The table's first
# row gives the shape of the cached K; the cached V has the same shape.

# %% [markdown] lang="zh"
# 预填充算出并保留位置 0–3 的 K 和 V。第二次调用只收到 ID 9 和 18，它们位于位置 4 和 5；这次新算出的 K/V 拼接在缓存的 K/V 之后。表中第一行是缓存里 K 的形状，缓存里 V 的形状与之相同。

# %%
with torch.inference_mode():
    ids = torch.tensor([IDS])
    cached_positions = torch.arange(PAST_LEN)
    prefill = toy_layer(ids[:, :PAST_LEN], cached_positions)
    cache_k, cache_v = prefill["k"], prefill["v"]
    new_positions = PAST_LEN + torch.arange(NEW_LEN)
    step = toy_layer(ids[:, PAST_LEN:], new_positions, cache_k, cache_v)

# [en] The positions of the keys: the cached ones, then the new ones.
# [zh] 各个键的位置：先是缓存的位置，然后是新的位置。
key_positions = torch.cat((cached_positions, new_positions))
cached_txt, new_txt, keys_txt = (", ".join(map(str, p.tolist())) for p in (cached_positions, new_positions, key_positions))
say_table(
    [["`cache_k`", f"`{list(cache_k.shape)}`", cached_txt],
     ["`ids[:, PAST_LEN:]`", f"`{list(ids[:, PAST_LEN:].shape)}`", new_txt],
     ['`step["q"]`', f"`{list(step['q'].shape)}`", new_txt],
     ['`step["k"]`, `step["v"]`', f"`{list(step['k'].shape)}`", keys_txt],
     ['`step["scores"]`', f"`{list(step['scores'].shape)}`", f"[{new_txt}] × [{keys_txt}]"],
     ['`step["logits"]`', f"`{list(step['logits'].shape)}`", new_txt]],
    en=["tensor", "shape", "positions"], zh=["张量", "形状", "位置"],
)

# [en] The shapes the table shows: 4 cached positions; 2 new queries that read 6 keys.
# [zh] 表中的形状：缓存 4 个位置；2 个新查询读取 6 个键。
assert (cache_k.shape[-2], step["q"].shape[-2], step["scores"].shape[-2:]) == (PAST_LEN, NEW_LEN, (NEW_LEN, len(IDS)))
assert step["k"].shape[-2] == len(key_positions)

# %% [markdown] lang="en"
# Query 4 may read keys 0–4 and query 5 may read keys 0–5: arriving in the same call does not let
# position 4 peek at position 5.
#
# The returned logits need careful reading. Row 0 belongs to position 4, the position of ID 9, and it
# holds the model's scores for **what comes after 9** (softmax turns them into a distribution); it is
# not a score for ID 9 itself.
# So when cached and uncached results are compared, the same *consumed position* (a position whose
# token has already been fed to the model) must be lined up, with no shift by one token. The cell
# below checks exactly that: the two rows equal rows 4 and 5 of a run
# that recomputes all six tokens, within the FP32 tolerance (the two runs multiply matrices of different
# shapes, so their sums may round differently), and query 4 gives zero weight to key 5 (a masked score is
# $-\infty$, and its softmax weight is exactly zero).

# %% [markdown] lang="zh"
# 查询 4 可以读取键 0–4，查询 5 可以读取键 0–5。两个 token 在同一次调用里到达，并不意味着位置 4 可以偷看位置 5。
#
# 返回的 logits 要仔细解读。第 0 行属于位置 4，也就是 ID 9 所在的位置；它是模型给 **9 之后出现什么**打的分（经 softmax 才成为概率分布），而不是给 ID 9 本身打的分。因此比较有缓存和无缓存的结果时，必须对齐同一个**已处理的位置**（其 token 已经送入模型的位置），不能错开一个 token。下面的单元格检查的正是这一点。第一，这两行与完整重算六个 token 时的第 4、5 行在 FP32 容差内一致（两次运行相乘的矩阵形状不同，求和的舍入可能不同）。第二，查询 4 对键 5 的注意力权重为零：被掩码遮住的分数是 $-\infty$，经过 softmax 后，它的权重恰好为零。

# %%
with torch.inference_mode():
    full = toy_layer(ids, torch.arange(len(IDS)))
# [en] Which keys each new query read (a weight above zero in every head): rows are queries 4 and 5.
# [zh] 每个新查询读取了哪些键（在每个头中权重都大于零）：两行分别是查询 4 和查询 5。
keys_read = (step["weights"] > 0).all(dim=1)[0]                  # [NEW_LEN, 6]
print(keys_read.int())
say(en=f"Max abs error between the two cached logit rows and rows 4 and 5 of the full recomputation: "
       f"{max_abs_err(step['logits'], full['logits'][:, PAST_LEN:]):.3e}.",
    zh=f"缓存路径的两行 logits 与完整重算的第 4、5 行之间的最大绝对误差：{max_abs_err(step['logits'], full['logits'][:, PAST_LEN:]):.3e}。")
assert close(step["logits"], full["logits"][:, PAST_LEN:])
assert keys_read.tolist() == [[True] * 5 + [False], [True] * 6]
