# %% [markdown] lang="en"
# ## {{section}}. Masks from absolute positions
#
# Let the cache hold $P$ positions and the new chunk $C$ tokens. Local query $i$ of the chunk is absolute
# position $P + i$, and the keys cover positions $0 \dots P + C - 1$. A query may read a key when the
# key is not in its future:
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# The tempting alternative is the ordinary triangle in the upper-left corner of the $[C, P + C]$ score
# matrix. It treats local query 0 as if it were position 0, so the new tokens lose sight of most of the
# cache. Both masks have legal shapes and the code runs either way; only the numbers change. That is why
# this mistake needs a numerical check rather than a shape check.

# %% [markdown] lang="zh"
# ## {{section}}. 由绝对位置推出掩码
#
# 设缓存中已有 $P$ 个位置，新来的分块（chunk）有 $C$ 个 token。分块内局部下标为 $i$ 的查询，其绝对位置是 $P + i$；键则覆盖位置 $0 \dots P + C - 1$。只要键不在查询的“未来”，查询就可以读取它：
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# 一种很诱人的写法，是直接在 $[C, P + C]$ 分数矩阵的左上角取一个普通三角形。这等于把局部下标为 0 的查询当成了位置 0，于是新 token 看不到缓存中的大部分内容。两种掩码的形状都合法，代码照样能跑，变的只是数值。所以这类错误只能靠数值检查来发现，光看形状是查不出来的。

# %%
# [en] Offset causal mask, bool [new_len, past_len + new_len]: query i sits at absolute position
# [en] past_len + i and reads key j iff j <= past_len + i.
# [zh] 带偏移的因果掩码，布尔张量 [new_len, past_len + new_len]：查询 i 的绝对位置是
# [zh] past_len + i，当且仅当 j <= past_len + i 时它可以读取键 j。
def causal_mask(past_len: int, new_len: int) -> torch.Tensor:
    query_pos = past_len + torch.arange(new_len)
    key_pos = torch.arange(past_len + new_len)
    return key_pos[None, :] <= query_pos[:, None]


# [en] WRONG on purpose: the upper-left triangle, which forgets the past_len offset.
# [zh] 故意写错：左上角三角形，漏掉了偏移 past_len。
def local_triangle_mask(past_len: int, new_len: int) -> torch.Tensor:
    query_local = torch.arange(new_len)
    key_pos = torch.arange(past_len + new_len)
    return key_pos[None, :] <= query_local[:, None]


# [en] Without a cache the offset mask is the usual lower triangle.
# [zh] 没有缓存时，带偏移的掩码就是普通的下三角。
assert torch.equal(causal_mask(0, 6), torch.ones(6, 6, dtype=torch.bool).tril())
assert torch.equal(causal_mask(4, 2), torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool))
assert torch.equal(local_triangle_mask(4, 2), torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool))
print(causal_mask(4, 2).int())

# %% [markdown] lang="en"
# Side by side for a cache of 4 positions and a chunk of 2 tokens: the offset mask lets both new
# queries read the whole cache; the upper-left triangle lets query 4 read only key 0, and query 5 only
# keys 0–1.

# %% [markdown] lang="zh"
# 下面以缓存 4 个位置、分块 2 个 token 为例，把两种掩码并排画出来：带偏移的掩码让两个新查询都能读到整个缓存；左上角三角形却只让查询 4 读到键 0，让查询 5 读到键 0–1。

# %%
def draw_masks(past_len: int, new_len: int):
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.6))
    panels = [
        ("offset causal mask (correct)", causal_mask(past_len, new_len)),
        ("upper-left triangle (wrong)", local_triangle_mask(past_len, new_len)),
    ]
    for ax, (title, mask) in zip(axes, panels):
        ax.imshow(mask.int().numpy(), cmap="Greens", vmin=0, vmax=1.4)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key position j")
        ax.set_xticks(range(past_len + new_len))
        ax.set_yticks(range(new_len), [f"q{past_len + i}" for i in range(new_len)])
        for (i, j), value in np.ndenumerate(mask.int().numpy()):
            ax.text(j, i, "1" if value else "0", ha="center", va="center", fontsize=9)
    axes[0].set_ylabel("query (absolute position)")
    fig.suptitle(f"cache of {past_len} positions, chunk of {new_len} tokens (1 = may read)", fontsize=10)
    fig.tight_layout()
    return fig


mask_figure = draw_masks(4, 2)
# [en] Offset mask: the whole cache plus the causal part of the chunk. Triangle: key 0, then keys 0-1.
# [zh] 带偏移的掩码：整个缓存加上分块内的因果部分。三角形：先是键 0，然后是键 0–1。
assert causal_mask(4, 2).sum(dim=-1).tolist() == [5, 6]
assert local_triangle_mask(4, 2).sum(dim=-1).tolist() == [1, 2]
MASKS_PNG = OUT / "masks.png"
mask_figure.savefig(MASKS_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# **Exercise.** The cache holds 10 tokens and the next chunk has 3. What are the absolute positions of
# the new queries, the last two dimensions of the score tensor, and how many keys can each query read?
# How many would the upper-left triangle let them read?
#
# <details><summary>Show the answer</summary>
#
# The queries sit at positions 10, 11 and 12, and the scores end in `[3, 13]` (3 queries, 13 keys).
# The three queries may read 11, 12 and 13 keys. A triangle built from local indices alone would give
# them 1, 2 and 3 keys. The next cell asserts all of this.
#
# </details>

# %% [markdown] lang="zh"
# **练习**：缓存里有 10 个 token，下一个分块有 3 个 token。新查询的绝对位置是多少？分数张量的最后两维是多少？每个查询能读取几个键？如果用左上角三角形，又能读取几个？
#
# <details><summary>查看答案</summary>
#
# 三个查询位于位置 10、11、12，分数张量的最后两维是 `[3, 13]`（3 个查询，13 个键）。它们分别能读取 11、12、13 个键；只按局部下标构造的三角形则只让它们读取 1、2、3 个键。下一个单元格用断言验证了以上所有结论。
#
# </details>

# %%
exercise_positions = (10 + torch.arange(3)).tolist()
exercise_mask = causal_mask(10, 3)
exercise_visible = exercise_mask.sum(dim=-1).tolist()
exercise_wrong_visible = local_triangle_mask(10, 3).sum(dim=-1).tolist()
with torch.inference_mode():
    exercise_scores = torch.randn(1, 4, 3, 16) @ torch.randn(1, 4, 13, 16).transpose(-2, -1)
assert exercise_positions == [10, 11, 12]
assert list(exercise_mask.shape) == list(exercise_scores.shape[-2:]) == [3, 13]
assert exercise_visible == [11, 12, 13]
assert exercise_wrong_visible == [1, 2, 3]
say(en="Exercise checked: positions 10, 11, 12, scores `[3, 13]`, 11, 12 and 13 visible keys (1, 2 and 3 with the upper-left triangle).",
    zh="练习答案已核对：位置 10、11、12，分数张量末两维 `[3, 13]`，可读取的键分别为 11、12、13 个（用左上角三角形则为 1、2、3 个）。")

# %% [markdown] lang="en"
# **PyTorch's own attention.** `F.scaled_dot_product_attention(..., is_causal=True)` aligns the causal
# triangle to the upper-left corner when the score matrix is not square, which is exactly the wrong
# mask above for a chunk that follows a cache. `torch.nn.attention.bias.causal_lower_right` aligns it
# to the lower-right corner, which is our offset mask. The cell compares both with our own attention
# on random tensors shaped like the exercise, and prints the PyTorch version it ran on.
#
# Two cautions. PyTorch documents `CausalBias`, the class behind `causal_lower_right`, as a
# *prototype* feature, so its name and behaviour may still change between releases. And other kernels
# choose differently: FlashAttention's `causal=True` has aligned the mask to the lower-right corner
# since version 2.1 (its README and changelog say so; before 2.1 it aligned upper-left). Whenever
# the kernel, the library or its version changes, check the convention again with a cell like this one.

# %% [markdown] lang="zh"
# **PyTorch 自带的注意力**：当分数矩阵不是方阵时，`F.scaled_dot_product_attention(..., is_causal=True)` 把因果三角形对齐到左上角；对于接在缓存之后的分块，这恰恰是上面那个错误的掩码。`torch.nn.attention.bias.causal_lower_right` 则把三角形对齐到右下角，与我们带偏移的掩码一致。下面的单元格在与练习同形状的随机张量上，把两者分别与我们自己写的注意力比较，并打印运行时的 PyTorch 版本。
#
# 还有两点要当心。PyTorch 的文档把 `causal_lower_right` 背后的 `CausalBias` 类标为**原型**（prototype）功能，它的名字和行为在今后的版本中仍可能改变。其他算子的选择也未必相同：FlashAttention 从 2.1 版起，`causal=True` 把掩码对齐到右下角（见其 README 和更新日志；2.1 之前对齐到左上角）。只要换了算子、库或版本，就要用类似这样的单元格重新检查一遍约定。

# %%
from torch.nn.attention.bias import CausalBias, causal_lower_right


# [en] Plain attention with an explicit boolean mask (True = may read).
# [zh] 带显式布尔掩码的普通注意力（True 表示可以读取）。
def masked_attention(q, k, v, allowed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v


with torch.inference_mode():
    gen = torch.Generator().manual_seed(SEED)
    # [en] 3 new queries; 10 cached + 3 new keys.
    # [zh] 3 个新查询；10 个缓存的键加 3 个新键。
    q = torch.randn(1, 4, 3, 16, generator=gen)
    k = torch.randn(1, 4, 13, 16, generator=gen)
    v = torch.randn(1, 4, 13, 16, generator=gen)
    ours = masked_attention(q, k, v, causal_mask(10, 3))
    ours_wrong = masked_attention(q, k, v, local_triangle_mask(10, 3))
    sdpa_lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 13))
    sdpa_is_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)

# [en] The object behind causal_lower_right, and the word its documentation uses for it.
# [zh] causal_lower_right 返回的对象，以及文档中描述它的那个词。
assert isinstance(causal_lower_right(3, 13), CausalBias)
assert "prototype" in CausalBias.__doc__.lower()
sdpa_checks = {
    "lower_right vs ours": (sdpa_lower_right - ours).abs().max().item(),
    "is_causal=True vs ours": (sdpa_is_causal - ours).abs().max().item(),
    "is_causal=True vs upper-left": (sdpa_is_causal - ours_wrong).abs().max().item(),
}
print(f"torch {torch.__version__}")
assert sdpa_checks["lower_right vs ours"] < 1e-5
assert sdpa_checks["is_causal=True vs ours"] > 1e-2
assert sdpa_checks["is_causal=True vs upper-left"] < 1e-5
say_table(
    [
        ["`causal_lower_right(3, 13)`", "`causal_mask(10, 3)`", f"{sdpa_checks['lower_right vs ours']:.3e}"],
        ["`is_causal=True`", "`causal_mask(10, 3)`", f"{sdpa_checks['is_causal=True vs ours']:.3e}"],
        ["`is_causal=True`", "`local_triangle_mask(10, 3)`", f"{sdpa_checks['is_causal=True vs upper-left']:.3e}"],
    ],
    en=["PyTorch SDPA mask", "our attention with", "max abs difference"],
    zh=["PyTorch SDPA 的掩码", "我们的注意力所用掩码", "最大绝对差"],
)
