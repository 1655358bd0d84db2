# %% [markdown] lang="en"
# ## 3. Positions continue from the cache length
#
# The toy layer, like the full decoder, adds a learned position embedding to each token embedding.
# A cached call must therefore number its tokens from the cache length `P`, not from zero: the new
# tokens sit at absolute positions `P, P + 1, …`. If the count restarts at zero, IDs 9 and 18 are
# embedded as if they opened the sequence. Every array keeps a legal shape and nothing crashes; only
# the numbers are wrong.
#
# The cell below builds both position lists, checks that the correct one reproduces exactly the
# layer inputs that the full pass used at positions 4 and 5, and runs the cached call once more with
# positions restarted at zero to see how far the logits move.

# %% [markdown] lang="zh"
# ## 3. 位置要从缓存长度接着数
#
# 和完整解码器一样，玩具层会把可学习的位置嵌入加到 token 嵌入上。所以带缓存的调用必须从缓存长度 `P` 开始为新 token 编号，而不是从零开始：新 token 的绝对位置是 `P, P + 1, …`。如果位置重新从零数起，ID 9 和 18 就会被当成序列开头的 token 来嵌入。所有数组的形状依然合法，程序也不会崩溃，只是算出来的数不对。
#
# 下面的单元格生成这两种位置列表，检查正确的位置能否精确复现完整调用在位置 4 和 5 上的层输入；然后让位置从零重新计数，再跑一次带缓存的调用，看看 logits 偏离了多少。

# %%
# [en] Absolute positions of a chunk of `new_len` tokens that follows `past_len` cached ones.
# [zh] 紧跟在 `past_len` 个已缓存 token 之后、含 `new_len` 个 token 的分块的绝对位置。
def query_positions(past_len, new_len):
    return past_len + np.arange(new_len)


right_pos = query_positions(PAST, 2)
# [en] The mistake: counting from zero again.
# [zh] 错误的做法：重新从零开始数。
restarted_pos = np.arange(2)
assert right_pos.tolist() == [4, 5] and restarted_pos.tolist() == [0, 1]

# [en] The correct positions give the full pass's inputs at positions 4 and 5, bit for bit.
# [zh] 正确的位置给出完整调用在位置 4 和 5 上的输入，逐比特相同。
_, _, full_parts = toy_forward(token_ids)
assert np.array_equal(step["x"], full_parts["x"][:, PAST:])

restart_logits, _, restart_parts = toy_forward(token_ids[:, PAST:], cache=prefill_cache, pos_start=0)
# [en] Legal shapes, nothing crashes ...
# [zh] 形状合法，程序也不会崩溃……
assert restart_logits.shape == step_logits.shape and restart_parts["k"].shape == step["k"].shape
assert not np.allclose(restart_parts["x"], full_parts["x"][:, PAST:])
restart_error = np.abs(restart_logits - full_logits[:, PAST:]).max()
# [en] Far outside rounding.
# [zh] 远远超出舍入误差。
assert not np.allclose(restart_logits, full_logits[:, PAST:], rtol=1e-5, atol=1e-5)
say(en=f"Correct positions `{right_pos.tolist()}`, restarted positions `{restarted_pos.tolist()}`. "
       f"Largest logit error with restarted positions: {restart_error:.3f}.",
    zh=f"正确的位置是 `{right_pos.tolist()}`，重新计数的位置是 `{restarted_pos.tolist()}`。"
       f"位置重新计数时，logits 的最大误差为 {restart_error:.3f}。")

# %% [markdown] lang="en"
# Rotary position embeddings (RoPE) encode position by rotating Q and K instead of adding a vector
# to the input. They need the same care: the rotation for a new token must use its absolute
# position. RoPE is not implemented here.

# %% [markdown] lang="zh"
# 旋转位置编码（RoPE）不是往输入上加一个向量，而是通过旋转 Q 和 K 来编码位置。它同样不能弄错位置：新 token 的旋转必须按它的绝对位置计算。本笔记本没有实现 RoPE。
