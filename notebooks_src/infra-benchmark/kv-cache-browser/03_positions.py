# %% [markdown] lang="en"
# ## 3. Positions continue from the cache length
#
# The toy layer, like the full decoder, adds a learned position embedding to each token embedding.
# A cached call must therefore number its tokens from the cache length $P$, not from zero: the new
# tokens sit at absolute positions $P, P + 1, \dots$. If the count restarts at zero, IDs 9 and 18 are
# embedded as if they opened the sequence. Every array keeps a legal shape and nothing crashes; only
# the numbers are wrong.
#
# The cell runs the cached call twice, once with the positions the layer computes from the cache
# (4 and 5) and once with positions restarted at zero (0 and 1, the negative control), and compares
# each with the full pass of section 2. With the right positions the layer's inputs are the full
# pass's inputs at positions 4 and 5 *bit for bit*: on both sides it is the same row of the token table
# plus the same row of the position table, one and the same floating-point addition with a single
# possible result, so no tolerance is needed. The
# logits then agree within the tolerance. With restarted positions neither holds.

# %% [markdown] lang="zh"
# ## 3. 位置要从缓存长度接着数
#
# 和完整解码器一样，玩具层会把可学习的位置嵌入加到 token 嵌入上。所以带缓存的调用必须从缓存长度 $P$ 开始为新 token 编号，而不是从零开始：新 token 的绝对位置是 $P, P + 1, \dots$。如果位置重新从零数起，ID 9 和 18 就会被当成序列开头的 token 来嵌入。所有数组的形状依然合法，程序也不会崩溃，只是算出来的数不对。
#
# 下面的单元格把带缓存的调用运行两次：一次用玩具层根据缓存长度算出的位置（4 和 5），一次让位置从零重新计数（0 和 1，这是负对照），并分别与第 2 节的完整调用比较。位置正确时，该层的输入与完整调用在位置 4 和 5 上的输入**逐比特相同**：两边都是 token 嵌入表的同一行加上位置嵌入表的同一行，做的是同一次浮点加法，结果唯一确定，所以不需要容差。这时 logits 也在容差内一致。位置从零重新计数时，两条都不成立。

# %%
_, _, full_parts = toy_forward(token_ids)
restart_logits, _, restart_parts = toy_forward(token_ids[:, PAST:], cache=prefill_cache, pos_start=0)
position_runs = {
    "[4, 5]": (step["x"], step_logits),
    # [en] The mistake: counting from zero again.
    # [zh] 错误的做法：重新从零开始数。
    "[0, 1]": (restart_parts["x"], restart_logits),
}
position_rows = {name: (bool(np.array_equal(x, full_parts["x"][:, PAST:])), max_abs_err(logits, full_logits[:, PAST:]),
                        close(logits, full_logits[:, PAST:]))
                 for name, (x, logits) in position_runs.items()}
say_table([[f"`{name}`", f"`{same_inputs}`", f"{error:.2e}", f"`{same_logits}`"]
           for name, (same_inputs, error, same_logits) in position_rows.items()],
          en=["positions of IDs 9 and 18", "inputs bit for bit as in the full pass",
              "max abs error of the logits vs the full pass", "logits within $10^{-10}$"],
          zh=["ID 9 和 18 的位置", "输入与完整调用逐比特相同", "与完整调用相比 logits 的最大绝对误差",
              "logits 在 $10^{-10}$ 内一致"])
assert [(same, agree) for same, _, agree in position_rows.values()] == [(True, True), (False, False)]

# %% [markdown] lang="en"
# Rotary position embeddings (RoPE) encode position by rotating Q and K instead of adding a vector
# to the input. They need the same care: the rotation for a new token must use the numbering the
# cached keys were rotated with, and since those keys are stored already rotated, in practice that
# means its absolute position. RoPE is not implemented here.

# %% [markdown] lang="zh"
# 旋转位置编码（RoPE）不是往输入上加一个向量，而是通过旋转 Q 和 K 来编码位置。它同样不能弄错位置：新 token 的旋转必须沿用缓存中的键旋转时所用的编号；缓存里的键存的是已经旋转过的结果，所以实际上就是按新 token 的绝对位置计算。本笔记本没有实现 RoPE。
