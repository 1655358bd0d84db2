# %% [markdown] lang="en"
# ## 4. A block pool with a content index
#
# Many requests to a chat service start with the same system prompt; a retrieval service puts the same
# documents into many prompts. Under a causal mask the keys and values at position $i$ depend only on
# tokens $0 \dots i$ (with the same weights and the same position rule). So two requests whose first $n$
# tokens agree need the same K/V at those $n$ positions, and the second one could take them from the
# first instead of computing them again. This is **prefix caching**. A serving system needs three things
# for it:
#
# * **a content index**: given a new prompt, find the blocks that already hold K/V for its prefix. As in
#   vLLM's automatic prefix caching, only *full* blocks are indexed, and each gets a **block hash** computed
#   from its own tokens *and the hash of the block before it*. The hashes form a chain, so a block's hash
#   identifies its whole prefix, not just its own tokens. (SGLang's RadixAttention keeps a radix tree over
#   token sequences instead, and by default matches at the granularity of single tokens, a page size of 1,
#   so it can share a prefix that ends inside what would be a block here; the principle is the same.)
# * **reference counts**: a block may serve several running requests at once; it can be reused for other
#   content only when no request holds it.
# * **eviction**: a finished request's blocks keep their K/V and stay in the index, in case another request
#   needs them. When the pool runs out of free blocks, the cached block that nobody holds and that was
#   released longest ago (least recently used, LRU) is evicted: removed from the index and reused.
#
# The hash is SHA-256 over the previous hash and the block's token IDs, so two different prefixes
# practically never share a hash; vLLM offers SHA-256 for the same reason. Anything else that changes the
# K/V (another model, a LoRA adapter, an image in the prompt) would have to enter the hash too.

# %% [markdown] lang="zh"
# ## 4. 带内容索引的物理块池
#
# 聊天服务收到的许多请求都以同一段系统提示开头；检索增强的服务会把同样的文档放进许多提示里。在因果掩码下，位置 $i$ 上的 K/V 只取决于 token $0 \dots i$（前提是权重相同、位置规则相同）。因此，两个请求只要前 $n$ 个 token 相同，这 $n$ 个位置上需要的 K/V 就相同，第二个请求完全可以直接拿第一个请求算好的，而不必再算一遍。这就是**前缀缓存**（prefix caching）。推理服务系统为此需要三样东西：
#
# * **内容索引**：拿到一个新提示时，找出已经存有它前缀 K/V 的那些物理块。与 vLLM 的自动前缀缓存一样，只有**填满的**物理块才进入索引，每个物理块都有一个**块哈希**，它由这个物理块自己的 token **和前一个物理块的块哈希**一起算出。这些哈希连成一条链，所以一个物理块的块哈希标识的是它的整个前缀，而不只是它自己的几个 token。（SGLang 的 RadixAttention 改用一棵建立在 token 序列上的基数树，默认按单个 token 的粒度匹配，即页大小为 1，所以在这里会落在某个物理块中间的前缀，它也能共享；原理相同。）
# * **引用计数**：一个物理块可能同时服务好几个运行中的请求；只有没有任何请求持有它时，才能拿它去存别的内容。
# * **淘汰**：请求结束后，它的物理块保留着 K/V，仍留在索引里，以备别的请求用到。当池中没有空闲物理块时，就在没有任何请求持有的已缓存物理块中，淘汰释放得最早的那个（最近最少使用，LRU）：把它从索引中删掉，拿去重新使用。
#
# 块哈希用 SHA-256 对前一个块哈希和本物理块的 token ID 计算，这样两个不同的前缀几乎不可能得到相同的块哈希；vLLM 提供 SHA-256 选项也是出于这个原因。凡是会改变 K/V 的其他因素（换了模型、加了 LoRA 适配器、提示里有图像），也都必须计入块哈希。

# %% [markdown] lang="en"
# First the hash chain alone. Two prompts share their first 8 tokens and then differ; a third puts the
# second block's 4 tokens behind another first block. With blocks of 4 positions the first two prompts
# agree on their first two block hashes and differ from the third block on. The third prompt's second
# block holds the same tokens as the others' second block, but its hash differs, because its prefix does.

# %% [markdown] lang="zh"
# 先单独看哈希链。前两个提示的前 8 个 token 相同，之后就不同了；第三个提示把第二个物理块的那 4 个 token 接在另一个第一块后面。物理块大小为 4 个位置时，前两个提示的前两个块哈希相同，从第三个物理块起不同。第三个提示的第二个物理块与前两个提示的第二个物理块 token 完全相同，块哈希却不同，因为它的前缀不同。

# %%
BLOCK_SIZE = 4


# [en] One hash per full block: SHA-256 over the previous block's hash and this block's token IDs.
# [zh] 每个填满的物理块一个哈希：对前一个物理块的哈希和本物理块的 token ID 做 SHA-256。
def chained_block_hashes(tokens: list[int], block_size: int) -> list[str]:
    hashes, parent = [], ""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start:start + block_size]
        parent = hashlib.sha256(f"{parent}|{block}".encode()).hexdigest()
        hashes.append(parent)
    return hashes


hash_demo = {
    "a": [11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41],
    "b": [11, 12, 13, 14, 21, 22, 23, 24, 35, 36, 37, 38, 42, 43],
    "c": [51, 52, 53, 54, 21, 22, 23, 24, 31, 32, 33, 34],
}
hash_demo_rows = {name: chained_block_hashes(tokens, BLOCK_SIZE) for name, tokens in hash_demo.items()}
say_table([[f"`{name}`", str(len(tokens)), " ".join(h[:8] for h in hash_demo_rows[name])] for name, tokens in hash_demo.items()],
          en=["prompt", "tokens", "block hashes (first 8 hex digits)"], zh=["提示", "token 数", "块哈希（前 8 位十六进制）"])
assert hash_demo_rows["a"][:2] == hash_demo_rows["b"][:2] and hash_demo_rows["a"][2] != hash_demo_rows["b"][2]
assert hash_demo_rows["c"][1] != hash_demo_rows["a"][1]

# %% [markdown] lang="en"
# Now the pool. `PrefixCache` holds K and V in blocks, one tensor per layer of shape
# `[num_blocks, block_size, H, Dh]`, and keeps four records: each block's reference count, the free list
# (blocks with no content), the index (block hash → block) and, in release order, the cached blocks that
# no request holds (`evictable`, an `OrderedDict` used as an LRU queue).
#
# * `lookup(prompt)` walks the prompt's block hashes and stops at the first one missing from the index: a
#   later block cannot be used without the ones before it. It hashes `prompt[:-1]`, because the last
#   prompt token must always be computed: its logits choose the first new token.
# * `acquire` raises a hit block's reference count and takes it out of the LRU queue; `allocate` takes a
#   free block, evicting the least recently released cached block when none is free; `publish` enters a
#   full block into the index; `release` lowers the count, and a block that reaches 0 joins the LRU queue
#   if it is indexed, the free list otherwise.
# * `write` and `gather` move K/V between a request's block table and the `[1, H, T, Dh]` cache format of
#   our decoder: indexing only, no arithmetic.
#
# One test instrument: a block without content (never written, or evicted) is filled with NaN, so a read
# of it turns the logits into NaN.

# %% [markdown] lang="zh"
# 接下来是池本身。`PrefixCache` 把 K 和 V 存在物理块里，每层各一个形状为 `[num_blocks, block_size, H, Dh]` 的张量，并维护四项记录：每个物理块的引用计数；空闲列表（没有内容的物理块）；索引（块哈希 → 物理块）；以及按释放顺序排列、没有任何请求持有的已缓存物理块（`evictable`，一个当作 LRU 队列使用的 `OrderedDict`）。
#
# * `lookup(prompt)` 依次检查提示的各个块哈希，遇到第一个不在索引中的就停下：后面的物理块离开前面的物理块是用不上的。它对 `prompt[:-1]` 计算块哈希，因为提示的最后一个 token 必须计算：要靠它的 logits 选出第一个新 token。
# * `acquire` 把命中的物理块的引用计数加一，并把它移出 LRU 队列；`allocate` 取一个空闲物理块，没有空闲物理块时，就淘汰释放得最早的那个已缓存物理块；`publish` 把一个填满的物理块登记进索引；`release` 把引用计数减一，降到 0 的物理块如果在索引中，就排进 LRU 队列，否则回到空闲列表。
# * `write` 和 `gather` 在请求的块表与我们解码器的 `[1, H, T, Dh]` 缓存格式之间搬运 K/V：只做索引，不做运算。
#
# 还有一个检测手段：没有内容的物理块（从未写入过，或已被淘汰）填满 NaN，一旦读到它，logits 就会变成 NaN。

# %%
# [en] Raised when the pool cannot give a block: every block is held by a running request.
# [zh] 池给不出物理块时抛出：所有物理块都被运行中的请求持有。
class PoolFull(RuntimeError):
    pass


class PrefixCache:
    def __init__(self, config, num_blocks: int, block_size: int = BLOCK_SIZE):
        shape = (num_blocks, block_size, config.heads, config.head_dim)       # [N_blocks, block_size, H, Dh]
        self.k = [torch.full(shape, float("nan")) for _ in range(config.layers)]
        self.v = [torch.full(shape, float("nan")) for _ in range(config.layers)]
        self.num_blocks, self.block_size = num_blocks, block_size
        self.refs = [0] * num_blocks
        self.free = list(range(num_blocks - 1, -1, -1))
        # [en] block hash -> block, and back; cached blocks nobody holds, least recently released first.
        # [zh] 块哈希 -> 物理块，以及反向映射；没有请求持有的已缓存物理块，释放得最早的排在最前。
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
        return hits, min(len(hits) * self.block_size, len(usable))

    def acquire(self, block):
        self.refs[block] += 1
        self.evictable.pop(block, None)

    def allocate(self) -> int:
        if not self.free:
            self.evict()
        block = self.free.pop()
        self.refs[block] = 1
        return block

    def evict(self):
        if not self.evictable:
            raise PoolFull({"blocks": self.num_blocks, "held": sum(r > 0 for r in self.refs)})
        block, _ = self.evictable.popitem(last=False)
        del self.index[self.hash_of.pop(block)]
        self.clear(block)
        self.free.append(block)
        self.evictions += 1

    def publish(self, block, block_hash):
        if block_hash not in self.index:
            self.index[block_hash], self.hash_of[block] = block, block_hash

    def release(self, block):
        self.refs[block] -= 1
        if self.refs[block] == 0:
            if block in self.hash_of:
                self.evictable[block] = None
            else:
                self.clear(block)
                self.free.append(block)

    def clear(self, block):
        for t in self.k + self.v:
            t[block] = float("nan")

    def available(self) -> int:
        return len(self.free) + len(self.evictable)

    def addresses(self, table, start, end):
        return torch.tensor([table[p // self.block_size] * self.block_size + p % self.block_size for p in range(start, end)])

    def write(self, table, start, cache):
        # [en] Positions start ... end - 1 of the decoder's cache (each layer's K, V: [1, H, end, Dh]) into the blocks.
        # [zh] 把解码器缓存（每层的 K、V：[1, H, end, Dh]）中位置 start ... end - 1 的内容写进物理块。
        end = cache[0][0].shape[-2]
        slots = self.addresses(table, start, end)
        for layer, (k, v) in enumerate(cache):
            self.k[layer].flatten(0, 1)[slots] = k[0, :, start:end].transpose(0, 1)
            self.v[layer].flatten(0, 1)[slots] = v[0, :, start:end].transpose(0, 1)

    def gather(self, table, length):
        # [en] The first `length` positions of a block table, in the decoder's format: [(K, V)] of [1, H, length, Dh].
        # [zh] 块表中前 `length` 个位置的内容，转换成解码器的格式：[(K, V)]，形状为 [1, H, length, Dh]。
        slots = self.addresses(table, 0, length)
        return [(k.flatten(0, 1)[slots].transpose(0, 1)[None], v.flatten(0, 1)[slots].transpose(0, 1)[None])
                for k, v in zip(self.k, self.v)]

# %% [markdown] lang="en"
# The bookkeeping on a pool of 6 blocks, before any model runs. Request `r1` takes 4 blocks for the 13
# tokens of prompt `a` above and publishes its 3 full blocks. When it finishes, the 3 full blocks stay
# indexed and become evictable, the last block of the chain first (released in reverse order, as vLLM
# does, so that eviction takes a chain's tail before its head); the partly filled fourth block goes back
# to the free list. Request `r2` with prompt `b` then finds the first two blocks (8 tokens) and takes 2
# free blocks for the rest. Request `r3` wants 2 blocks while `r2` still runs: the pool has 1 free block
# left, so it evicts the one evictable block, `r1`'s third.

# %% [markdown] lang="zh"
# 先在一个只有 6 个物理块的池上看看这些记账，此时还不运行模型。请求 `r1` 为上面提示 `a` 的 13 个 token 取走 4 个物理块，并登记其中 3 个填满的物理块。它结束后，这 3 个填满的物理块仍在索引中，变成可淘汰的，链尾的物理块排在最前（与 vLLM 一样按相反顺序释放，这样淘汰时先去掉链尾，再去掉链头）；未填满的第四个物理块回到空闲列表。接着，提示为 `b` 的请求 `r2` 找到了前两个物理块（8 个 token），其余部分再取 2 个空闲物理块。`r2` 仍在运行时，请求 `r3` 需要 2 个物理块：池中只剩 1 个空闲物理块，于是淘汰唯一可淘汰的那个物理块，即 `r1` 的第三个物理块。

# %%
demo = PrefixCache(cfg, num_blocks=6)
r1 = [demo.allocate() for _ in range(4)]
for block, block_hash in zip(r1, demo.block_hashes(hash_demo["a"])):
    demo.publish(block, block_hash)
for block in reversed(r1):
    demo.release(block)
hits, hit_tokens = demo.lookup(hash_demo["b"])
for block in hits:
    demo.acquire(block)
r2 = hits + [demo.allocate() for _ in range(2)]
r3 = [demo.allocate() for _ in range(2)]
say_table([["`r1`", str(r1), "-"], ["`r2`", str(r2), str(hit_tokens)], ["`r3`", str(r3), "-"]],
          en=["request", "block table", "tokens found in the cache"], zh=["请求", "块表", "在缓存中找到的 token 数"])
say(en=f"Reference counts {demo.refs}; evictions {demo.evictions}; index holds {len(demo.index)} blocks.",
    zh=f"引用计数 {demo.refs}；淘汰次数 {demo.evictions}；索引中有 {len(demo.index)} 个物理块。")
assert hits == r1[:2] and hit_tokens == 8 and demo.evictions == 1 and r1[2] in r3 and len(demo.index) == 2
