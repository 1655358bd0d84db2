# %% [markdown] lang="en"
# ## 2. A six-token example
#
# Take the token IDs `[12, 7, 31, 4, 9, 18]`. The first call, the *prefill*, has already run the
# first four through the model, so the cache holds keys and values for positions 0–3. The next call
# receives `9` and `18` together, at positions 4 and 5.
#
# The cell below builds a toy attention layer with random weights. Its sizes match the full
# PyTorch notebook's decoder (vocabulary 97, width 64, 4 heads of width 16), but it is a single
# layer with no LayerNorm and no MLP: token embedding plus position embedding, multi-head attention
# with a residual connection, then a projection to vocabulary logits. It runs prefill, then the
# two-token call, and prints each array's shape as NumPy reports it (B: batch, H: heads,
# Dh: head width).

# %% [markdown] lang="zh"
# ## 2. 一个六 token 的例子
#
# 以 token ID 序列 `[12, 7, 31, 4, 9, 18]` 为例。第一次调用，即**预填充**（prefill），已经让前四个 token 经过了模型，所以缓存里存有位置 0–3 的键和值。下一次调用同时送入 `9` 和 `18`，它们位于位置 4 和 5。
#
# 下面的单元格搭建一个权重随机的玩具注意力层。它的尺寸与完整 PyTorch 笔记本中的解码器相同（词表 97、宽度 64、4 个头、每头宽度 16），但只有一层，没有 LayerNorm 和 MLP：token 嵌入加上位置嵌入，经过带残差连接的多头注意力，再投影成词表上的 logits。单元格先做预填充，再做送入两个 token 的那次调用，并打印 NumPy 报告的各数组形状（B：batch 大小，H：头数，Dh：每头宽度）。

# %%
VOCAB, WIDTH, HEADS, HEAD_DIM, MAX_POS = 97, 64, 4, 16, 512
assert HEADS * HEAD_DIM == WIDTH

scale = 1 / math.sqrt(WIDTH)
toy = {
    "tok_emb": rng.normal(size=(VOCAB, WIDTH)),
    "pos_emb": rng.normal(size=(MAX_POS, WIDTH)),
    "W_q": rng.normal(scale=scale, size=(WIDTH, WIDTH)),
    "W_k": rng.normal(scale=scale, size=(WIDTH, WIDTH)),
    "W_v": rng.normal(scale=scale, size=(WIDTH, WIDTH)),
    "W_o": rng.normal(scale=scale, size=(WIDTH, WIDTH)),
    "W_vocab": rng.normal(scale=scale, size=(WIDTH, VOCAB)),
}


# [en] Boolean mask [new_len, past_len + new_len]: query i may read key j when j <= past_len + i.
# [en] Section 4 derives it; section 3 explains the positions it is built from.
# [zh] 布尔掩码 [new_len, past_len + new_len]：当 j <= past_len + i 时，查询 i 可以读取键 j。
# [zh] 第 4 节推导它，第 3 节解释它所依据的位置。
def allowed_keys(past_len, new_len):
    query_pos = past_len + np.arange(new_len)
    key_pos = np.arange(past_len + new_len)
    return key_pos[None, :] <= query_pos[:, None]


def softmax(scores):
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=-1, keepdims=True)


def split_heads(x):
    # [B, T, WIDTH] -> [B, H, T, Dh]
    batch, length, _ = x.shape
    return x.reshape(batch, length, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)


# [en] Run the toy layer on `ids` [B, T_new], reading `cache` = (K, V) of earlier positions.
# [en] Returns (logits [B, T_new, VOCAB], new cache, dict of intermediate arrays).
# [en] `pos_start` and `mask_fn` exist only so that later sections can break them on purpose.
# [zh] 在 `ids` [B, T_new] 上运行玩具层，并读取 `cache`，即此前各位置的 (K, V)。
# [zh] 返回 (logits [B, T_new, VOCAB], 新缓存, 中间数组组成的字典)。
# [zh] `pos_start` 和 `mask_fn` 只是为了让后面几节能故意把它们改错。
def toy_forward(ids, cache=None, pos_start=None, mask_fn=allowed_keys):
    batch, new_len = ids.shape
    past_len = 0 if cache is None else cache[0].shape[2]
    if pos_start is None:
        # [en] The new tokens continue where the cache ends.
        # [zh] 新 token 的位置从缓存结束处接着往下数。
        pos_start = past_len
    positions = pos_start + np.arange(new_len)
    x = toy["tok_emb"][ids] + toy["pos_emb"][positions]
    q = split_heads(x @ toy["W_q"])
    k_new = split_heads(x @ toy["W_k"])
    v_new = split_heads(x @ toy["W_v"])
    if cache is None:
        k, v = k_new, v_new
    else:
        # [en] np.concatenate returns new arrays: the caller's cache is left untouched.
        # [zh] np.concatenate 返回新数组：调用方的缓存保持不变。
        k = np.concatenate([cache[0], k_new], axis=2)
        v = np.concatenate([cache[1], v_new], axis=2)
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(HEAD_DIM)
    scores = np.where(mask_fn(past_len, new_len), scores, -np.inf)
    context = softmax(scores) @ v                          # [B, H, T_new, Dh]
    context = context.transpose(0, 2, 1, 3).reshape(batch, new_len, WIDTH)
    hidden = x + context @ toy["W_o"]
    logits = hidden @ toy["W_vocab"]
    parts = {"x": x, "q": q, "k": k, "v": v, "scores": scores}
    return logits, (k, v), parts


token_ids = np.array([[12, 7, 31, 4, 9, 18]])          # [B, T] = [1, 6]
PAST = 4
prefill_logits, prefill_cache, _ = toy_forward(token_ids[:, :PAST])
cache_before = (prefill_cache[0].copy(), prefill_cache[1].copy())
step_logits, step_cache, step = toy_forward(token_ids[:, PAST:], cache=prefill_cache)

rows = [
    ("prefill_cache[0]", prefill_cache[0].shape, "[B, H, 4, Dh]"),
    ("token_ids[:, PAST:]", token_ids[:, PAST:].shape, "[B, 2]"),
    ('step["q"]', step["q"].shape, "[B, H, 2, Dh]"),
    ('step["k"]', step["k"].shape, "[B, H, 6, Dh]"),
    ('step["scores"]', step["scores"].shape, "[B, H, 2, 6]"),
    ("step_logits", step_logits.shape, "[B, 2, VOCAB]"),
]
say_table([[f"`{name}`", f"`{shape}`", f"`{meaning}`"] for name, shape, meaning in rows],
          en=["array", "NumPy shape", "in symbols"], zh=["数组", "NumPy 给出的形状", "符号形式"])

B = 1
assert prefill_cache[0].shape == prefill_cache[1].shape == (B, HEADS, 4, HEAD_DIM)
assert step["q"].shape == (B, HEADS, 2, HEAD_DIM)
assert step["k"].shape == step["v"].shape == (B, HEADS, 6, HEAD_DIM)
assert step["scores"].shape == (B, HEADS, 2, 6)
assert step_logits.shape == (B, 2, VOCAB)
assert np.array_equal(prefill_cache[0], cache_before[0]) and np.array_equal(prefill_cache[1], cache_before[1])
say(en="`prefill_cache[0]` holds the cached K (V has the same shape), `step` the arrays of the two-token call. "
       "The cached call left the prefill cache unchanged.",
    zh="`prefill_cache[0]` 是缓存的 K（V 的形状相同），`step` 是两个 token 那次调用的中间数组。"
       "带缓存的调用没有改动预填充得到的缓存。")

# %% [markdown] lang="en"
# Query 4 may read keys 0–4 and query 5 may read keys 0–5. Arriving in the same call does not
# let position 4 look ahead at position 5.
#
# The first row of the returned logits is the model's guess for the token that *follows* ID 9; it
# is not a score for 9 itself. So when we compare the cached call with one full pass over all six
# tokens, cached row `i` must match full row `4 + i`. The check below compares every vocabulary
# logit and the cached K and V, and also confirms that a one-row shift (full rows 3 and 4) does not
# match.

# %% [markdown] lang="zh"
# 查询 4 可以读取键 0–4，查询 5 可以读取键 0–5。两个 token 在同一次调用里到达，并不意味着位置 4 可以提前看到位置 5。
#
# 返回的第一行 logits 是模型对 ID 9 **之后**那个 token 的预测，而不是给 9 本身打的分。因此，把带缓存的调用与一次处理全部六个 token 的完整调用相比较时，缓存结果的第 `i` 行应当对应完整结果的第 `4 + i` 行。下面的检查逐一比较词表上的全部 logits 以及缓存的 K 和 V，并确认错开一行（完整结果的第 3、4 行）时对不上。

# %%
full_logits, full_cache, _ = toy_forward(token_ids)
aligned_error = np.abs(step_logits - full_logits[:, PAST:]).max()
shifted_error = np.abs(step_logits - full_logits[:, PAST - 1 : -1]).max()
assert np.allclose(step_logits, full_logits[:, PAST:], rtol=1e-10, atol=1e-10)
assert not np.allclose(step_logits, full_logits[:, PAST - 1 : -1], rtol=1e-10, atol=1e-10)
assert np.allclose(step_cache[0], full_cache[0], rtol=1e-10, atol=1e-10)
assert np.allclose(step_cache[1], full_cache[1], rtol=1e-10, atol=1e-10)
say_table([[f"{aligned_error:.2e}", f"{shifted_error:.2e}"]],
          en=["max |cached - full|, same positions", "max |cached - full|, shifted by one row"],
          zh=["最大 |缓存路径 - 完整路径|，位置对齐", "最大 |缓存路径 - 完整路径|，错开一行"])
say(en="Cached logits and K/V match the full pass, position by position.",
    zh="缓存路径的 logits 和 K/V 与完整调用逐个位置一致。")
