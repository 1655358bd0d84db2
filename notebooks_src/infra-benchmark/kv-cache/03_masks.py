# %% [markdown] lang="en"
# ## 3. Masks from absolute positions
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
# ## 3. 由绝对位置推出掩码
#
# 设缓存中已有 $P$ 个位置，新来的块（chunk）有 $C$ 个 token。块内第 $i$ 个查询（局部下标）的绝对位置是 $P + i$，键则覆盖位置 $0 \dots P + C - 1$。只要键不在查询的“未来”，查询就可以读取它：
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# 一个很容易犯的错误，是直接在 $[C, P + C]$ 分数矩阵的左上角画一个普通三角形。这等于把第 0 个局部查询当成了位置 0，于是新 token 看不到缓存中的大部分内容。两种掩码的形状都合法，代码照样能跑，变的只是数值。所以这类错误只能靠数值检查来发现，光看形状是查不出来的。

# %%
def causal_mask(past_len: int, new_len: int) -> torch.Tensor:
    """Offset causal mask, bool [new_len, past_len + new_len]: query i (absolute position past_len + i) reads key j iff j <= past_len + i."""
    query_pos = past_len + torch.arange(new_len)
    key_pos = torch.arange(past_len + new_len)
    return key_pos[None, :] <= query_pos[:, None]


def local_triangle_mask(past_len: int, new_len: int) -> torch.Tensor:
    """WRONG on purpose: the upper-left triangle, which forgets the past_len offset."""
    query_local = torch.arange(new_len)
    key_pos = torch.arange(past_len + new_len)
    return key_pos[None, :] <= query_local[:, None]


assert torch.equal(causal_mask(0, 6), torch.ones(6, 6, dtype=torch.bool).tril())   # no cache: the usual triangle
assert torch.equal(causal_mask(4, 2), torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool))
assert torch.equal(local_triangle_mask(4, 2), torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool))
print(causal_mask(4, 2).int())

# %% [markdown] lang="en"
# Side by side for the six-token example (cache 4, chunk 2): the offset mask lets both new queries read
# the whole cache; the upper-left triangle lets query 4 read only key 0, and query 5 only keys 0–1.

# %% [markdown] lang="zh"
# 下面把六个 token 例子（缓存 4 个位置，块长 2）的两种掩码并排画出：带偏移的掩码让两个新查询都能读到全部缓存；左上角三角形却只让查询 4 读到键 0，查询 5 读到键 0–1。

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


mask_figure = draw_masks(PAST_LEN, NEW_LEN)
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
# **练习**：缓存里有 10 个 token，下一块有 3 个。新查询的绝对位置是多少？分数张量的最后两维是多少？每个查询能读取几个键？如果用左上角三角形，又能读取几个？
#
# <details><summary>查看答案</summary>
#
# 三个查询位于位置 10、11、12，分数张量的最后两维是 `[3, 13]`（3 个查询，13 个键）。它们分别能读取 11、12、13 个键；只按局部下标构造的三角形只会让它们读取 1、2、3 个键。下一个单元格用断言验证了以上所有结论。
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
print("exercise checked")

# %% [markdown] lang="en"
# **PyTorch's own attention.** `F.scaled_dot_product_attention(..., is_causal=True)` aligns the causal
# triangle to the upper-left corner when the score matrix is not square, which is exactly the wrong
# mask above for a chunk that follows a cache. `torch.nn.attention.bias.causal_lower_right` aligns it
# to the lower-right corner, which is our offset mask. The cell compares both with our own attention
# on random tensors shaped like the exercise, and prints the PyTorch version it ran on: check again
# whenever you switch versions.

# %% [markdown] lang="zh"
# **PyTorch 自带的注意力**：当分数矩阵不是方阵时，`F.scaled_dot_product_attention(..., is_causal=True)` 把因果三角形对齐到左上角；对于接在缓存之后的块，这恰恰是上面那个错误的掩码。`torch.nn.attention.bias.causal_lower_right` 则把三角形对齐到右下角，与我们带偏移的掩码一致。下面的单元格用与练习同形状的随机张量，把两者分别与我们自己写的注意力比较，并打印所用的 PyTorch 版本：换了版本就要重新检查。

# %%
from torch.nn.attention.bias import causal_lower_right


def masked_attention(q, k, v, allowed):
    """Plain attention with an explicit boolean mask (True = may read)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v


with torch.inference_mode():
    gen = torch.Generator().manual_seed(SEED)
    q = torch.randn(1, 4, 3, 16, generator=gen)       # 3 new queries
    k = torch.randn(1, 4, 13, 16, generator=gen)      # 10 cached + 3 new keys
    v = torch.randn(1, 4, 13, 16, generator=gen)
    ours = masked_attention(q, k, v, causal_mask(10, 3))
    ours_wrong = masked_attention(q, k, v, local_triangle_mask(10, 3))
    sdpa_lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 13))
    sdpa_is_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)

sdpa_checks = {
    "lower_right vs ours": (sdpa_lower_right - ours).abs().max().item(),
    "is_causal=True vs ours": (sdpa_is_causal - ours).abs().max().item(),
    "is_causal=True vs upper-left": (sdpa_is_causal - ours_wrong).abs().max().item(),
}
print(f"torch {torch.__version__}")
for name, value in sdpa_checks.items():
    print(f"  max abs difference, {name:<30} {value:.3e}")
assert sdpa_checks["lower_right vs ours"] < 1e-5
assert sdpa_checks["is_causal=True vs ours"] > 1e-2
assert sdpa_checks["is_causal=True vs upper-left"] < 1e-5
