# %% [markdown] lang="en"
# **Negative controls.** Two bookkeeping mistakes, each in a subclass that changes one method, each
# run through the check of the criterion it breaks.
#
# **Off-by-one block offset** (first criterion): `reserve` hands out the slot one past the block's
# fill count, so each position is written one slot too far while `read` reads the slots the block
# counts as filled. Slot 0 of each block is read, yet none of the block's own positions is written there
# (it holds the pool's initial NaN, or a spill), and a block's last position spills into slot 0 of the
# next *physical* block. Caught when the comparison with the `torch.cat` cache fails.
#
# **A shared block written in place** (second criterion): no copy-on-write; the first sequence to continue
# after the fork appends into the block it shares with the other, which then reads a token that is not
# its own. Caught when it fails both the bit-exact comparison with the contiguous cache and the comparison
# with full recomputation.
#
# (A third mistake, a reused block not cleared, needs requests that come and go: section 8 runs it next to
# the check it breaks.)

# %% [markdown] lang="zh"
# **负对照**：两种记账错误各写成一个只改动一个方法的子类，分别交给它所违反的那条判据去检查。
#
# **物理块内偏移差一**（第一条判据）：`reserve` 分配的槽位比物理块的已填计数多一，于是每个位置都往后多偏了一个槽位，而 `read` 读取的仍是物理块记为已填的那些槽位。每个物理块的 0 号槽位都被读取，可这个物理块自己的位置没有一个写在那里（那里是池初始的 NaN，或者是溢出的值）；物理块的最后一个位置则溢出到下一个**物理**块的 0 号槽位。只要与 `torch.cat` 缓存的比较失败，就算查出。
#
# **原地写入共享的物理块**（第二条判据）：不做写时复制；分叉后先继续生成的那条序列，会把 token 追加到与另一条序列共享的物理块里，另一条序列随之读到不属于自己的 token。它必须既通不过与连续缓存的逐比特比较，也通不过与完整重算的比较，才算查出。
#
# （第三种错误是复用的物理块没有清理，它要有陆续到达又陆续离开的请求才会出现：第 8 节把它放在它所违反的检查旁边运行。）

# %%
class OffByOneOffset(PagedCache):
    def reserve(self, seq, n):
        addresses = super().reserve(seq, n)
        # [en] WRONG on purpose: one slot too far.
        # [zh] 故意写错：多偏了一个槽位。
        return (addresses + 1) % (self.pool.num_blocks * self.pool.block_size)


off_by_one = check_paged(OffByOneOffset(BlockPool(cfg, 32, BLOCK_SIZE)))


class NoCopyOnWrite(PagedCache):
    def copy_on_write(self, seq):
        # [en] WRONG on purpose: write into the shared block.
        # [zh] 故意写错：直接写入共享的物理块。
        pass


in_place = check_shared(NoCopyOnWrite(BlockPool(cfg, 16, BLOCK_SIZE)))

# [en] The verdicts, side by side.
# [zh] 两个负对照的结论并列如下。
PAGED_CONTROLS = {
    "off_by_one_block_offset": {"max_abs_logit_err": off_by_one["max_abs_logit_err"], "finite": off_by_one["finite"],
                                "detected": not off_by_one["close_vs_cat"]},
    "shared_block_written_in_place": {"max_abs_logit_err": in_place["max_abs_logit_err_vs_full"], "finite": in_place["finite"],
                                      "detected": not (in_place["bit_exact_vs_contiguous"] or in_place["close_to_full"])},
}
say_table([[f"`{name}`", f"{c['max_abs_logit_err']:.3e}".replace("nan", "NaN"), f"`{c['finite']}`", f"`{c['detected']}`"] for name, c in PAGED_CONTROLS.items()],
          en=["broken variant", "max abs logit error", "finite", "caught"],
          zh=["改坏的版本", "logits 的最大绝对误差", "数值有限", "查出"])
# [en] Both caught. The NaN pool exposes the unwritten slot; writing into a shared block gives finite, wrong numbers,
# [en] which only the comparison catches.
# [zh] 全部查出。NaN 池暴露了未写入的槽位；写入共享物理块给出的是有限但错误的数，只有比较才能查出。
assert [(c["detected"], c["finite"]) for c in PAGED_CONTROLS.values()] == [(True, False), (True, True)]
