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
# this mistake needs a numerical check rather than a shape check. And without a cache ($P = 0$) the two
# masks are the same lower triangle, as the cell below asserts: a test that never uses a cache cannot
# tell them apart.

# %% [markdown] lang="zh"
# ## {{section}}. 由绝对位置推出掩码
#
# 设缓存中已有 $P$ 个位置，新来的分块（chunk）有 $C$ 个 token。分块内局部下标为 $i$ 的查询，其绝对位置是 $P + i$；键则覆盖位置 $0 \dots P + C - 1$。只要键不在查询的“未来”，查询就可以读取它：
#
# $$\mathrm{allowed}_{i,j} = [\, j \le P + i \,].$$
#
# 一种看似顺手的写法，是直接在 $[C, P + C]$ 分数矩阵的左上角取一个普通三角形。这等于把局部下标为 0 的查询当成了位置 0，于是新 token 看不到缓存中的大部分内容。两种掩码的形状都合法，代码照样能跑，变的只是数值。所以这类错误只能靠数值检查查出，光看形状是查不出来的。此外，没有缓存时（$P = 0$），两种掩码是同一个下三角（下面的单元格会断言这一点），所以从不使用缓存的测试区分不出这两种掩码。

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


# [en] Without a cache (past_len = 0) both masks are the ordinary lower triangle.
# [zh] 没有缓存时（past_len = 0），两种掩码都是普通的下三角。
lower_triangle = torch.ones(6, 6, dtype=torch.bool).tril()
assert torch.equal(causal_mask(0, 6), lower_triangle) and torch.equal(local_triangle_mask(0, 6), lower_triangle)
print(causal_mask(4, 2).int())

# %% [markdown] lang="en"
# The figure draws both masks for a cache of $P = 4$ positions and a chunk of $C = 2$ tokens, each panel
# titled with the call that builds it and its rule: `causal_mask(4, 2)`, $j \le P + i$, on the left, and
# `local_triangle_mask(4, 2)`, $j \le i$, on the right. Rows are the two new queries, labelled by their
# absolute positions (q4, q5); columns are the key positions $j$ = 0–5; a green cell marked 1 may be
# read, a white cell marked 0 may not. The offset mask (left) lets both new queries read the whole cache;
# the upper-left triangle (right) lets query 4 read only key 0, and query 5 only keys 0–1. The plotting code
# is folded.

# %% [markdown] lang="zh"
# 下图以缓存 $P = 4$ 个位置、分块 $C = 2$ 个 token 为例，画出两种掩码。每幅分图的标题是构造它的函数调用和它的规则：左图是 `causal_mask(4, 2)`，即 $j \le P + i$；右图是 `local_triangle_mask(4, 2)`，即 $j \le i$。每一行是一个新查询，纵轴标签 query position 意为“查询的绝对位置”，各行标为 q4、q5；每一列是一个键，横轴标签 key position j 意为“键的位置 $j$”，取值 0–5。标 1 的绿色格子表示可以读取，标 0 的白色格子表示不能读取。带偏移的掩码（左图）让两个新查询都能读到整个缓存；左上角三角形（右图）却只让查询 4 读到键 0，让查询 5 读到键 0–1。总标题 P = 4, C = 2 即这两个值。绘图代码已折叠。

# %% tags=["hide-input"]
def draw_masks(past_len: int, new_len: int):
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.6))
    panels = [
        (f"causal_mask({past_len}, {new_len}): j <= P + i", causal_mask(past_len, new_len)),
        (f"local_triangle_mask({past_len}, {new_len}): j <= i", local_triangle_mask(past_len, new_len)),
    ]
    for ax, (title, mask) in zip(axes, panels):
        ax.imshow(mask.int().numpy(), cmap="Greens", vmin=0, vmax=1.4)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key position j")
        ax.set_xticks(range(past_len + new_len))
        ax.set_yticks(range(new_len), [f"q{past_len + i}" for i in range(new_len)])
        for (i, j), value in np.ndenumerate(mask.int().numpy()):
            ax.text(j, i, "1" if value else "0", ha="center", va="center", fontsize=9)
    axes[0].set_ylabel("query position")
    fig.suptitle(f"P = {past_len}, C = {new_len}", fontsize=10)
    fig.tight_layout()
    return fig


mask_figure = draw_masks(4, 2)
# [en] Keys each query may read: offset mask 5 and 6 (the whole cache, then the causal part of the
# [en] chunk); upper-left triangle 1 and 2.
# [zh] 每个查询可读取的键数：带偏移的掩码为 5 和 6（整个缓存，再加上分块内的因果部分）；
# [zh] 左上角三角形为 1 和 2。
assert (causal_mask(4, 2).sum(dim=-1).tolist(), local_triangle_mask(4, 2).sum(dim=-1).tolist()) == ([5, 6], [1, 2])
MASKS_PNG = OUT / "masks.png"
mask_figure.savefig(MASKS_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# **PyTorch's own attention.** `F.scaled_dot_product_attention(..., is_causal=True)` (SDPA below)
# aligns the causal triangle to the upper-left corner when the score matrix is not square, which is
# exactly the wrong mask above for a chunk that follows a cache. `torch.nn.attention.bias.causal_lower_right` aligns it
# to the lower-right corner, which is our offset mask. The cell compares both with our own attention
# on random tensors (a cache of 10 positions, a chunk of 3 tokens), and prints the PyTorch version it ran on.
#
# Two cautions. PyTorch documents `CausalBias`, the class behind `causal_lower_right`, as a
# *prototype* feature, so its name and behaviour may still change between releases. And other kernels
# choose differently: FlashAttention's `causal=True` has aligned the mask to the lower-right corner
# since version 2.1 (its README and changelog say so; before 2.1 it aligned upper-left). Whenever
# the kernel, the library or its version changes, check the convention again with a cell like this one.

# %% [markdown] lang="zh"
# **PyTorch 自带的注意力**：分数矩阵不是方阵时，`F.scaled_dot_product_attention(..., is_causal=True)`（下称 SDPA）把因果三角形对齐到左上角。对于接在缓存之后的分块，这恰好就是上面那个错误的掩码。`torch.nn.attention.bias.causal_lower_right` 则把三角形对齐到右下角，与我们带偏移的掩码相同。下面的单元格在随机张量上（缓存 10 个位置，分块 3 个 token）把这两种对齐方式分别与我们自己写的注意力比较，并打印所用的 PyTorch 版本。
#
# 有两点需要注意。第一，PyTorch 文档把 `causal_lower_right` 背后的 `CausalBias` 类标为**原型**（prototype）功能，今后的版本可能改动它的名称和行为。第二，别的内核（kernel）未必采用同样的约定：FlashAttention 在 2.1 版之前把掩码对齐到左上角，从 2.1 版起 `causal=True` 改为对齐到右下角（见其说明文档和更新日志）。因此，每当更换内核、库或版本，都应该用类似下面的单元格重新核对一遍对齐方式。

# %%
from torch.nn.attention.bias import causal_lower_right


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

say(en=f"PyTorch version: `{torch.__version__}`.", zh=f"PyTorch 版本：`{torch.__version__}`。")
say_table(
    [["`causal_lower_right(3, 13)`", "`causal_mask(10, 3)`", f"{max_abs_err(sdpa_lower_right, ours):.3e}"],
     ["`is_causal=True`", "`causal_mask(10, 3)`", f"{max_abs_err(sdpa_is_causal, ours):.3e}"],
     ["`is_causal=True`", "`local_triangle_mask(10, 3)`", f"{max_abs_err(sdpa_is_causal, ours_wrong):.3e}"]],
    en=["PyTorch SDPA mask", "our attention with", "max abs error"],
    zh=["PyTorch SDPA 的掩码", "我们的注意力所用掩码", "最大绝对误差"],
)
# [en] Lower-right = our offset mask; is_causal=True = the upper-left triangle, and not our mask.
# [zh] 右下角对齐 = 我们带偏移的掩码；is_causal=True = 左上角三角形，而不是我们的掩码。
assert close(sdpa_lower_right, ours) and close(sdpa_is_causal, ours_wrong) and not close(sdpa_is_causal, ours)
