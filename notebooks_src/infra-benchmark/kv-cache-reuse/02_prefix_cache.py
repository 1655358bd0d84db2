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
# practically never share a hash; SHA-256 is vLLM's default for the same reason (recent versions also offer the
# faster xxhash). Anything else that changes the
# K/V (another model, a LoRA adapter, an image in the prompt) would have to enter the hash too.

# %% [markdown] lang="zh"
# ## 4. 带内容索引的物理块池
#
# 聊天服务收到的许多请求都以同一段系统提示开头；检索增强的服务会把同样的文档放进许多提示里。在因果掩码下，位置 $i$ 上的 K/V 只取决于 token $0 \dots i$（前提是权重相同、位置规则相同）。因此，两个请求只要前 $n$ 个 token 相同，这 $n$ 个位置上需要的 K/V 就相同，第二个请求完全可以直接拿第一个请求算好的，而不必再算一遍。这就是**前缀缓存**。推理服务系统为此需要三样东西：
#
# * **内容索引**：拿到一个新提示时，找出已经存有它前缀 K/V 的那些物理块。与 vLLM 的自动前缀缓存一样，只有**填满的**物理块才进入索引，每个物理块都有一个**块哈希**，它由这个物理块自己的 token **和前一个物理块的块哈希**一起算出。这些哈希连成一条链，所以一个物理块的块哈希标识的是它的整个前缀，而不只是它自己的几个 token。（SGLang 的 RadixAttention 改用一棵建立在 token 序列上的基数树（radix tree），默认以单个 token 为粒度匹配（页大小为 1），因此即使公共前缀在某个物理块中间结束，也能共享；原理相同。）
# * **引用计数**：一个物理块可能同时服务好几个运行中的请求；只有没有任何请求持有它时，才能拿它去存别的内容。
# * **淘汰**：请求结束后，它的物理块保留着 K/V，仍留在索引里，以备别的请求用到。当池中没有空闲物理块时，就在没有任何请求持有的已缓存物理块中，淘汰释放得最早的那个（最近最少使用，LRU）：把它从索引中删掉，拿去重新使用。
#
# 块哈希用 SHA-256 对前一个块哈希和本物理块的 token ID 计算，这样两个不同的前缀几乎不可能得到相同的块哈希；vLLM 默认使用 SHA-256 也是出于这个原因（较新的版本还提供更快的 xxhash）。凡是会改变 K/V 的其他因素（换了模型、加了 LoRA 适配器、提示里有图像），也都必须计入块哈希。

# %% [markdown] lang="en"
# First the hash chain alone. Two prompts share their first 8 tokens and then differ; a third puts the
# second block's 4 tokens behind another first block. With blocks of 4 positions the first two prompts
# agree on their first two block hashes and differ from the third block on. The third prompt's second
# block holds the same tokens as the others' second block, but its hash differs, because its prefix does.

# %% [markdown] lang="zh"
# 先单独看哈希链。前两个提示的前 8 个 token 相同，之后就不同了；第三个提示把第二个物理块的那 4 个 token 接在另一组开头的 4 个 token 后面。物理块大小为 4 个位置时，前两个提示的前两个块哈希相同，从第三个物理块起不同。第三个提示的第二个物理块与前两个提示的第二个物理块所含 token 完全相同，块哈希却不同，因为它的前缀不同。

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
# Now the blocks. They are **the paged store of the serving notebook, included here** unchanged, its
# prose and its two cells: `BlockPool` keeps every layer's K and V in fixed-size blocks, with a fill count
# and a reference count per block and a free list, and `PagedCache` keeps one block table per sequence,
# with `reserve`, `write`, `read` (a gather: indexing only), `fork` and copy-on-write. What prefix caching
# needs of a store is already there: blocks that several sequences hold, counted by their reference counts,
# and block tables that start with blocks other sequences hold. What it adds, the content index, the LRU
# queue and the lookup on admission, comes after the store.

# %% [markdown] lang="zh"
# 接下来是物理块本身。它们就是**服务笔记本的分页缓存，这里原样引入**，连同它的说明和两个代码单元格：`BlockPool` 把每一层的 K 和 V 存在大小固定的物理块里，为每个物理块记录已填计数和引用计数，并维护一个空闲列表；`PagedCache` 为每条序列保存一张块表，提供 `reserve`、`write`、`read`、`fork` 和写时复制（copy-on-write），其中 `read` 是收集（gather），只做索引。前缀缓存对存储的要求，它都已经满足：物理块可以同时被多条序列持有，由引用计数记账；块表可以从其他序列持有的物理块开始。前缀缓存新增的部分（内容索引、LRU 队列和接纳时的查找）放在这部分代码之后。
