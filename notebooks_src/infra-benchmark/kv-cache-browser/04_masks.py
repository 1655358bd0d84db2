# %% [markdown] lang="en"
# ## 4. The mask comes from absolute positions
#
# Let the cache hold `P` positions and the new chunk `C` tokens. Local query `i` sits at absolute
# position `P + i`, and the keys cover absolute positions `0 … P + C − 1`. Query `i` may read key
# `j` exactly when
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# That is `allowed_keys` from section 2. The tempting shortcut is an ordinary lower triangle over the
# `C × (P + C)` score grid, `np.tri`, which compares `j` with the *local* index `i`. It treats the
# first new query as if it were position 0. We will call it the upper-left triangle, because it is
# anchored at the grid's top-left corner instead of its right edge.
#
# In the grids below, each row is one new query (labelled with its absolute position), each column a
# key position (the top row gives the position modulo 10); `#` means the query may read that key, `.`
# means it is masked out. Each grid is headed by its rule.

# %% [markdown] lang="zh"
# ## 4. 掩码要由绝对位置推出
#
# 设缓存中有 `P` 个位置，新的分块（chunk）有 `C` 个 token。局部查询 `i` 的绝对位置是 `P + i`，而键覆盖的绝对位置是 `0 … P + C − 1`。查询 `i` 能读取键 `j`，当且仅当
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# 这正是第 2 节里的 `allowed_keys`。一个很诱人的捷径是直接在 `C × (P + C)` 的分数网格上取普通的下三角（`np.tri`），它拿 `j` 和**局部**下标 `i` 比较，相当于把第一个新查询当成了位置 0。这个三角形贴着网格的左上角、而不是右边缘对齐，所以下文称之为“左上角三角形”。
#
# 在下面的网格里，每一行是一个新查询（行首标注其绝对位置），每一列是一个键位置（首行标出位置除以 10 的余数）；`#` 表示可以读取该键，`.` 表示被掩码屏蔽。每个网格上方写着它所用的规则。

# %%
# [en] The wrong mask: a lower triangle over the [new_len, past_len + new_len] grid, j <= i.
# [zh] 错误的掩码：在 [new_len, past_len + new_len] 网格上取下三角，即 j <= i。
def upper_left_mask(past_len, new_len):
    return np.tri(new_len, past_len + new_len, dtype=bool)


# [en] A mask as text: one line per query, '#' = may read, '.' = masked; the header row counts key
# [en] positions modulo 10.
# [zh] 把掩码画成文字：每个查询一行，'#' 表示可以读取，'.' 表示被屏蔽；首行是键位置除以 10 的余数。
def grid_lines(mask, past_len):
    width = len(str(mask.shape[1] - 1))
    lines = [" " * (width + 3) + "".join(str(j % 10) for j in range(mask.shape[1])) + "  <- j mod 10"]
    for i, row in enumerate(mask):
        lines.append(f"q{past_len + i:>{width}} " + " " + "".join("#" if ok else "." for ok in row))
    return lines


# [en] Left: the offset mask; right: the upper-left triangle.
# [zh] 左边是带偏移的掩码，右边是左上角三角形。
def show_side_by_side(past_len, new_len):
    left = ["j <= P + i"] + grid_lines(allowed_keys(past_len, new_len), past_len)
    right = ["j <= i"] + grid_lines(upper_left_mask(past_len, new_len), past_len)
    pad = max(len(line) for line in left) + 4
    print("\n".join(a.ljust(pad) + b for a, b in zip(left, right)))


say(en="`P = 4` cached positions, `C = 2` new tokens (the six-token example). Left the offset mask, "
       "right the upper-left triangle:",
    zh="缓存中有 `P = 4` 个位置，新分块有 `C = 2` 个 token（即六 token 的例子）。左边是带偏移的掩码，右边是左上角三角形：")
show_side_by_side(4, 2)
# [en] Query 4 reads keys 0-4 and query 5 keys 0-5; the wrong triangle gives them key 0 and keys 0-1;
# [en] position 4 never reads position 5.
# [zh] 查询 4 读取键 0-4，查询 5 读取键 0-5；错误的三角形只给它们键 0 和键 0-1；位置 4 永远读不到位置 5。
assert allowed_keys(4, 2).sum(axis=1).tolist() == [5, 6]
assert upper_left_mask(4, 2).sum(axis=1).tolist() == [1, 2]
assert not allowed_keys(4, 2)[0, 5]

say(en="`P = 5` cached positions, `C = 1` new token (ordinary one-token decoding):",
    zh="缓存中有 `P = 5` 个位置，新分块只有 `C = 1` 个 token（普通的逐 token 解码）：")
show_side_by_side(5, 1)
# [en] A single new query reads every key; the wrong triangle leaves it only key 0.
# [zh] 单个新查询能读取全部键；错误的三角形只留给它键 0。
assert allowed_keys(5, 1).all()
assert upper_left_mask(5, 1).sum() == 1

# %% [markdown] lang="en"
# With a single new token the correct mask allows everything, because the keys contain only past
# positions and the token itself. With a chunk of several tokens it must still hide the later tokens
# of the same chunk. The same trap exists in libraries: PyTorch's `scaled_dot_product_attention`
# documents `is_causal=True` as upper-left alignment when the score matrix is not square (section 3
# of the full PyTorch notebook checks this on the version it runs), so check the mask convention of
# the version you use before handing it a cached chunk.
#
# Does the wrong triangle change the result? Run the six-token call with it:

# %% [markdown] lang="zh"
# 只有一个新 token 时，正确的掩码不屏蔽任何键，因为键里只有过去的位置和这个 token 自己。新分块里有多个 token 时，掩码仍然要挡住同一分块中排在后面的 token。库函数里也有同样的陷阱：PyTorch 的 `scaled_dot_product_attention` 在文档中写明，分数矩阵不是方阵时，`is_causal=True` 按左上角对齐（完整的 PyTorch 笔记本在第 3 节里针对它所用的版本验证了这一点）。所以，把带缓存的新分块交给它之前，先确认你所用版本的掩码约定。
#
# 左上角三角形会不会改变结果？用它重跑一遍六 token 例子中的那次调用：

# %%
wrong_mask_logits, _, _ = toy_forward(token_ids[:, PAST:], cache=prefill_cache, mask_fn=upper_left_mask)
wrong_mask_error = np.abs(wrong_mask_logits - full_logits[:, PAST:]).max()
# [en] The shapes give nothing away; the numbers do.
# [zh] 形状看不出任何问题，数值却不对。
assert wrong_mask_logits.shape == step_logits.shape
assert not np.allclose(wrong_mask_logits, full_logits[:, PAST:], rtol=1e-5, atol=1e-5)
say(en=f"Largest logit error with the upper-left triangle: {wrong_mask_error:.3f}.",
    zh=f"使用左上角三角形时，logits 的最大误差为 {wrong_mask_error:.3f}。")
