# %% [markdown] lang="en"
# ## 2. A six-token example
#
# Take the token IDs `[12, 7, 31, 4, 9, 18]`. The first call, the *prefill*, has already run the
# first four through the model, so the cache holds keys and values for positions 0–3. The next call
# receives `9` and `18` together, at positions 4 and 5.
#
# We need a toy attention layer with random weights. Its sizes match the full PyTorch notebook's
# decoder (vocabulary 97, width 64, 4 heads of width 16), but it is a single layer with no LayerNorm
# and no MLP. The first cell draws its weights and fixes how results are compared. A cached call and a
# full pass add the same nonzero terms, but perhaps in a different order (the full pass may also add exact
# zeros, the weights of masked keys, which change no sum), so in float64 they may differ in the last bits;
# `close` accepts a difference up to $10^{-10}$, far above such rounding and far below any real mistake,
# and `max_abs_err` says how large the difference is.

# %% [markdown] lang="zh"
# ## 2. 六个 token 的例子
#
# 以 token ID 序列 `[12, 7, 31, 4, 9, 18]` 为例。第一次调用，即**预填充**（prefill），已经让前四个 token 经过了模型，所以缓存里存有位置 0–3 的键和值。下一次调用同时送入 `9` 和 `18`，它们位于位置 4 和 5。
#
# 我们需要一个权重随机的玩具注意力层。它的尺寸与完整 PyTorch 笔记本中的解码器相同（词表 97、宽度 64、4 个头、每头 16 维），但只有一层，没有 LayerNorm 和 MLP。下一个单元格生成它的权重，并规定如何比较结果。带缓存的调用和完整调用相加的非零项相同，但相加的顺序可能不同（完整调用还可能多加一些恰好为零的项，即被掩码挡住的键的权重，它们不改变任何和），所以在 FP64 下结果可能在最后几个比特上不同。`close` 允许的差值最大为 $10^{-10}$：远大于这种舍入误差，又远小于任何真正的错误；`max_abs_err` 给出两者实际相差多少。

# %%
VOCAB, WIDTH, HEADS, HEAD_DIM, MAX_POS = 97, 64, 4, 16, 512

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
# [en] FP64 tolerance (absolute and relative), as in the PyTorch notebooks of this series.
# [zh] FP64（`float64`）的容差（绝对与相对），与本系列 PyTorch 笔记本相同。
TOLERANCE = 1e-10


def close(a, b):
    return a.shape == b.shape and np.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE)


def max_abs_err(a, b):
    return float(np.abs(a - b).max())

# %% [markdown] lang="en"
# The layer itself: token embedding plus position embedding, multi-head attention with a residual
# connection, then a projection to vocabulary logits. `toy_forward` reads the cache length from the
# cached K, numbers the new tokens from there, and masks with `allowed_keys`: query $i$ of the call may
# read every key up to its own absolute position. It returns the logits, the longer cache and the
# intermediate arrays. Take both rules as given for now: sections 3 and 4 explain each one by breaking it on purpose.

# %% [markdown] lang="zh"
# 下面是这个层本身：token 嵌入加上位置嵌入，经过带残差连接的多头注意力，再投影成词表上的 logits。`toy_forward` 从缓存的 K 读出缓存长度，从这个长度开始为新 token 编号，并用 `allowed_keys` 做掩码：本次调用的查询 $i$ 可以读取绝对位置不超过它自己的所有键。它返回 logits、加长后的缓存和各个中间数组。这两条规则暂且照用：第 3、4 节会逐一故意改错，以此说明为什么要这样做。

# %%
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
# [en] The two conventions of this notebook are parameters: the first position of the new tokens
# [en] (`pos_start`, by default the cache length) and the mask (`mask_fn`). Sections 3 and 4 pass
# [en] wrong ones on purpose, as negative controls.
# [zh] 在 `ids` [B, T_new] 上运行玩具层，并读取 `cache`，即此前各位置的 (K, V)。
# [zh] 返回（logits [B, T_new, VOCAB]，新缓存，中间数组组成的字典）。
# [zh] 本笔记本讨论的两条约定都是参数：新 token 的起始位置（`pos_start`，默认为缓存长度）和掩码
# [zh] （`mask_fn`）。第 3、4 节会故意传入错误的约定，作为负对照。
def toy_forward(ids, cache=None, pos_start=None, mask_fn=allowed_keys):
    batch, new_len = ids.shape
    past_len = 0 if cache is None else cache[0].shape[2]
    if pos_start is None:
        # [en] The new tokens continue where the cache ends.
        # [zh] 新 token 的位置从缓存结束处接着往下数。
        pos_start = past_len
    positions = pos_start + np.arange(new_len)
    x = toy["tok_emb"][ids] + toy["pos_emb"][positions]     # [B, T_new, WIDTH]
    q = split_heads(x @ toy["W_q"])                         # [B, H, T_new, Dh]
    k_new = split_heads(x @ toy["W_k"])
    v_new = split_heads(x @ toy["W_v"])
    if cache is None:
        k, v = k_new, v_new
    else:
        # [en] np.concatenate returns new arrays: the caller's cache is left untouched.
        # [zh] np.concatenate 返回新数组：调用方的缓存保持不变。
        k = np.concatenate([cache[0], k_new], axis=2)       # [B, H, T_total, Dh]
        v = np.concatenate([cache[1], v_new], axis=2)
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(HEAD_DIM)   # [B, H, T_new, T_total]
    scores = np.where(mask_fn(past_len, new_len), scores, -np.inf)
    context = softmax(scores) @ v                           # [B, H, T_new, Dh]
    context = context.transpose(0, 2, 1, 3).reshape(batch, new_len, WIDTH)
    hidden = x + context @ toy["W_o"]
    logits = hidden @ toy["W_vocab"]                        # [B, T_new, VOCAB]
    parts = {"x": x, "q": q, "k": k, "v": v, "scores": scores}
    return logits, (k, v), parts

# %% [markdown] lang="en"
# Now the two calls: the prefill over the first four tokens, then `9` and `18` with the cache it
# returned. The table gives each array's shape as NumPy reports it, next to the same shape in symbols
# (B: batch, H: heads, Dh: head width). The cell also checks that the second call left the prefill's
# cache unchanged. This toy returns a new, longer cache and leaves the prefill's as it was. Hugging
# Face's default `DynamicCache` also builds new, longer tensors, but stores them in the cache object you
# pass in; static and paged caches write the new entries in place. So before continuing one prefix twice
# with a real cache, copy it (or, in a paged cache, give each continuation blocks of its own).

# %% [markdown] lang="zh"
# 现在做这两次调用：先对前四个 token 做预填充，再带着它返回的缓存送入 `9` 和 `18`。表中给出 NumPy 报告的各数组形状，旁边是用符号写出的同一形状（B：batch 大小，H：头数，Dh：每头的维度）。单元格还检查第二次调用没有改动预填充得到的缓存。这个玩具层返回一份新的、更长的缓存，预填充得到的缓存保持原样。Hugging Face 默认的 `DynamicCache` 同样会构造新的、更长的张量，但会把它们存进传入的那个缓存对象；预分配缓存（静态缓存）和分页缓存则把新项原地写入。所以，用真实的缓存让同一个前缀续写两次之前，要先复制它（在分页缓存中，则让每个续写使用各自的物理块）。

# %%
token_ids = np.array([[12, 7, 31, 4, 9, 18]])               # [B, T] = [1, 6]
PAST = 4
prefill_logits, prefill_cache, _ = toy_forward(token_ids[:, :PAST])
cache_before = (prefill_cache[0].copy(), prefill_cache[1].copy())
step_logits, step_cache, step = toy_forward(token_ids[:, PAST:], cache=prefill_cache)

B = 1
shapes = [
    ("prefill_cache[0]", prefill_cache[0].shape, "[B, H, 4, Dh]", (B, HEADS, 4, HEAD_DIM)),
    ("token_ids[:, PAST:]", token_ids[:, PAST:].shape, "[B, 2]", (B, 2)),
    ('step["q"]', step["q"].shape, "[B, H, 2, Dh]", (B, HEADS, 2, HEAD_DIM)),
    ('step["k"]', step["k"].shape, "[B, H, 6, Dh]", (B, HEADS, 6, HEAD_DIM)),
    ('step["scores"]', step["scores"].shape, "[B, H, 2, 6]", (B, HEADS, 2, 6)),
    ("step_logits", step_logits.shape, "[B, 2, VOCAB]", (B, 2, VOCAB)),
]
say_table([[f"`{name}`", f"`{shape}`", f"`{symbols}`"] for name, shape, symbols, _ in shapes],
          en=["array", "NumPy shape", "in symbols"], zh=["数组", "NumPy 给出的形状", "符号形式"])
assert all(shape == expected for _, shape, _, expected in shapes)
# [en] The cached call wrote nothing into the prefill cache.
# [zh] 带缓存的调用没有往预填充得到的缓存里写任何东西。
assert np.array_equal(prefill_cache[0], cache_before[0]) and np.array_equal(prefill_cache[1], cache_before[1])
say(en="`prefill_cache[0]` holds the cached K (V has the same shape), `step` the arrays of the two-token call. "
       "The cached call left the prefill cache unchanged.",
    zh="`prefill_cache[0]` 是缓存的 K（V 的形状相同），`step` 是送入两个 token 的那次调用的中间数组。"
       "带缓存的调用没有改动预填充得到的缓存。")

# %% [markdown] lang="en"
# Query 4 may read keys 0–4 and query 5 may read keys 0–5. Arriving in the same call does not
# let position 4 look ahead at position 5.
#
# The first row of the returned logits is the model's guess for the token that *follows* ID 9; it
# is not a score for 9 itself. So when we compare the cached call with one full pass over all six
# tokens, cached row $i$ must match full row $4 + i$. The check compares every vocabulary logit and
# the cached K and V within the float64 tolerance. Its negative control compares the cached rows with
# the full rows shifted by one (full rows 3 and 4), which must not match: the comparison can tell one
# position from the next.

# %% [markdown] lang="zh"
# 查询 4 可以读取键 0–4，查询 5 可以读取键 0–5。两个 token 在同一次调用里到达，并不意味着位置 4 可以提前看到位置 5。
#
# 返回的第一行 logits 是模型对 ID 9 **之后**那个 token 的预测，而不是给 9 本身打的分。因此，把带缓存的调用与一次处理全部六个 token 的完整调用相比较时，缓存结果的第 $i$ 行应当对应完整结果的第 $4 + i$ 行。下面的检查在 FP64 容差内逐一比较词表上的全部 logits，以及缓存的 K 和 V。它的负对照是把缓存结果与错开一行的完整结果（第 3、4 行）比较，两者必须对不上：这说明这个比较分得清相邻的两个位置。

# %%
full_logits, full_cache, _ = toy_forward(token_ids)
# [en] (cached, full) pairs that must match ...
# [zh] 必须一致的（缓存结果，完整结果）……
matching_pairs = {
    ("step_logits", "full_logits[:, 4:6]"): (step_logits, full_logits[:, PAST:]),
    ("step_cache[0]", "full_cache[0]"): (step_cache[0], full_cache[0]),
    ("step_cache[1]", "full_cache[1]"): (step_cache[1], full_cache[1]),
}
# [en] ... and the negative control, which must not: the full rows shifted by one.
# [zh] ……以及必须对不上的负对照：完整结果错开一行。
control_pair = (step_logits, full_logits[:, PAST - 1:-1])
table_rows = [*matching_pairs.items(), (("step_logits", "full_logits[:, 3:5]"), control_pair)]
say_table([[f"`{cached}`", f"`{full}`", f"{max_abs_err(*pair):.2e}", f"`{close(*pair)}`"]
           for (cached, full), pair in table_rows],
          en=["cached call", "full pass (last row: the control)", "max abs error", "within $10^{-10}$"],
          zh=["带缓存的调用", "完整调用（最后一行是负对照）", "最大绝对误差", "在 $10^{-10}$ 内一致"])
assert all(close(*pair) for pair in matching_pairs.values())
assert not close(*control_pair)
say(en="Cached logits and K/V match the full pass, position by position; shifted by one row, they do not.",
    zh="缓存路径的 logits 和 K/V 与完整调用逐个位置一致；错开一行就对不上。")

# %% [markdown] lang="en"
# Where the table shows an error of exactly 0, the two paths happened to add their nonzero terms in the same order; another
# split, CPU or BLAS library may differ in the last bits, so `close` allows such a difference without
# requiring one.

# %% [markdown] lang="zh"
# 表中误差恰好为 0 的地方，是两条路径碰巧以相同的顺序把非零项相加；换一种切分方式、CPU 或 BLAS 库，最后几个比特就可能不同，所以 `close` 允许这种差异，但并不要求一定有。
