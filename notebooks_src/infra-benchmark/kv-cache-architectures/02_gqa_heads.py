# %% [markdown] lang="en"
# The figure draws the rule from the code itself: it expands a tensor that holds each K/V head's own index
# and reads off which K/V head every query head gets. The third panel shows a realistic mistake, kept for a
# negative control below: `tile_kv` uses `repeat`, which lays the heads out as 0, 1, 0, 1. With one K/V head
# (MQA) or one per query head (MHA) tiling and interleaving coincide, so the mistake only shows with real
# groups. The drawing code is folded.

# %% [markdown] lang="zh"
# 下图直接由代码画出这条规则：把一个存着各 K/V 头自身编号的张量扩展开，读出每个查询头分到的是哪个 K/V 头。第三幅图展示一个现实中很容易犯的错误，留给下文的负对照使用：`tile_kv` 用的是 `repeat`，它把头排成 0、1、0、1。当只有一个 K/V 头（MQA）或每个查询头各有一个 K/V 头（MHA）时，平铺和交错的结果相同，所以只有真正分组时，这个错误才会显现。画图的代码已折叠。

# %%
def tile_kv(x, groups: int):                     # [B, H_kv, T, D] -> [B, H_kv * groups, T, D]
    # [en] WRONG on purpose: query head h reads K/V head h % H_kv.
    # [zh] 故意写错：查询头 h 读取第 h % H_kv 个 K/V 头。
    return x.repeat(1, groups, 1, 1)


def kv_head_read(expand, kv_heads: int, heads: int = 4) -> list[int]:
    # [en] The K/V head each query head reads, after `expand`.
    # [zh] 经过 `expand` 之后，每个查询头读取的是哪个 K/V 头。
    return expand(torch.arange(kv_heads).view(1, kv_heads, 1, 1), heads // kv_heads).flatten().tolist()


PANELS = {"MHA": (repeat_kv, 4), "GQA": (repeat_kv, 2), "GQA, tile_kv": (tile_kv, 2), "MQA": (repeat_kv, 1)}
HEAD_MAP = {name: kv_head_read(expand, kv_heads) for name, (expand, kv_heads) in PANELS.items()}
# [en] Interleaving: query head h reads K/V head h // g. Tiling: h % H_kv, the same only for MHA and MQA.
# [zh] 交错：查询头 h 读取第 h // g 个 K/V 头。平铺：读取第 h % H_kv 个，只在 MHA 和 MQA 时与交错相同。
assert HEAD_MAP == {name: [h // (4 // kv) if expand is repeat_kv else h % kv for h in range(4)]
                    for name, (expand, kv) in PANELS.items()}

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 2.4))
for ax, (name, reads) in zip(axes, HEAD_MAP.items()):
    expand, kv_heads = PANELS[name]
    group = 4 // kv_heads
    # [en] Each K/V head is drawn under the query heads of its group.
    # [zh] 每个 K/V 头画在它所在组的查询头下方。
    kv_x = [j * group + (group - 1) / 2 for j in range(kv_heads)]
    for h, j in enumerate(reads):
        ax.plot([h, kv_x[j]], [1, 0], color="tab:red" if expand is tile_kv else "tab:blue",
                linestyle="--" if expand is tile_kv else "-", zorder=1)
    ax.scatter(range(4), [1] * 4, s=420, marker="s", color="white", edgecolor="black", zorder=2)
    ax.scatter(kv_x, [0] * kv_heads, s=420, marker="s", color="tab:orange", edgecolor="black", zorder=2)
    for h in range(4):
        ax.text(h, 1, f"q{h}", ha="center", va="center", fontsize=8, zorder=3)
    for j, x in enumerate(kv_x):
        ax.text(x, 0, f"kv{j}", ha="center", va="center", fontsize=8, zorder=3)
    ax.set_title(f"{name}\n$H_{{kv}} = {kv_heads}$", fontsize=9)
    ax.set_xlim(-0.7, 3.7)
    ax.set_ylim(-0.5, 1.5)
    ax.axis("off")
fig.tight_layout()
GQA_PNG = OUT / "gqa_heads.png"
fig.savefig(GQA_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: one attention layer in each of four designs. Each panel's title names the design ("GQA, tile_kv" is
# GQA expanded with `tile_kv`) and gives $H_{kv}$, the number of K/V heads the cache keeps per layer. Top row,
# white: the four query heads `q0` to `q3`. Bottom row, orange: the K/V heads `kv0`, `kv1`, ... that the cache
# keeps. A line joins each query head to the K/V head it reads: solid blue for `repeat_kv` (interleaving, the
# right rule), dashed red for `tile_kv` (tiling, the mistake): the same two K/V heads as GQA, but query heads 1
# and 2 read the wrong one.*

# %% [markdown] lang="zh"
# *图：四种设计下的一个注意力层。每幅分图的标题先写设计名称（MHA；GQA；用 `tile_kv` 扩展的 GQA，即 GQA, tile_kv；MQA），下面的 $H_{kv}$ 是缓存每层保存的 K/V 头数。上排白色方块是四个查询头 `q0`–`q3`；下排橙色方块是缓存保存的 K/V 头 `kv0`、`kv1`……。每条连线把一个查询头连到它读取的 K/V 头：蓝色实线是 `repeat_kv`（交错，正确的规则），红色虚线是 `tile_kv`（平铺，错误的做法）。平铺时 K/V 头同样是两个，但查询头 1 和 2 读错了头。*
