# %% [markdown] lang="en"
# The bookkeeping on a small example, before any model runs: a pool of 8 blocks of 4 positions.
# Sequence `s` reserves 6 positions, then 1 more. It takes two blocks from the free list, fills the
# first one slot by slot and continues in the second, so its addresses are `block * 4 + slot` for slots
# 0 to 3 of its first block and 0 to 2 of its second, in the order of its positions; `addresses` lists
# the same ones. Then `t` forks from `s` and reserves one position: the full first block stays shared
# (reference count 2), and the partly filled second block is copied before `t` writes into it.

# %% [markdown] lang="zh"
# 先不运行模型，用一个小例子看看这些记账是怎样进行的：池中有 8 个物理块，每个物理块 4 个位置。序列 `s` 先预留 6 个位置，再预留 1 个。它从空闲列表中取出两个物理块，逐个槽位填满第一个，再接着填第二个。所以它的地址依次是 `block * 4 + slot`：先是第一个物理块的槽位 0–3，然后是第二个物理块的槽位 0–2，顺序与位置一致；`addresses` 列出的也正是这些地址。接着 `t` 从 `s` 分叉出来并预留一个位置：已满的第一个物理块仍然共享（引用计数为 2），未填满的第二个物理块则在 `t` 写入之前被复制。

# %%
demo_pool = BlockPool(cfg, num_blocks=8, block_size=4, seed=SEED + 7)
demo = PagedCache(demo_pool)
demo.add("s")
s_addresses = torch.cat((demo.reserve("s", 6), demo.reserve("s", 1)))
first, second = demo.tables["s"]
demo.fork("s", "t")
t_address = demo.reserve("t", 1)
say_table([[f"`{seq}`", str(table), str([demo_pool.fill[b] for b in table]), str([demo_pool.refs[b] for b in table]),
            str(demo.addresses(seq).tolist())] for seq, table in demo.tables.items()],
          en=["sequence", "block table", "fill counts", "reference counts", "addresses"],
          zh=["序列", "块表", "已填计数", "引用计数", "地址"])
# [en] s: slots 0-3 of its first block, then 0-2 of its second, in the order of its positions.
# [zh] s：先是第一个物理块的槽位 0–3，再是第二个物理块的槽位 0–2，顺序与位置一致。
expected_s = [first * 4 + slot for slot in range(4)] + [second * 4 + slot for slot in range(3)]
assert s_addresses.tolist() == expected_s and demo.addresses("s").tolist() == expected_s
# [en] The full block is shared; the partly filled one was copied, and t wrote into the copy's next slot.
# [zh] 已满的物理块被共享；未填满的那个被复制，t 写入的是副本的下一个槽位。
copy_block = demo.tables["t"][1]
shared = demo.tables["t"] == [first, copy_block] and demo_pool.refs[first] == 2
copied = copy_block != second and demo_pool.refs[second] == 1 and t_address.tolist() == [copy_block * 4 + 3]
assert shared and copied

# %% [markdown] lang="en"
# The figure draws this state. On the left, the logical blocks of `s` and `t`, each labelled with the
# positions it covers (`s: logical 1, pos 4–6`: logical block 1 of `s`, positions 4 to 6); on the right, the
# pool's eight physical blocks, each labelled with its number, its reference count and its fill count
# (`phys 5: refs 2, fill 4`), or `free`. An arrow is one block-table entry. The orange block is shared:
# both tables point to it (reference count 2). The green blocks are held by one sequence each: `s`'s
# partly filled second block (positions 4–6, 3 of its 4 slots), and the copy that copy-on-write made for `t`, one slot fuller. The grey blocks
# are free.

# %% [markdown] lang="zh"
# 下图画出的就是这个状态。左边是 `s` 和 `t` 的逻辑块，每个框标出它属于哪条序列、是第几个逻辑块（logical）、覆盖哪些位置（pos），例如 `s: logical 1, pos 4–6` 表示 `s` 的逻辑块 1，存放位置 4–6。右边是池中的八个物理块（phys），每个框标出物理块编号、引用计数（refs）和已填计数（fill），例如 `phys 5: refs 2, fill 4`；空闲的物理块标为 free。每个箭头是块表中的一项。橙色的物理块是共享的：两张块表都指向它（引用计数为 2）。绿色的物理块各自只被一条序列持有：一个是 `s` 未填满的第二个物理块（位置 4–6，4 个槽位用了 3 个），另一个是写时复制为 `t` 做的副本，比原来多填了一个槽位。灰色的物理块是空闲的。标题的意思是：块表把逻辑块映射到物理块（池中有 8 个物理块，每个 4 个位置）。

# %%
def draw_block_tables(cache):
    pool = cache.pool
    fig, ax = plt.subplots(figsize=(7, 3.6))
    # [en] One row per physical block on the right; logical blocks on the left, a blank row between sequences.
    # [zh] 右边每个物理块占一行；左边是逻辑块，不同序列之间空一行。
    y_physical = {block: pool.num_blocks - 1 - block for block in range(pool.num_blocks)}
    y, y_logical = pool.num_blocks - 1, {}
    for seq, table in cache.tables.items():
        for logical in range(len(table)):
            y_logical[seq, logical] = y
            y -= 1
        y -= 1
    for block, y in y_physical.items():
        color = "#dd8452" if pool.refs[block] > 1 else "#55a868" if pool.refs[block] == 1 else "#dddddd"
        ax.add_patch(plt.Rectangle((4, y - 0.35), 2.4, 0.7, color=color))
        label = f"phys {block}: refs {pool.refs[block]}, fill {pool.fill[block]}" if pool.refs[block] else f"phys {block}: free"
        ax.text(5.2, y, label, ha="center", va="center", fontsize=8)
    for (seq, logical), y in y_logical.items():
        block = cache.tables[seq][logical]
        low = logical * pool.block_size
        ax.add_patch(plt.Rectangle((0, y - 0.35), 2.2, 0.7, fill=False))
        ax.text(1.1, y, f"{seq}: logical {logical}, pos {low}\N{EN DASH}{low + pool.fill[block] - 1}", ha="center", va="center", fontsize=8)
        ax.annotate("", xy=(4, y_physical[block]), xytext=(2.2, y), arrowprops={"arrowstyle": "->", "color": "#444444"})
    ax.set_xlim(-0.2, 6.6)
    ax.set_ylim(-0.6, pool.num_blocks - 0.4)
    ax.axis("off")
    ax.set_title(f"block tables: logical block -> physical block (pool of {pool.num_blocks} blocks of {pool.block_size})", fontsize=9)
    fig.tight_layout()
    return fig


BLOCK_TABLE_PNG = OUT / "block_table.png"
draw_block_tables(demo).savefig(BLOCK_TABLE_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# When both sequences are freed, every block must be back in the free list exactly once, with no filled
# slot and no holder: `free` releases each table entry once, and the shared block, held twice, returns
# only with its second release.

# %% [markdown] lang="zh"
# 两条序列都释放之后，每个物理块都必须恰好一次回到空闲列表，没有已填的槽位，也没有持有者：`free` 对块表中的每一项各释放一次，被持有两次的共享物理块要到第二次释放时才回到空闲列表。

# %%
demo.free("s")
demo.free("t")
print(sorted(demo_pool.free), demo_pool.fill, demo_pool.refs)
assert sorted(demo_pool.free) == list(range(8)) and not any(demo_pool.fill) and not any(demo_pool.refs)
