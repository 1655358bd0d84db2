# %% [markdown] lang="en"
# What the pool must do, in one story (the demo after the class runs it): a request finishes and leaves its
# full blocks in the cache; a later request with the same start finds them and computes only the rest; when
# the pool runs out of free blocks, a cached block that nobody holds is evicted to make room.
#
# `PrefixPool` is that `BlockPool` with a content index. It keeps more records: the index (block hash
# → block, and back) and, in release order, the cached blocks that no request holds (`evictable`, an
# `OrderedDict` used as an LRU queue); and it counts evictions.
#
# * `lookup(prompt)` walks the prompt's block hashes and stops at the first one missing from the index: a
#   later block cannot be used without the ones before it. It hashes `prompt[:-1]`, because the last
#   prompt token must always be computed: its logits choose the first new token.
# * `publish` enters a full block into the index.
# * Three methods of the pool change. `hold` also takes a block out of the LRU queue, since a block that a
#   request holds must not be evicted. `reclaim` (a block nobody holds any more) puts an indexed block into
#   the LRU queue, its K/V kept, and empties and frees any other block as before. `allocate`, when no block
#   is free, first **evicts** the least recently released cached block: removes it from the index, empties
#   it (NaN again, fill count 0) and frees it. When nothing can be evicted either, every block is held by a
#   running request, and the pool raises `PoolFull`.
#
# The block tables, and the K/V going into and out of the blocks, are the serving notebook's `PagedCache`,
# unchanged: a request that hits starts its table with the hit blocks (`add(rid, hits)`), and `reserve`
# takes fresh blocks for everything after them.
#
# <details><summary>Where this differs from vLLM (background, not needed for what follows)</summary>
#
# (vLLM here means its V1 engine.) We publish only the full blocks of a prompt;
# vLLM also publishes each block of generated tokens once it is full, so that the next turn of a chat,
# which sends the whole conversation again, finds the previous answer in the cache too. And we keep two
# lists: blocks that hold nothing (the free list, used first) and cached blocks that nobody holds (the LRU
# queue, evicted only when the free list is empty). vLLM keeps one queue of all blocks nobody holds, in
# eviction order: a released block, cached or not, goes to its back, and allocation takes the block at its
# front, evicting it from the index if it was cached. Our two lists keep cached blocks as long as any empty
# block is left, closer to SGLang's radix tree, which evicts cached entries only when memory runs out.
#
# </details>

# %% [markdown] lang="zh"
# 池要做的事可以概括为下面这个过程（类定义之后的演示就按这个过程运行）：一个请求结束后，把它填满的物理块留在缓存中；之后开头相同的请求找到这些物理块，只计算其余部分；池中没有空闲物理块时，淘汰一个没有请求持有的已缓存物理块，腾出位置。
#
# `PrefixPool` 就是带内容索引的 `BlockPool`。它多维护几项记录：索引（块哈希 → 物理块，以及反向映射），以及按释放顺序排列、没有任何请求持有的已缓存物理块（`evictable`，一个当作 LRU 队列使用的 `OrderedDict`）；它还统计淘汰次数。
#
# * `lookup(prompt)` 依次检查提示的各个块哈希，遇到第一个不在索引中的就停下：没有前面的物理块，后面的物理块也用不上。它对 `prompt[:-1]` 计算块哈希，因为提示的最后一个 token 必须计算：要靠它的 logits 选出第一个新 token。
# * `publish` 把一个填满的物理块登记进索引。
# * 池的三个方法有所改变。`hold` 还要把物理块移出 LRU 队列，因为请求持有的物理块不能被淘汰。`reclaim` 处理已没有请求持有的物理块：在索引中的排进 LRU 队列，保留其中的 K/V；不在索引中的仍像原来一样清空，放回空闲列表。`allocate` 在没有空闲物理块时，先**淘汰**释放得最早的那个已缓存物理块：把它从索引中删掉，清空（重新填满 NaN，已填计数归 0），再放回空闲列表。如果连可淘汰的物理块也没有，说明所有物理块都被运行中的请求持有，池就抛出 `PoolFull`。
#
# 块表，以及 K/V 写入、读出物理块的过程，都沿用服务笔记本的 `PagedCache`，不做改动：命中的请求以命中的物理块开始它的块表（`add(rid, hits)`），之后的一切都由 `reserve` 取新的物理块来存放。
#
# <details><summary>与 vLLM 的不同之处（背景知识，读后文不需要）</summary>
#
# 以下说的是 vLLM 的 V1 引擎。我们只登记提示中填满的物理块；vLLM 还会在生成的 token 填满一个物理块时把它登记进索引，这样多轮对话中的下一个请求（它会把整段对话再发送一遍）也能在缓存中找到上一轮的回答。另外，我们维护两个列表：什么都没存的物理块（空闲列表，优先使用），以及没有请求持有的已缓存物理块（LRU 队列，只有空闲列表用完时才从中淘汰）。vLLM 则只维护一个队列，按淘汰顺序存放所有没有请求持有的物理块：释放的物理块无论是否已缓存，都排到队尾；分配时取队首的物理块，如果它已缓存，就把它从索引中删掉。我们的两个列表让已缓存的物理块保留到空物理块用完为止，这一点更接近 SGLang 的基数树：它也只在内存不够时才淘汰已缓存的内容。
#
# </details>

# %%
# [en] Raised when the pool cannot give a block: every block is held by a running request.
# [zh] 池给不出物理块时抛出：所有物理块都被运行中的请求持有。
class PoolFull(RuntimeError):
    pass


class PrefixPool(BlockPool):
    def __init__(self, config, num_blocks: int, block_size: int = BLOCK_SIZE):
        super().__init__(config, num_blocks, block_size)
        # [en] block hash -> block, and back; cached blocks nobody holds, least recently released first.
        # [zh] 块哈希 → 物理块，以及反向映射；没有请求持有的已缓存物理块，释放得最早的排在最前。
        self.index, self.hash_of = {}, {}
        self.evictable = OrderedDict()
        self.evictions = 0

    def block_hashes(self, tokens):
        return chained_block_hashes(tokens, self.block_size)

    def lookup(self, prompt):
        usable, hits = prompt[:-1], []
        for block_hash in self.block_hashes(usable):
            if block_hash not in self.index:
                break
            hits.append(self.index[block_hash])
        return hits, len(hits) * self.block_size

    def publish(self, block, block_hash):
        if block_hash not in self.index:
            self.index[block_hash], self.hash_of[block] = block, block_hash

    def hold(self, block):
        super().hold(block)
        self.evictable.pop(block, None)

    def reclaim(self, block):
        if block in self.hash_of:
            self.evictable[block] = None
        else:
            super().reclaim(block)

    def allocate(self) -> int:
        if not self.free:
            self.evict()
        return super().allocate()

    def evict(self):
        if not self.evictable:
            raise PoolFull({"blocks": self.num_blocks, "held": sum(r > 0 for r in self.refs)})
        block, _ = self.evictable.popitem(last=False)
        del self.index[self.hash_of.pop(block)]
        super().reclaim(block)
        self.evictions += 1

    def available(self) -> int:
        return len(self.free) + len(self.evictable)

# %% [markdown] lang="en"
# The bookkeeping on a pool of 6 blocks, before any model runs. Request `r1` reserves the 13 positions of
# prompt `a` above, which takes 4 blocks, and publishes its 3 full blocks. When it finishes, the 3 full
# blocks stay indexed and become evictable, the last block of the chain first (`free` releases a table's
# last block first, as vLLM does, so that eviction takes a chain's tail before its head); the partly filled
# fourth block goes back to the free list. Request `r2` with prompt `b` then finds the first two blocks
# (8 tokens) and reserves its other 6 positions in 2 fresh blocks. Request `r3` wants 2 blocks while `r2`
# still runs: the pool has 1 free block left, so it evicts the one evictable block, `r1`'s third.

# %% [markdown] lang="zh"
# 先在一个只有 6 个物理块的池上看看这些记账，此时还不运行模型。请求 `r1` 为上面提示 `a` 的 13 个位置调用 `reserve`，取走 4 个物理块，并登记其中 3 个填满的物理块。它结束后，这 3 个填满的物理块仍在索引中，变成可淘汰的，链尾的物理块排在最前（`free` 与 vLLM 一样从块表的最后一个物理块开始释放，这样淘汰时先去掉链尾，再去掉链头）；未填满的第四个物理块回到空闲列表。接着，提示为 `b` 的请求 `r2` 找到了前两个物理块（8 个 token），其余 6 个位置预留在 2 个新的物理块里。`r2` 仍在运行时，请求 `r3` 需要 2 个物理块：池中只剩 1 个空闲物理块，于是淘汰唯一可淘汰的那个物理块，即 `r1` 的第三个物理块。

# %%
demo = PagedCache(PrefixPool(cfg, num_blocks=6))
demo.add("r1")
demo.reserve("r1", len(hash_demo["a"]))
r1 = list(demo.tables["r1"])
for block, block_hash in zip(r1, demo.pool.block_hashes(hash_demo["a"])):
    demo.pool.publish(block, block_hash)
demo.free("r1")
hits, hit_tokens = demo.pool.lookup(hash_demo["b"])
demo.add("r2", hits)
demo.reserve("r2", len(hash_demo["b"]) - hit_tokens)
demo.add("r3")
demo.reserve("r3", 2 * BLOCK_SIZE)
say_table([["`r1`", str(r1), "-"], ["`r2`", str(demo.tables["r2"]), str(hit_tokens)], ["`r3`", str(demo.tables["r3"]), "-"]],
          en=["request", "block table (`r1`'s while it ran)", "tokens found in the cache"],
          zh=["请求", "块表（`r1` 一行为它运行时的块表）", "在缓存中找到的 token 数"])
say(en=f"Reference counts {demo.pool.refs}; evictions {demo.pool.evictions}; index holds {len(demo.pool.index)} blocks.",
    zh=f"引用计数 {demo.pool.refs}；淘汰次数 {demo.pool.evictions}；索引中有 {len(demo.pool.index)} 个物理块。")
assert hits == r1[:2] and hit_tokens == 8 and demo.pool.evictions == 1 and r1[2] in demo.tables["r3"] and len(demo.pool.index) == 2
