# %% [markdown] lang="en"
# ## 4. The mask numbers queries and keys on one scale
#
# Let the cache hold $P$ positions and the new chunk $C$ tokens. Local query $i$ (its index inside the
# chunk) sits at absolute position $P + i$, and the keys cover absolute positions $0 \dots P + C - 1$.
# Query $i$ may read key $j$ exactly when
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# That is `allowed_keys` from section 2. The rule depends only on the distance $P + i - j$, so what
# matters is that queries and keys are numbered on one scale; absolute positions are the natural
# choice, since the cached keys already carry them. On the score grid of $C$ rows and $P + C$
# columns, the allowed cells are the whole cache block plus a causal triangle over the chunk's own
# $C$ columns.
# Where that triangle sits on a grid that is not square is called the *alignment* of a causal mask,
# and libraries offer both:
#
# - **Lower-right alignment.** The triangle's diagonal ends in the grid's bottom-right corner, so the
#   last query reads every key. This is our offset mask, and the mask PyTorch's
#   `torch.nn.attention.bias.causal_lower_right` builds.
# - **Upper-left alignment.** The diagonal starts in the top-left corner: $j \le i$, as if the first
#   new query were position 0. This is what `scaled_dot_product_attention(..., is_causal=True)` does
#   when the grid is not square, and what `np.tri` returns. For a chunk that follows a cache, it is
#   wrong.
#
# On a square grid ($P = 0$, no cache) the two alignments coincide, so a test that never uses a cache
# cannot tell them apart.

# %% [markdown] lang="zh"
# ## 4. 掩码要让查询与键用同一套编号
#
# 设缓存中有 $P$ 个位置，新分块有 $C$ 个 token。分块内局部下标为 $i$ 的查询，绝对位置是 $P + i$；键覆盖的绝对位置是 $0 \dots P + C - 1$。查询 $i$ 可以读取键 $j$，当且仅当
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# 这就是第 2 节中的 `allowed_keys`。这条规则只取决于查询与键之间的距离 $P + i - j$，所以关键在于查询和键用同一套编号；绝对位置是最自然的选择，因为缓存中的键本来就按绝对位置编号。在 $C$ 行、$P + C$ 列的分数网格上，允许读取的格子由两部分组成：缓存对应的整个矩形区域，以及分块自身那 $C$ 列上的一个因果三角形。网格不是方阵时，这个三角形放在哪里，称为因果掩码的**对齐方式**。常用的库两种都提供：
#
# - **右下角对齐**：三角形的对角线终止于网格的右下角，所以最后一个查询能读取全部键。这就是我们带偏移的掩码，也是 PyTorch 的 `torch.nn.attention.bias.causal_lower_right` 构造的掩码。
# - **左上角对齐**：对角线从网格的左上角开始，即 $j \le i$，相当于把第一个新查询当成了位置 0。网格不是方阵时，`scaled_dot_product_attention(..., is_causal=True)` 就按这种方式对齐，`np.tri` 返回的也是它。对于接在缓存之后的分块，这种掩码是错的。
#
# 网格是方阵时（$P = 0$，即没有缓存），两种对齐方式完全重合。所以，从不使用缓存的测试区分不出这两种掩码。

# %%
# [en] The wrong mask for a cached chunk: the upper-left triangle, j <= i, on the
# [en] [new_len, past_len + new_len] grid.
# [zh] 对带缓存的分块来说是错误的掩码：[new_len, past_len + new_len] 网格上的左上角三角形，即 j <= i。
def upper_left_mask(past_len, new_len):
    return np.tri(new_len, past_len + new_len, dtype=bool)

# %% [markdown] lang="en"
# The next cell draws both masks side by side. It only draws: a few dozen lines of SVG written with the
# standard library, so that the notebook needs no plotting package in the browser. Its code is not part
# of the lesson; run it and read the figure.

# %% [markdown] lang="zh"
# 下一个单元格把两种掩码并排画出来。它只负责画图：用标准库写出几十行 SVG，这样在浏览器里也不需要任何绘图库。这段代码不属于本节要讲的内容，运行它，看图即可。

# %% tags=["hide-input"]
# [en] One panel of the figure as SVG elements: the grid of a mask (green = may read), a bar under the
# [en] key columns (grey: from the cache, blue: the chunk's own keys), the diagonal of the causal
# [en] triangle dashed, and the corner it is aligned to marked with a dot.
# [zh] 把图中的一个分图画成 SVG 元素：掩码网格（绿色表示可以读取）；键所在各列下方的色条（灰色：来自缓存，
# [zh] 蓝色：分块自己的键）；因果三角形的对角线画成虚线，它所对齐的那个角用圆点标出。
def mask_panel(mask, past_len, titles, lower_right, left, top, cell):
    rows, cols = mask.shape
    parts = [f'<text x="{left}" y="{top - 40 + 14 * n}" font-size="13">{line}</text>' for n, line in enumerate(titles)]
    for i in range(rows):
        if cell >= 11 or i in (0, rows - 1):
            parts.append(f'<text x="{left - 4}" y="{top + (i + 0.5) * cell + 4}" font-size="11" '
                         f'text-anchor="end">q{past_len + i}</text>')
        for j in range(cols):
            fill = "#2e8b57" if mask[i, j] else "white"
            parts.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" '
                         f'fill="{fill}" stroke="#999999" stroke-width="0.5"/>')
    label_every = 1 if cell >= 14 else 5 if cell >= 4 else 50
    for j in range(0, cols, label_every):
        parts.append(f'<text x="{left + (j + 0.5) * cell}" y="{top - 6}" font-size="10" '
                     f'text-anchor="middle">{j}</text>')
    first = past_len if lower_right else 0
    x0, x1, y1 = left + first * cell, left + (first + rows) * cell, top + rows * cell
    corner = (x1, y1) if lower_right else (x0, top)
    parts.append(f'<line x1="{x0}" y1="{top}" x2="{x1}" y2="{y1}" stroke="#cc3333" stroke-width="2" '
                 f'stroke-dasharray="5,3"/>')
    parts.append(f'<circle cx="{corner[0]}" cy="{corner[1]}" r="5" fill="#cc3333"/>')
    chunk_left = left + past_len * cell
    parts.append(f'<rect x="{left}" y="{y1 + 6}" width="{past_len * cell}" height="6" fill="#999999"/>')
    parts.append(f'<rect x="{chunk_left}" y="{y1 + 6}" width="{rows * cell}" height="6" fill="#4a7ebb"/>')
    if past_len:
        parts.append(f'<text x="{left}" y="{y1 + 26}" font-size="11">cache: keys 0&#8211;{past_len - 1}</text>')
    parts.append(f'<text x="{chunk_left}" y="{y1 + 40}" font-size="11">chunk: keys {past_len}&#8211;{cols - 1}</text>')
    return parts


# [en] Jupyter shows any object with a `_repr_svg_` method as an image: the browser edition draws its
# [en] figure with the standard library, no plotting package needed.
# [zh] Jupyter 会把任何带有 `_repr_svg_` 方法的对象显示为图像：浏览器版用标准库画图，不需要绘图库。
class MaskFigure:
    def __init__(self, past_len, new_len):
        self.past_len, self.new_len = past_len, new_len

    def __repr__(self):
        return f"MaskFigure({self.past_len}, {self.new_len})"

    def _repr_svg_(self):
        total = self.past_len + self.new_len
        cell = max(2, min(28, 400 // total))
        panel = max(60 + total * cell, 300)
        width, height = 2 * panel + 80, 120 + self.new_len * cell
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                 f'font-family="sans-serif">', f'<rect width="{width}" height="{height}" fill="white"/>']
        parts += mask_panel(allowed_keys(self.past_len, self.new_len), self.past_len,
                            ["lower-right alignment (ours)", "j &lt;= P + i, causal_lower_right"], True, 50, 60, cell)
        parts += mask_panel(upper_left_mask(self.past_len, self.new_len), self.past_len,
                            ["upper-left alignment (wrong here)", "j &lt;= i, is_causal=True, np.tri"], False,
                            50 + panel + 20, 60, cell)
        return "\n".join(parts + ["</svg>"])


MaskFigure(PAST, 2)

# %% [markdown] lang="en"
# The figure draws both masks for the six-token example ($P = 4$, $C = 2$). Each panel's title names its
# alignment; the line below gives its rule and the library calls that build it. Rows are the new
# queries, labelled with their absolute positions (q4, q5); columns are the key positions 0–5, numbered
# along the top. The bar under the grid marks where the keys come from: grey for the cache (keys 0–3),
# blue for the chunk's own keys (keys 4–5). A green cell may be read; a white cell is masked. The dashed red line is the
# diagonal of the causal triangle, and the red dot the corner it is aligned to: bottom right on the
# left (our mask), top left on the right, where query 4 sees only key 0 and query 5 only keys 0–1.
#
# The cell below counts the keys each query may read, for this chunk and for ordinary one-token
# decoding ($P = 5$, $C = 1$): with our mask, query $P + i$ reads $P + i + 1$ keys; with the
# upper-left triangle, only $i + 1$.

# %% [markdown] lang="zh"
# 上图以六个 token 的例子（$P = 4$，$C = 2$）画出两种掩码。图中的文字是英文：左图标题 lower-right alignment (ours) 意为“右下角对齐（我们的掩码）”，右图标题 upper-left alignment (wrong here) 意为“左上角对齐（在这里是错的）”；标题下面一行写出各自的规则和给出这种掩码的库函数，左图是 $j \le P + i$ 和 `causal_lower_right`，右图是 $j \le i$、`is_causal=True` 和 `np.tri`。每一行是一个新查询，用它的绝对位置标注（q4、q5）；每一列是一个键的位置（0–5），编号写在网格上方。网格下方的色条标出键的来源：灰色条旁的 cache: keys 0–3 意为“缓存：键 0–3”，蓝色条旁的 chunk: keys 4–5 意为“分块：键 4–5”，即分块自己的键。绿色格子表示可以读取，白色格子表示不能读取。红色虚线是因果三角形的对角线，红点标出它所对齐的角：左图（我们的掩码）对齐到右下角；右图对齐到左上角，查询 4 只能看到键 0，查询 5 只能看到键 0–1。
#
# 下面的单元格统计每个查询可以读取的键数，既看这个分块，也看普通的逐 token 解码（$P = 5$，$C = 1$）：用我们的掩码，查询 $P + i$ 能读取 $P + i + 1$ 个键；用左上角三角形，只能读取 $i + 1$ 个。

# %%
mask_counts = {(past_len, new_len, name): mask_fn(past_len, new_len).sum(axis=1).tolist()
               for past_len, new_len in [(4, 2), (5, 1)]
               for name, mask_fn in [("allowed_keys", allowed_keys), ("upper_left_mask", upper_left_mask)]}
say_table([[f"$(P, C) = ({p}, {c})$", f"`{name}`", f"`{counts}`"] for (p, c, name), counts in mask_counts.items()],
          en=["cache and chunk", "mask", "keys each query may read"],
          zh=["缓存与分块", "掩码", "每个查询可读取的键数"])
assert all(counts == [p + i + 1 if name == "allowed_keys" else i + 1 for i in range(c)]
           for (p, c, name), counts in mask_counts.items())

# %% [markdown] lang="en"
# With a single new token the correct mask allows everything, because the keys hold only past
# positions and the token itself. With a chunk of several tokens it must still hide the later tokens
# of the same chunk. Libraries set the same trap: PyTorch documents `is_causal=True` as upper-left
# alignment when the score matrix is not square (the full PyTorch notebook checks this on the version
# it runs), so check the mask convention of the version you use before handing it a cached chunk.
#
# Does the wrong triangle change the result? The cell runs the six-token call of section 2 with it.
# The shapes give nothing away; the logits must not match the full pass.

# %% [markdown] lang="zh"
# 只有一个新 token 时，正确的掩码不挡住任何键，因为键里只有过去的位置和这个 token 自己。新分块里有多个 token 时，掩码仍然要挡住同一分块中排在后面的 token。库函数里也藏着同样的陷阱：PyTorch 在文档中写明，分数矩阵不是方阵时，`is_causal=True` 按左上角对齐（完整的 PyTorch 笔记本在它所用的版本上验证了这一点）。所以，把带缓存的新分块交给某个库之前，先确认你所用版本的掩码约定。
#
# 左上角三角形会不会改变结果？下面的单元格用它重跑第 2 节中那次送入两个 token 的调用。形状看不出任何问题，但 logits 必须与完整调用对不上。

# %%
wrong_mask_logits, _, _ = toy_forward(token_ids[:, PAST:], cache=prefill_cache, mask_fn=upper_left_mask)
wrong_mask_error = max_abs_err(wrong_mask_logits, full_logits[:, PAST:])
say(en=f"Largest logit difference with the upper-left triangle: {wrong_mask_error:.3f}.",
    zh=f"使用左上角三角形时，logits 的最大绝对误差为 {wrong_mask_error:.3f}。")
assert wrong_mask_logits.shape == step_logits.shape and not close(wrong_mask_logits, full_logits[:, PAST:])
