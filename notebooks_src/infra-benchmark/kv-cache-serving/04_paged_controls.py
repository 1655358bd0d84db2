# %% [markdown] lang="en"
# **Negative controls.** Three bookkeeping mistakes, each in a subclass that changes one method, each
# run through the check of the criterion it breaks. A control is caught when every check of its criterion
# that could see it fails. First, the paging itself:
#
# **Off-by-one block offset** (first criterion): `reserve` hands out the slot one past the block's
# fill count, so each position is written one slot too far while `read` reads the slots the block
# counts as filled.

# %% [markdown] lang="zh"
# **负对照**：三种记账错误，各自写成只改动一个方法的子类，都交给它所违反的那条判据的检查。判据中凡是能发现这个错误的检查都必须失败，才算查出了这个负对照。第一个错在分页本身：
#
# **物理块内偏移差一**（第一条判据）：`reserve` 分配的槽位比物理块的已填计数多一，于是每个位置都往后多偏了一个槽位，而 `read` 读取的仍是物理块记为已填的那些槽位。

# %%
class OffByOneOffset(PagedCache):
    def reserve(self, seq, n):
        addresses = super().reserve(seq, n)
        # [en] WRONG on purpose: one slot too far.
        # [zh] 故意写错：多偏了一个槽位。
        return (addresses + 1) % (self.pool.num_blocks * self.pool.block_size)


off_by_one = check_paged(OffByOneOffset(BlockPool(cfg, 32, BLOCK_SIZE)))

# %% [markdown] lang="en"
# **Second, a reused block not cleared** (second criterion): `release` returns a block to the free list without
# resetting its fill count; its next owner appends behind slots it never wrote, and reads them. Stale
# fill counts also make sequences take more blocks than the scheduler reserved for them. With the
# normal pool this bug crashes (a `RuntimeError` from an exhausted pool, which says nothing about what
# went wrong); we give it twice the blocks so that you can see the wrong numbers instead.

# %% [markdown] lang="zh"
# **第二个：复用的物理块没有清理**（第二条判据）：`release` 把物理块放回空闲列表，却没有把它的已填计数清零；下一个持有者会接在并非自己写入的槽位之后追加，并读取这些槽位。过期的已填计数还会让序列占用的物理块超过调度器为它预留的数量。用正常大小的池，这个错误会让运行直接崩溃（物理块耗尽时的 `RuntimeError`，它说明不了错在哪里）；我们给它多配一倍的物理块，以便看到它算出的错误数值。

# %%
class NotClearedPool(BlockPool):
    def clear(self, block):
        for t in self.k + self.v:
            # [en] WRONG on purpose: the fill count is kept.
            # [zh] 故意写错：保留了已填计数。
            t[block] = float("nan")


not_cleared = check_reuse(NotClearedPool(cfg, 2 * REUSE_BLOCKS, BLOCK_SIZE))

# %% [markdown] lang="en"
# **Third, a shared block written in place** (third criterion): no copy-on-write; the first sequence to continue
# after the fork appends into the block it shares with the other, which then reads a token that is not
# its own.

# %% [markdown] lang="zh"
# **第三个：原地写入共享的物理块**（第三条判据）：不做写时复制；分叉后先继续生成的那条序列，会把 token 追加到与另一条序列共享的物理块里，另一条序列随之读到不属于自己的 token。

# %%
class NoCopyOnWrite(PagedCache):
    def copy_on_write(self, seq):
        # [en] WRONG on purpose: write into the shared block.
        # [zh] 故意写错：直接写入共享的物理块。
        pass


in_place = check_shared(NoCopyOnWrite(BlockPool(cfg, 16, BLOCK_SIZE)))

# %% [markdown] lang="en"
# The verdicts, side by side. The first control is caught by the comparison with the `torch.cat` cache;
# the second fails the bit-exact comparison with the contiguous cache, the comparison with the alone
# runs, and the reservation check (its requests held more blocks than were reserved for them); the third fails both the
# bit-exact comparison with the contiguous cache and the comparison with full recomputation.

# %% [markdown] lang="zh"
# 三个负对照的结论并列如下。第一个负对照由与 `torch.cat` 缓存的比较查出；第二个负对照同时通不过与连续缓存的逐比特比较、与单独运行的比较，以及预留检查（它的请求持有的物理块超过了为它们预留的数量）；第三个负对照同时通不过与连续缓存的逐比特比较和与完整重算的比较。

# %%
PAGED_CONTROLS = {
    "off_by_one_block_offset": {"max_abs_logit_err": off_by_one["max_abs_logit_err"], "finite": off_by_one["finite"],
                                "detected": not off_by_one["close_vs_cat"]},
    "reused_block_not_cleared": {"max_abs_logit_err": not_cleared["max_abs_logit_err_vs_contiguous"], "finite": not_cleared["finite"],
                                 "detected": not (not_cleared["bit_exact_vs_contiguous"] or not_cleared["close_to_alone"]
                                                  or not_cleared["within_reservation"])},
    "shared_block_written_in_place": {"max_abs_logit_err": in_place["max_abs_logit_err_vs_full"], "finite": in_place["finite"],
                                      "detected": not (in_place["bit_exact_vs_contiguous"] or in_place["close_to_full"])},
}
say_table([[f"`{name}`", f"{c['max_abs_logit_err']:.3e}".replace("nan", "NaN"), f"`{c['finite']}`", f"`{c['detected']}`"] for name, c in PAGED_CONTROLS.items()],
          en=["broken variant", "max abs logit error", "finite", "caught"],
          zh=["改坏的版本", "logits 的最大绝对误差", "数值有限", "查出"])
# [en] All caught. The NaN pool exposes the unwritten slot and the stale slots of a reused block; writing into a
# [en] shared block gives finite, wrong numbers, which only the comparison catches.
# [zh] 全部查出。NaN 池暴露了未写入的槽位，以及复用物理块中过期的槽位；写入共享物理块给出的是有限但错误的数，
# [zh] 只有比较才能查出。
assert [(c["detected"], c["finite"]) for c in PAGED_CONTROLS.values()] == [(True, False), (True, False), (True, True)]
