# %% [markdown] lang="en"
# ## 6. The paged cache
#
# A static cache reserves `T_max` slots for every row, whatever the row will use. A **paged cache**
# borrows the idea of virtual memory: K and V live in fixed-size **physical blocks** of `block_size`
# positions, taken from one pool shared by all sequences. Each sequence has a **block table**, the list
# of its blocks in order; a sequence of $n$ positions holds $\lceil n / \text{block\_size} \rceil$
# blocks, so at most one partly filled block per sequence is wasted. For attention, a sequence's K and V
# are **gathered** from its blocks: indexing, which copies values and computes nothing.
#
# Our pool, per layer, is one tensor for K and one for V of shape `[num_blocks, block_size, H, Dh]`,
# addressed as `block * block_size + slot`. Like vLLM's blocks, each block records how many of its slots
# are filled, and a sequence reads, block by block, exactly the filled slots. A block also counts the
# sequences that hold it (its reference count), so that sequences can share blocks. A block whose count
# drops to 0 goes back to the free list. Two test instruments: the pool starts filled with NaN, and a
# released block is filled with NaN again (a real engine would not spend the time): any read of a slot
# the reader did not write becomes NaN in the logits. The free list is shuffled with a seeded generator,
# so block tables are random, not consecutive.

# %% [markdown] lang="zh"
# ## 6. 分页缓存
#
# 静态缓存给每一行都预留 `T_max` 个槽位，不管这一行最终用多少。**分页缓存**借用了虚拟内存的思路：K 和 V 存放在大小固定（`block_size` 个位置）的**物理块**中，这些物理块取自所有序列共用的同一个池。每条序列有一张**块表**，按顺序列出它的物理块；有 $n$ 个位置的序列占用 $\lceil n / \text{block\_size} \rceil$ 个物理块，所以每条序列最多浪费一个未填满的物理块。计算注意力时，从序列的各个物理块中**收集**（gather）出它的 K 和 V：这只是索引操作，只复制数值，不做任何计算。
#
# 我们的池在每一层各有一个 K 张量和一个 V 张量，形状为 `[num_blocks, block_size, H, Dh]`，按 `block * block_size + slot` 寻址。与 vLLM 一样，每个物理块记录自己已填了多少个槽位；序列按物理块逐个读取，读的正是这些已填的槽位。物理块还记录有几条序列持有它（引用计数），这样多条序列才能共享物理块；引用计数降到 0 的物理块回到空闲列表。另有两个检测手段：池一开始填满 NaN；物理块被释放时再次填满 NaN（真正的推理引擎不会在这上面花时间）。这样，只要读到不是自己写入的槽位，logits 中就会出现 NaN。空闲列表用固定种子的随机数打乱，所以块表里的编号是随机的，而不是连续的。

# %%
class BlockPool:
    def __init__(self, config, num_blocks, block_size, dtype=torch.float32, seed=SEED):
        shape = (num_blocks, block_size, config.heads, config.head_dim)     # [N_blocks, block_size, H, Dh]
        self.k = [torch.full(shape, float("nan"), dtype=dtype) for _ in range(config.layers)]
        self.v = [torch.full(shape, float("nan"), dtype=dtype) for _ in range(config.layers)]
        self.num_blocks, self.block_size = num_blocks, block_size
        # [en] Per block: filled slots, and sequences holding it.
        # [zh] 每个物理块：已填的槽位数，以及持有它的序列数。
        self.fill = [0] * num_blocks
        self.refs = [0] * num_blocks
        self.free = list(range(num_blocks))
        # [en] Shuffled: random block tables. Every allocation is recorded.
        # [zh] 打乱顺序：块表是随机的。每次分配都记录下来。
        random.Random(seed).shuffle(self.free)
        self.allocations = []

    def allocate(self) -> int:
        if not self.free:
            raise RuntimeError(f"block pool exhausted: all {self.num_blocks} blocks in use")
        block = self.free.pop()
        self.refs[block] = 1
        self.allocations.append(block)
        return block

    def release(self, block):
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.clear(block)
            self.free.append(block)

    def clear(self, block):
        self.fill[block] = 0
        for t in self.k + self.v:
            # [en] Test instrument: poison the released block.
            # [zh] 检测手段：给释放的物理块重新填上 NaN。
            t[block] = float("nan")

    def used(self) -> int:
        return self.num_blocks - len(self.free)

# %% [markdown] lang="en"
# `PagedCache` manages the block tables. `reserve(seq, n)` finds slots for $n$ new positions: it
# appends to the last block while that block has room, and takes a new block from the pool when it is
# full. It returns the slots' addresses; `write` puts each layer's new K/V there, and `read` gathers a
# sequence's filled slots, block by block. `fork(parent, child)` lets a child share all of its
# parent's blocks (each block's reference count goes up by one), and `reserve` applies
# **copy-on-write**: before writing into a block that another sequence also holds, it copies the block
# into a fresh one and writes there. Full shared blocks are never written, so they stay shared.

# %% [markdown] lang="zh"
# `PagedCache` 负责管理块表。`reserve(seq, n)` 为 $n$ 个新位置分配槽位：最后一个物理块还有空位时就往里追加，满了就从池中取一个新的物理块。它返回这些槽位的地址；`write` 把每层新的 K/V 写到那里，`read` 则逐个物理块收集序列已填的槽位。`fork(parent, child)` 让子序列共享父序列的全部物理块（每个物理块的引用计数加一）；`reserve` 实行**写时复制**（copy-on-write）：要往一个其他序列也持有的物理块里写入之前，先把它复制到一个新的物理块，再写入这个新的物理块。已经填满的共享物理块永远不会再被写入，所以会一直共享下去。

# %%
class PagedCache:
    def __init__(self, pool: BlockPool):
        # [en] sequence -> block table
        # [zh] 序列 -> 块表
        self.pool, self.tables = pool, {}

    def add(self, seq):
        self.tables[seq] = []

    def fork(self, parent, child):
        self.tables[child] = list(self.tables[parent])
        for block in self.tables[child]:
            self.pool.refs[block] += 1

    def free(self, seq):
        for block in self.tables.pop(seq):
            self.pool.release(block)

    def length(self, seq) -> int:
        return sum(self.pool.fill[b] for b in self.tables[seq])

    def copy_on_write(self, seq):
        table, pool = self.tables[seq], self.pool
        old = table[-1]
        new = pool.allocate()
        for t in pool.k + pool.v:
            t[new] = t[old]
        pool.fill[new] = pool.fill[old]
        pool.release(old)
        table[-1] = new

    def reserve(self, seq, n) -> torch.Tensor:
        table, pool, addresses = self.tables[seq], self.pool, []
        for _ in range(n):
            while not table or pool.fill[table[-1]] >= pool.block_size:
                table.append(pool.allocate())
            if pool.refs[table[-1]] > 1:
                self.copy_on_write(seq)
            block = table[-1]
            addresses.append(block * pool.block_size + pool.fill[block])
            pool.fill[block] += 1
        return torch.tensor(addresses, dtype=torch.long)

    def addresses(self, seq) -> torch.Tensor:
        size = self.pool.block_size
        return torch.tensor([b * size + s for b in self.tables[seq] for s in range(self.pool.fill[b])], dtype=torch.long)

    def write(self, layer, seq, addresses, k, v):                      # k, v: [H, n, Dh]
        self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.transpose(0, 1)
        self.pool.v[layer].view(-1, *v.shape[::2])[addresses] = v.transpose(0, 1)

    def read(self, layer, seq):                                        # -> [H, length, Dh]
        addresses = self.addresses(seq)
        # [en] Gather: indexing, [length, H, Dh].
        # [zh] 收集：只是索引，[length, H, Dh]。
        k = self.pool.k[layer].flatten(0, 1)[addresses]
        v = self.pool.v[layer].flatten(0, 1)[addresses]
        return k.transpose(0, 1), v.transpose(0, 1)

# %% [markdown] lang="en"
# The bookkeeping on a small example, before any model runs: a pool of 8 blocks of 4 positions.
# Sequence `s` reserves 6 positions, then 1 more. It takes two blocks from the free list, fills the
# first one slot by slot and continues in the second, so its addresses are `block * 4 + slot` for slots
# 0 to 3 of its first block and 0 to 2 of its second, in the order of its positions; `addresses` lists
# the same ones. Then `t` forks from `s` and reserves one position: the full first block stays shared
# (reference count 2), and the partly filled second block is copied before `t` writes into it. When
# both sequences are freed, every block is back in the free list exactly once, with no filled slot and
# no holder.

# %% [markdown] lang="zh"
# 先在一个小例子上看看这些记账，此时还不运行模型：池中有 8 个物理块，每个物理块 4 个位置。序列 `s` 先预留 6 个位置，再预留 1 个。它从空闲列表中取出两个物理块，逐个槽位填满第一个，再接着填第二个，所以它的地址依次是 `block * 4 + slot`：第一个物理块的第 0 到 3 个槽位，然后是第二个物理块的第 0 到 2 个槽位，顺序与位置一致；`addresses` 列出的也正是这些地址。接着 `t` 从 `s` 分叉出来并预留一个位置：已满的第一个物理块仍然共享（引用计数为 2），未填满的第二个物理块则在 `t` 写入之前被复制。两条序列都释放之后，每个物理块都恰好一次回到空闲列表，没有已填的槽位，也没有持有者。

# %%
demo_pool = BlockPool(cfg, num_blocks=8, block_size=4, seed=SEED + 7)
demo = PagedCache(demo_pool)
demo.add("s")
s_addresses = torch.cat((demo.reserve("s", 6), demo.reserve("s", 1)))
first, second = demo.tables["s"]
demo.fork("s", "t")
t_address = demo.reserve("t", 1)
print("s:", demo.tables["s"], s_addresses.tolist())
print("t:", demo.tables["t"], t_address.tolist())
assert s_addresses.tolist() == [first * 4 + slot for slot in range(4)] + [second * 4 + slot for slot in range(3)]
assert torch.equal(demo.addresses("s"), s_addresses) and demo.length("s") == 7 and demo.length("t") == 8
# [en] The full block is shared; the partly filled one was copied, and t wrote into the copy's next slot.
# [zh] 已满的物理块被共享；未填满的那个被复制，t 写入的是副本的下一个槽位。
copy_block = demo.tables["t"][1]
assert demo.tables["t"][0] == first and copy_block != second and demo_pool.refs[first] == 2 and demo_pool.refs[second] == 1
assert t_address.tolist() == [copy_block * 4 + 3]
demo.free("s")
demo.free("t")
# [en] Every block is back exactly once, empty and unheld.
# [zh] 每个物理块都恰好一次回到空闲列表，已清空，也没有持有者。
assert sorted(demo_pool.free) == list(range(8)) and not any(demo_pool.fill) and not any(demo_pool.refs)

# %% [markdown] lang="en"
# The reference it must equal is a contiguous per-sequence cache with the same interface: each
# sequence's K and V are one `[H, n, Dh]` tensor per layer, grown by `torch.cat` as in the first
# notebook.
#
# `SeqBatchStore` turns a list of sequences, each with its own length, into a store for `store_forward`.
# The batch's key axis is as long as the longest sequence plus the new tokens; each sequence's keys are
# placed at the right end of its row, and the slots to the left are padding: exactly the left-padded
# layout of sections 4 and 5, so positions and masks come from the same rules. The padding slots
# are filled with zeros, not NaN: they are read with weight 0, and $0 \cdot \mathrm{NaN}$ would be NaN.

# %% [markdown] lang="zh"
# 分页缓存必须与一个参照相等：接口相同、每条序列连续存放的缓存（下文称连续缓存）。在这个缓存里，每条序列的 K 和 V 在每层各是一个 `[H, n, Dh]` 张量，像第一份笔记本那样用 `torch.cat` 增长。
#
# `SeqBatchStore` 把一组长度各不相同的序列包装成 `store_forward` 所需的存储对象。batch 的键轴长度等于最长序列的长度加上新 token 数；每条序列的键放在自己那一行的最右端，左边的槽位是填充位：这正是第 4、5 节的左填充布局，所以位置和掩码沿用同样的规则。填充位填的是 0 而不是 NaN：它们会以权重 0 被读取，而 $0 \cdot \mathrm{NaN}$ 仍是 NaN。

# %%
class ContiguousCache:
    def __init__(self, config):
        # [en] sequence -> [(K, V) per layer], and its length
        # [zh] 序列 -> [每层的 (K, V)]，以及它的长度
        self.layers, self.tables, self.lengths = config.layers, {}, {}

    def add(self, seq):
        self.tables[seq], self.lengths[seq] = [None] * self.layers, 0

    def fork(self, parent, child):
        # [en] torch.cat never writes in place, so sharing the tensors is safe.
        # [zh] torch.cat 从不原地写入，所以共享这些张量是安全的。
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]

    def free(self, seq):
        del self.tables[seq], self.lengths[seq]

    def length(self, seq) -> int:
        # [en] Including reserved positions.
        # [zh] 包括已预留的位置。
        return self.lengths[seq]

    def reserve(self, seq, n):
        self.lengths[seq] += n

    def write(self, layer, seq, addresses, k, v):
        past = self.tables[seq][layer]
        self.tables[seq][layer] = (k, v) if past is None else (torch.cat((past[0], k), -2), torch.cat((past[1], v), -2))

    def read(self, layer, seq):
        return self.tables[seq][layer]


class SeqBatchStore:
    def __init__(self, cache, seqs):
        self.cache, self.seqs = cache, list(seqs)

    def begin(self, new_mask):                                         # new_mask: [B, T_new]
        self.new_counts = new_mask.sum(dim=-1).tolist()
        self.addresses = [self.cache.reserve(s, n) for s, n in zip(self.seqs, self.new_counts)]
        # [en] Cached plus new positions.
        # [zh] 已缓存的加上新的位置。
        lengths = [self.cache.length(s) for s in self.seqs]
        self.total = max(n - new for n, new in zip(lengths, self.new_counts)) + new_mask.shape[1]
        columns = torch.arange(self.total)
        return columns[None, :] >= (self.total - torch.tensor(lengths))[:, None]   # [B, T_total]

    def write(self, layer, k, v):                                      # k, v: [B, H, T_new, Dh]
        batch, heads, _, head_dim = k.shape
        keys = torch.zeros(batch, heads, self.total, head_dim, dtype=k.dtype)
        values = torch.zeros_like(keys)
        for row, (seq, n) in enumerate(zip(self.seqs, self.new_counts)):
            if n:
                self.cache.write(layer, seq, self.addresses[row], k[row, :, -n:], v[row, :, -n:])
            seq_k, seq_v = self.cache.read(layer, seq)                 # [H, length, Dh]
            keys[row, :, self.total - seq_k.shape[1]:] = seq_k
            values[row, :, self.total - seq_v.shape[1]:] = seq_v
        return keys, values

    def finish(self, new_len):
        pass

    def pointers(self):
        return []

# %% [markdown] lang="en"
# **First criterion: paging is indexing.** The padded batch of section 4 (prompts of 3, 7 and 12
# tokens), each prompt its own sequence in the pool, prefill and 20 decode steps, blocks of 4 positions
# so that every sequence spans several blocks, in FP32 and FP64. Against the contiguous per-sequence cache
# under the same calls, the logits must be equal **bit for bit**, and so must every layer's K and V read
# back from the blocks. Exact equality holds here on any machine: a gather only copies values, and
# `SeqBatchStore` copies the K/V of either cache into the same fresh tensor, so attention receives the same
# numbers in the same memory layout and repeats the same arithmetic. Against the `torch.cat` store of
# section 5, the logits must agree within the tolerance of their dtype: that store hands attention its
# K/V in another layout (in the prefill, a transposed view of the projection), which a matrix-multiply
# kernel may sum in another order.
#
# Then the block boundaries: one sequence of 24 tokens is fed in chunks of 3, 4, 1, 4, 9, 2 and 1 tokens,
# so that a chunk is shorter than a block, exactly one block long (once across a block boundary, once
# aligned with it) and longer than two blocks. Its logits must equal, bit for bit, those of the contiguous
# cache under the same calls and, within the FP32 tolerance, those of one full call; its six blocks must
# each hold exactly 4 positions, in order.

# %% [markdown] lang="zh"
# **第一条判据：分页只是索引**。取第 4 节填充后的 batch（提示长 3、7、12 个 token），每个提示在池中是一条独立的序列，做预填充和 20 个解码步；物理块大小取 4 个位置，让每条序列都跨越多个物理块；FP32 和 FP64 各一遍。与同样调用下的连续缓存相比，logits 必须**逐比特相同**，从物理块中读回的每一层 K 和 V 也必须逐比特相同。这里的逐比特相同在任何机器上都成立：收集只是复制数值，而 `SeqBatchStore` 把两种缓存的 K/V 复制进同一种新建的张量，所以注意力收到的数值相同、内存布局相同，执行的运算也完全一样。与第 5 节的 `torch.cat` 存储相比，logits 则要求在该精度的容差内一致：那个存储对象以另一种内存布局把 K/V 交给注意力（预填充时是投影结果转置后的视图），矩阵乘法算子可能以另一种顺序求和。
#
# 然后检查物理块的边界：把一条 24 个 token 的序列按分块长度 3、4、1、4、9、2、1 依次送入，这样有的分块比一个物理块短，有的恰好等于一个物理块（一次跨越物理块边界，一次与边界对齐），还有的比两个物理块还长。它的 logits 必须与同样调用下连续缓存的结果逐比特相同，并在 FP32 容差内等于一次完整调用的结果；它的六个物理块必须各自恰好存放 4 个位置，而且按顺序排列。

# %%
# [en] Small, so that sequences span many blocks.
# [zh] 取小一点，让序列跨越多个物理块。
BLOCK_SIZE = 4


@torch.inference_mode()
def generate_seqs(model, cache, prompts, steps=DECODE_STEPS, seqs=None):
    # [en] The padded batch of section 4, with each prompt stored as its own sequence in `cache`.
    # [zh] 第 4 节填充后的 batch，每个提示在 `cache` 中是一条独立的序列。
    seqs = list(range(len(prompts))) if seqs is None else seqs
    for seq in seqs:
        cache.add(seq)
    return generate_with_store(model, prompts, SeqBatchStore(cache, seqs), steps)


def same_kv(cache_a, cache_b, seqs) -> bool:
    # [en] Every layer's K and V of every sequence, read back from both caches, equal bit for bit.
    # [zh] 从两个缓存读回的每条序列、每一层的 K 和 V 都逐比特相同。
    return all(torch.equal(a, b) for layer in range(cfg.layers) for seq in seqs
               for a, b in zip(cache_a.read(layer, seq), cache_b.read(layer, seq)))


def check_paged(dtype=torch.float32) -> dict:
    net = in_dtype(model, dtype)
    pool = BlockPool(cfg, 32, BLOCK_SIZE, dtype)
    paged, contiguous_cache = PagedCache(pool), ContiguousCache(cfg)
    out = generate_seqs(net, paged, PROMPTS)
    contiguous = generate_seqs(net, contiguous_cache, PROMPTS)
    cat_ref = generate_with_store(net, PROMPTS, CatStore(cfg, len(PROMPTS)))
    tables = [list(paged.tables[s]) for s in range(len(PROMPTS))]
    return {
        "dtype": DTYPE_NAME[dtype],
        "max_abs_logit_err": worst(max_abs_err(a, b) for a, b in zip(out["logits"], cat_ref["logits"])),
        "close_vs_cat": all(close(a, b) for a, b in zip(out["logits"], cat_ref["logits"])),
        "bit_exact_vs_cat": all(torch.equal(a, b) for a, b in zip(out["logits"], cat_ref["logits"])),
        "bit_exact_vs_contiguous": all(torch.equal(a, b) for a, b in zip(out["logits"], contiguous["logits"])),
        "kv_bit_exact_vs_contiguous": same_kv(paged, contiguous_cache, range(len(PROMPTS))),
        "tokens_identical": out["tokens"] == cat_ref["tokens"],
        "finite": all(bool(torch.isfinite(a).all()) for a in out["logits"]),
        "tables": tables,
        "lengths": [paged.length(s) for s in range(len(PROMPTS))],
    }


PAGED = {DTYPE_NAME[d]: check_paged(d) for d in TOLERANCE}
say_table([[str(seq), str(PAGED["fp32"]["lengths"][seq]), str(table)] for seq, table in enumerate(PAGED["fp32"]["tables"])],
          en=["sequence", "positions", "block table"], zh=["序列", "位置数", "块表"])
say_table([[name, f"`{r['bit_exact_vs_contiguous'] and r['kv_bit_exact_vs_contiguous']}`", f"{r['max_abs_logit_err']:.1e}",
            f"`{r['close_vs_cat']}`", f"`{r['bit_exact_vs_cat']}`", f"`{r['tokens_identical']}`"] for name, r in PAGED.items()],
          en=["dtype", "bit-exact vs contiguous (logits, K/V)", "max abs logit error vs `torch.cat`", "within tolerance of `torch.cat`",
              "bit-exact vs `torch.cat` on this run", "tokens identical"],
          zh=["精度", "与连续缓存逐比特相同（logits、K/V）", "与 `torch.cat` 相比的最大 logits 绝对误差", "在 `torch.cat` 结果的容差之内",
              "本次运行与 `torch.cat` 逐比特相同", "token 一致"])
for r in PAGED.values():
    assert r["bit_exact_vs_contiguous"] and r["kv_bit_exact_vs_contiguous"] and r["close_vs_cat"]
    assert r["tokens_identical"] and r["finite"]
    assert r["lengths"] == [n + DECODE_STEPS for n in PROMPT_LENGTHS]
    assert [len(t) for t in r["tables"]] == [math.ceil(n / BLOCK_SIZE) for n in r["lengths"]]
    # [en] Block tables are not consecutive.
    # [zh] 块表不是连续编号。
    assert any(t != sorted(t) or t != list(range(t[0], t[0] + len(t))) for t in r["tables"])

# %%
# [en] Chunks shorter than a block, exactly one block (across a boundary, then aligned), and over two blocks.
# [zh] 分块比一个物理块短、恰好一个物理块（先跨越边界，再与边界对齐）、超过两个物理块。
BOUNDARY_CHUNKS = [3, 4, 1, 4, 9, 2, 1]
BOUNDARY_IDS = torch.randint(0, cfg.vocab, (1, sum(BOUNDARY_CHUNKS)), generator=torch.Generator().manual_seed(SEED + 8))


@torch.inference_mode()
def feed_in_chunks(cache, ids, chunks, seq="s"):
    # [en] One sequence, one store_forward call per chunk; the logits of every position.
    # [zh] 一条序列，每个分块调用一次 store_forward；返回每个位置的 logits。
    cache.add(seq)
    pieces, start = [], 0
    for n in chunks:
        pieces.append(store_forward(model, ids[:, start:start + n], torch.ones(1, n, dtype=torch.bool), SeqBatchStore(cache, [seq]))[0])
        start += n
    return torch.cat(pieces)                                           # [T, vocab]


boundary_pool = BlockPool(cfg, 8, BLOCK_SIZE)
boundary_paged, boundary_contiguous = PagedCache(boundary_pool), ContiguousCache(cfg)
boundary_logits = feed_in_chunks(boundary_paged, BOUNDARY_IDS, BOUNDARY_CHUNKS)
with torch.inference_mode():
    boundary_full = model(BOUNDARY_IDS)[0][0]
BOUNDARY = {
    "chunks": BOUNDARY_CHUNKS,
    "bit_exact_vs_contiguous": torch.equal(boundary_logits, feed_in_chunks(boundary_contiguous, BOUNDARY_IDS, BOUNDARY_CHUNKS)),
    "kv_bit_exact_vs_contiguous": same_kv(boundary_paged, boundary_contiguous, ["s"]),
    "max_abs_logit_err_vs_full": max_abs_err(boundary_logits, boundary_full),
    "close_to_full": close(boundary_logits, boundary_full),
    "fills": [boundary_pool.fill[b] for b in boundary_paged.tables["s"]],
    "addresses_in_order": boundary_paged.addresses("s").tolist() == [b * BLOCK_SIZE + slot for b in boundary_paged.tables["s"] for slot in range(BLOCK_SIZE)],
}
say(en=f"Chunks of {BOUNDARY_CHUNKS} tokens over blocks of {BLOCK_SIZE}: block fill counts {BOUNDARY['fills']}; bit-exact vs the "
       f"contiguous cache (logits and K/V): `{BOUNDARY['bit_exact_vs_contiguous'] and BOUNDARY['kv_bit_exact_vs_contiguous']}`; "
       f"largest logit difference from one full call {BOUNDARY['max_abs_logit_err_vs_full']:.1e}.",
    zh=f"以分块长度 {BOUNDARY_CHUNKS} 写入大小为 {BLOCK_SIZE} 的物理块：各物理块的已填计数为 {BOUNDARY['fills']}；与连续缓存逐比特相同"
       f"（logits 和 K/V）：`{BOUNDARY['bit_exact_vs_contiguous'] and BOUNDARY['kv_bit_exact_vs_contiguous']}`；与一次完整调用相比，logits 的最大差异为 "
       f"{BOUNDARY['max_abs_logit_err_vs_full']:.1e}。")
assert BOUNDARY["bit_exact_vs_contiguous"] and BOUNDARY["kv_bit_exact_vs_contiguous"] and BOUNDARY["close_to_full"]
assert BOUNDARY["fills"] == [BLOCK_SIZE] * (sum(BOUNDARY_CHUNKS) // BLOCK_SIZE) and BOUNDARY["addresses_in_order"]
# [en] The chunks the text describes: below, equal to (twice) and above the block size.
# [zh] 正文所说的分块：小于、等于（两次）和大于物理块大小。
assert min(BOUNDARY_CHUNKS) < BLOCK_SIZE and BOUNDARY_CHUNKS.count(BLOCK_SIZE) == 2 and max(BOUNDARY_CHUNKS) > 2 * BLOCK_SIZE
assert [sum(BOUNDARY_CHUNKS[:i]) % BLOCK_SIZE for i, n in enumerate(BOUNDARY_CHUNKS) if n == BLOCK_SIZE] == [3, 0]

# %% [markdown] lang="en"
# **Second criterion: blocks return and are reused.** Six requests with different prompt and output
# lengths share a pool of only 24 blocks of 4 positions, at most three running at a time. When a
# request has generated its tokens it retires and its blocks go back to the pool; a waiting request is
# admitted when the blocks it may need are free (prompt plus output minus one, since the last token's
# K/V is never stored, rounded up to whole blocks), and gets blocks that earlier requests used. Requests
# are admitted first come, first served: in order of arrival (ties by request number), and a request
# never overtakes the one ahead of it, even if it would fit. A new
# request's prompt is prefilled on its own; then all running requests decode together, one token each
# per step. `serve` is this loop, with the cache type left open; section 8 runs it on a longer stream
# of requests. The paged run must equal, bit for bit, the same schedule over the contiguous cache (the
# same calls on the same inputs, as in the first criterion), and
# every request's tokens must equal what it generates alone. The bookkeeping is checked too: at each
# iteration's peak, after its decode step and before finished requests leave, no request holds more
# blocks than were reserved for it, and at the end every block is back in the pool. And so is the
# scheduler, which no logit can reveal, since a request's logits are the same whenever it runs: never
# more than three requests running, admissions in arrival order, none before its arrival, and no
# request left waiting while it could have been admitted (it waits only while it has not arrived, the
# batch is full, or its blocks do not fit beside the running requests' reservations).

# %% [markdown] lang="zh"
# **第二条判据：物理块能归还、能复用**。六个请求的提示长度和输出长度各不相同，共用一个只有 24 个物理块（每个物理块 4 个位置）的池，同一时刻最多运行三个请求。一个请求生成完自己的 token 就退出，它的物理块回到池中；等待中的请求要等到它可能需要的物理块都空闲时才被接纳（提示长度加输出长度再减一，因为最后一个 token 的 K/V 从不存储；再向上取整到整数个物理块），拿到的是先前请求用过的物理块。请求按先来先服务的顺序接纳：按到达顺序（同时到达的按请求编号），一个请求即使放得下，也从不越过排在它前面的请求。新请求的提示单独预填充；之后所有运行中的请求一起解码，每步每个请求生成一个 token。`serve` 就是这个循环，缓存类型由调用者决定；第 8 节会用它处理一个更长的请求流。分页缓存的运行结果必须与同一调度下连续缓存的结果逐比特相同（与第一条判据一样，这是同样的输入上的同样的调用），而且每个请求生成的 token 都必须与它单独运行时完全相同。记账也要检查：在每一轮的峰值时刻（解码步之后、完成的请求离开之前），没有哪个请求持有的物理块超过为它预留的数量；运行结束时，所有物理块都已回到池中。调度器同样要检查，而且任何 logits 都反映不出它的对错，因为一个请求无论何时运行，logits 都一样：同时运行的请求从不超过三个；按到达顺序接纳；没有请求在到达之前被接纳；也没有请求在本可以被接纳时还在等待（只有在它尚未到达、batch 已满，或者它的物理块与运行中请求的预留量加起来放不进池中时，它才等待）。

# %%
@dataclass
class Request:
    rid: int
    prompt: torch.Tensor
    # [en] Tokens to generate, and the loop iteration the request arrives at.
    # [zh] 要生成的 token 数，以及请求到达的循环轮次。
    max_new: int
    arrival: int = 0
    tokens: list = field(default_factory=list)
    logits: list = field(default_factory=list)
    admitted: int = -1
    finished: int = -1


def blocks_needed(request, block_size) -> int:
    # [en] The last generated token is never fed back, so its K/V is never stored.
    # [zh] 最后生成的 token 不会再送回模型，所以它的 K/V 从不存储。
    return math.ceil((len(request.prompt) + request.max_new - 1) / block_size)


@torch.inference_mode()
def serve(model, cache, requests, num_blocks, block_size, max_batch):
    # [en] Admit (prefill alone), decode all running requests together, retire finished ones; repeat.
    # [zh] 接纳请求（单独预填充），所有运行中的请求一起解码，让完成的请求退出；如此循环。
    waiting = sorted(requests, key=lambda r: (r.arrival, r.rid))
    running, trace, iteration = [], [], 0
    while waiting or running:
        reserved, admitted = sum(blocks_needed(r, block_size) for r in running), []
        while (waiting and waiting[0].arrival <= iteration and len(running) < max_batch
               and reserved + blocks_needed(waiting[0], block_size) <= num_blocks):
            request = waiting.pop(0)
            cache.add(request.rid)
            logits = store_forward(model, request.prompt[None], torch.ones(1, len(request.prompt), dtype=torch.bool),
                                   SeqBatchStore(cache, [request.rid]))
            request.logits.append(logits[0])
            request.tokens.append(int(logits[0, -1].argmax()))
            request.admitted = iteration
            reserved += blocks_needed(request, block_size)
            running.append(request)
            admitted.append(request.rid)
        decoding = [r for r in running if len(r.tokens) < r.max_new]
        if decoding:
            ids = torch.tensor([[r.tokens[-1]] for r in decoding])
            logits = store_forward(model, ids, torch.ones(len(decoding), 1, dtype=torch.bool),
                                   SeqBatchStore(cache, [r.rid for r in decoding]))
            for row, r in enumerate(decoding):
                r.logits.append(logits[row])
                r.tokens.append(int(logits[row, -1].argmax()))
        # [en] The iteration's peak, before finished requests leave: blocks in use and reserved, and whether
        # [en] every request holds at most the blocks reserved for it.
        # [zh] 本轮的峰值，在完成的请求离开之前记录：使用中和预留的物理块数，以及每个请求持有的物理块
        # [zh] 是否都不超过为它预留的数量。
        paged = hasattr(cache, "pool")
        trace.append({"iteration": iteration, "admitted": admitted, "decoded": len(decoding), "running": len(running),
                      "waiting": len(waiting), "blocks_used": cache.pool.used() if paged else None,
                      "blocks_reserved": sum(blocks_needed(r, block_size) for r in running),
                      "within_reservation": all(len(cache.tables[r.rid]) <= blocks_needed(r, block_size)
                                                for r in running) if paged else None})
        for r in [r for r in running if len(r.tokens) == r.max_new]:
            cache.free(r.rid)
            r.finished = iteration
            running.remove(r)
        iteration += 1
    return trace


def make_requests(specs, seed):
    gen = torch.Generator().manual_seed(seed)
    return [Request(rid, torch.randint(0, cfg.vocab, (prompt_len,), generator=gen), max_new, arrival)
            for rid, (prompt_len, max_new, arrival) in enumerate(specs)]


ALONE_CACHE = {}


def alone(request):
    # [en] The reference for one request: the first notebook's cache, batch 1; then a full recomputation.
    # [zh] 单个请求的参照：第一份笔记本的缓存，batch 为 1；再做一次完整重算。
    key = (tuple(request.prompt.tolist()), request.max_new)
    if key not in ALONE_CACHE:
        ALONE_CACHE[key] = generate_alone(model, request.prompt, steps=request.max_new - 1)
    return ALONE_CACHE[key]


def request_logits(request):
    return torch.cat([request.logits[0]] + [l for l in request.logits[1:]])   # [prompt + max_new - 1, vocab]


# [en] (prompt tokens, output tokens, arrival)
# [zh] （提示 token 数，输出 token 数，到达轮次）
REUSE_SPECS = [(9, 6, 0), (14, 12, 0), (5, 3, 0), (11, 8, 0), (7, 10, 0), (13, 5, 0)]
REUSE_BLOCKS = 24


def check_schedule(requests, trace, num_blocks, block_size, max_batch) -> dict:
    # [en] The scheduler's promises, read from the trace. At each iteration, after admission, the first
    # [en] request still waiting must have had a reason to wait: not arrived yet, a full batch, or too few blocks.
    # [zh] 从逐轮记录中读出调度器的承诺。每一轮接纳结束后，仍在等待的第一个请求必须有等待的理由：
    # [zh] 尚未到达、batch 已满，或者物理块不够。
    queue = sorted(requests, key=lambda r: (r.arrival, r.rid))
    order = [rid for t in trace for rid in t["admitted"]]
    head_waited_for = {"arrival": 0, "batch": 0, "blocks": 0, "nothing": 0}
    for t in trace:
        waiting = [r for r in queue if r.admitted > t["iteration"]]
        if waiting:
            head = waiting[0]
            reason = ("arrival" if head.arrival > t["iteration"] else "batch" if t["running"] >= max_batch
                      else "blocks" if t["blocks_reserved"] + blocks_needed(head, block_size) > num_blocks else "nothing")
            head_waited_for[reason] += 1
    return {
        "max_running": max(t["running"] for t in trace),
        "cap_respected": all(t["running"] <= max_batch for t in trace),
        "admission_order": order,
        "first_come_first_served": order == [r.rid for r in queue],
        "none_before_arrival": all(r.arrival <= r.admitted == t["iteration"] for t in trace for r in requests if r.rid in t["admitted"]),
        "head_waited_for": head_waited_for,
        "no_needless_wait": head_waited_for["nothing"] == 0,
    }


def schedule_kept(schedule) -> bool:
    return (schedule["cap_respected"] and schedule["first_come_first_served"] and schedule["none_before_arrival"]
            and schedule["no_needless_wait"])


def check_reuse_paged(pool_class=BlockPool, spare_blocks=0) -> dict:
    paged_requests, contiguous_requests = make_requests(REUSE_SPECS, SEED + 3), make_requests(REUSE_SPECS, SEED + 3)
    pool = pool_class(cfg, REUSE_BLOCKS + spare_blocks, BLOCK_SIZE)
    trace = serve(model, PagedCache(pool), paged_requests, REUSE_BLOCKS, BLOCK_SIZE, max_batch=3)
    serve(model, ContiguousCache(cfg), contiguous_requests, REUSE_BLOCKS, BLOCK_SIZE, max_batch=3)
    tol = TOLERANCE[torch.float32]
    return {
        "bit_exact_vs_contiguous": all(torch.equal(request_logits(a), request_logits(b))
                                       for a, b in zip(paged_requests, contiguous_requests)),
        "max_abs_logit_err_vs_contiguous": worst(max_abs_err(request_logits(a), request_logits(b))
                                               for a, b in zip(paged_requests, contiguous_requests)),
        "max_abs_logit_err_vs_alone": worst(max_abs_err(request_logits(r), alone(r)["logits"]) for r in paged_requests),
        "close_to_alone": all(torch.allclose(request_logits(r), alone(r)["logits"], atol=tol, rtol=tol) for r in paged_requests),
        "tokens_as_alone": all(r.tokens == alone(r)["tokens"] for r in paged_requests),
        "finite": all(bool(torch.isfinite(request_logits(r)).all()) for r in paged_requests),
        "reused_blocks": len(pool.allocations) - len(set(pool.allocations)),
        "all_returned": pool.used() == 0 and len(pool.free) == pool.num_blocks,
        "within_reservation": all(t["within_reservation"] for t in trace),
        "iterations": len(trace),
        "admitted": [r.admitted for r in paged_requests],
        "schedule": check_schedule(paged_requests, trace, REUSE_BLOCKS, BLOCK_SIZE, max_batch=3),
    }


REUSE = check_reuse_paged()
say(en=(f"Six requests over {REUSE_BLOCKS} blocks: admitted at iterations {REUSE['admitted']}, "
        f"{REUSE['reused_blocks']} allocations of a block that an earlier request had used; bit-exact vs the "
        f"contiguous cache: `{REUSE['bit_exact_vs_contiguous']}`; tokens as alone: `{REUSE['tokens_as_alone']}` "
        f"(largest logit difference from the alone runs {REUSE['max_abs_logit_err_vs_alone']:.1e}); every request within its reservation: `{REUSE['within_reservation']}`; all blocks back in the pool: `{REUSE['all_returned']}`."),
    zh=(f"六个请求共用 {REUSE_BLOCKS} 个物理块：被接纳的轮次依次为 {REUSE['admitted']}；有 {REUSE['reused_blocks']} 次分配拿到的是先前请求用过的物理块；"
        f"与连续缓存逐比特相同：`{REUSE['bit_exact_vs_contiguous']}`；token 与单独运行时相同：`{REUSE['tokens_as_alone']}`"
        f"（与单独运行相比，logits 的最大差异为 {REUSE['max_abs_logit_err_vs_alone']:.1e}）；每个请求都未超出预留：`{REUSE['within_reservation']}`；全部物理块都已归还：`{REUSE['all_returned']}`。"))
assert REUSE["bit_exact_vs_contiguous"] and REUSE["tokens_as_alone"] and REUSE["close_to_alone"] and REUSE["finite"]
assert REUSE["reused_blocks"] > 0 and REUSE["all_returned"] and REUSE["within_reservation"]
# [en] The scheduler: at most three running (and three reached), first come first served, nobody waiting in vain.
# [zh] 调度器：同时运行的请求最多三个（而且确实达到了三个），先来先服务，没有请求白白等待。
say(en=f"Scheduler: admission order {REUSE['schedule']['admission_order']}, at most {REUSE['schedule']['max_running']} running; "
       f"iterations in which the first waiting request waited for a place in the batch: {REUSE['schedule']['head_waited_for']['batch']}, "
       f"for blocks: {REUSE['schedule']['head_waited_for']['blocks']}.",
    zh=f"调度器：接纳顺序为 {REUSE['schedule']['admission_order']}，同时运行的请求最多 {REUSE['schedule']['max_running']} 个；"
       f"排在最前面的等待请求因 batch 已满而等待的轮数：{REUSE['schedule']['head_waited_for']['batch']}，"
       f"因物理块不够而等待的轮数：{REUSE['schedule']['head_waited_for']['blocks']}。")
assert schedule_kept(REUSE["schedule"])
# [en] The cap was really in force: three requests ran at once, and a request had to wait for a place in the batch.
# [zh] 上限确实起了作用：曾有三个请求同时运行，也确实有请求要等待 batch 中的空位。
assert REUSE["schedule"]["max_running"] == 3 and max(REUSE["admitted"]) > 0 and REUSE["schedule"]["head_waited_for"]["batch"] > 0
# [en] The setting the text describes: six requests, a pool of 24 blocks of 4 positions, at most three at a time.
# [zh] 正文所说的设置：六个请求，24 个物理块、每块 4 个位置，同时最多运行三个。
assert (len(REUSE_SPECS), REUSE_BLOCKS, BLOCK_SIZE) == (6, 24, 4)

# %% tags=["prose-values"]
{"reuse": {"max_abs_logit_err_vs_alone": float(REUSE["max_abs_logit_err_vs_alone"])}}

# %% [markdown] lang="en"
# Batched decoding need not be bit-identical to decoding alone: the same row sits in matrices of other
# shapes, whose sums a kernel may group differently (in this run the largest difference was
# {{run:reuse.max_abs_logit_err_vs_alone:.1e}}). That is why the comparison with the alone runs uses the
# FP32 tolerance, while the comparison of the two caches under the same schedule asks for exact
# equality: there every call is the same call on the same inputs.
#
# **Third criterion: prefix sharing.** Two requests start with the same 14-token prompt (a shared
# system prompt, say) and then continue with different tokens of their own (5 and 9 of them), before 8
# greedy steps each. The prompt is prefilled once; the second sequence forks from the first, sharing
# its blocks. With blocks of 4 positions the 14 prompt positions fill three blocks and half of a
# fourth. The three full blocks stay shared to the end. The half-filled one is copied when the first
# sequence writes into it; after that copy the second sequence is its only holder, and writes into it
# in place. Both must equal, bit for bit, the same calls over the contiguous cache, and
# within the tolerance a full recomputation of their own tokens.

# %% [markdown] lang="zh"
# 批量解码不一定与单独解码逐比特相同：同一行数据处在形状不同的矩阵里，算子求和时可能采用不同的分组方式（本次运行中最大差异为 {{run:reuse.max_abs_logit_err_vs_alone:.1e}}）。所以与单独运行的比较采用 FP32 容差，而两种缓存在同一调度下的比较则要求逐比特相同：那里的每次调用都是同样的输入上的同样的调用。
#
# **第三条判据：前缀共享**。两个请求以同一段 14 个 token 的提示开头（比如共用的系统提示），之后各自接上不同的 token（分别 5 个和 9 个），再各做 8 步贪心生成。共用的提示只预填充一次；第二条序列从第一条分叉出来，共享它的物理块。物理块大小为 4 时，14 个提示位置占满三个物理块，再加半个。三个满的物理块一直共享到最后。半满的那个物理块在第一条序列写入时被复制；复制之后，第二条序列成了它唯一的持有者，直接在原处写入。两条序列的结果都必须与同样的调用在连续缓存上的结果逐比特相同，并在容差范围内等于对各自 token 的完整重算。

# %%
SHARED_PROMPT_LEN, TAILS, SHARED_STEPS = 14, (5, 9), 8
gen = torch.Generator().manual_seed(SEED + 4)
SHARED_PROMPT = torch.randint(0, cfg.vocab, (SHARED_PROMPT_LEN,), generator=gen)
SHARED_TAILS = [torch.randint(0, cfg.vocab, (n,), generator=gen) for n in TAILS]


@torch.inference_mode()
def run_shared(cache):
    # [en] Prefill the shared prompt once, fork, feed each tail, then decode both together.
    # [zh] 共用提示只预填充一次，然后分叉，分别送入各自的后续 token，再一起解码。
    ones = lambda n: torch.ones(1, n, dtype=torch.bool)
    cache.add("a")
    prompt_logits = store_forward(model, SHARED_PROMPT[None], ones(SHARED_PROMPT_LEN), SeqBatchStore(cache, ["a"]))
    cache.fork("a", "b")
    shared_after_fork = list(cache.tables["a"]) if hasattr(cache, "pool") else None
    runs = {}
    for seq, tail in zip("ab", SHARED_TAILS):
        logits = store_forward(model, tail[None], ones(len(tail)), SeqBatchStore(cache, [seq]))
        runs[seq] = {"logits": [prompt_logits[0], logits[0]], "tokens": [int(logits[0, -1].argmax())]}
    for _ in range(SHARED_STEPS - 1):
        ids = torch.tensor([[runs[s]["tokens"][-1]] for s in "ab"])
        logits = store_forward(model, ids, torch.ones(2, 1, dtype=torch.bool), SeqBatchStore(cache, ["a", "b"]))
        for row, s in enumerate("ab"):
            runs[s]["logits"].append(logits[row])
            runs[s]["tokens"].append(int(logits[row, -1].argmax()))
    for s in "ab":
        runs[s]["logits"] = torch.cat(runs[s]["logits"])
    return runs, shared_after_fork


def check_shared(cache_class=PagedCache) -> dict:
    pool = BlockPool(cfg, 16, BLOCK_SIZE)
    paged = cache_class(pool)
    runs, shared_after_fork = run_shared(paged)
    contiguous, _ = run_shared(ContiguousCache(cfg))
    tables = {s: list(paged.tables[s]) for s in "ab"}
    full_blocks = SHARED_PROMPT_LEN // BLOCK_SIZE
    tol, full = TOLERANCE[torch.float32], {}
    with torch.inference_mode():
        for s, tail in zip("ab", SHARED_TAILS):
            sequence = torch.cat((SHARED_PROMPT, tail, torch.tensor(runs[s]["tokens"][:-1])))
            full[s] = model(sequence[None])[0][0]
    return {
        "bit_exact_vs_contiguous": all(torch.equal(runs[s]["logits"], contiguous[s]["logits"]) for s in "ab"),
        "max_abs_logit_err_vs_full": worst(max_abs_err(runs[s]["logits"], full[s]) for s in "ab"),
        "max_abs_logit_err_vs_contiguous": worst(max_abs_err(runs[s]["logits"], contiguous[s]["logits"]) for s in "ab"),
        "close_to_full": all(torch.allclose(runs[s]["logits"], full[s], atol=tol, rtol=tol) for s in "ab"),
        "tokens_as_full": all(runs[s]["tokens"] == full[s][SHARED_PROMPT_LEN + len(t) - 1:].argmax(-1).tolist()
                              for s, t in zip("ab", SHARED_TAILS)),
        "finite": all(bool(torch.isfinite(runs[s]["logits"]).all()) for s in "ab"),
        "shared_blocks": [b for b in tables["a"] if b in tables["b"]],
        "full_prompt_blocks": shared_after_fork[:full_blocks],
        "partial_block_copied": shared_after_fork[full_blocks] in tables["b"] and shared_after_fork[full_blocks] not in tables["a"],
        "blocks_in_use": pool.used(),
        "blocks_without_sharing": sum(math.ceil(len(runs[s]["logits"]) / BLOCK_SIZE) for s in "ab"),
        "tables": tables,
    }


SHARED = check_shared()
say_table([[f"`{seq}`", str(table)] for seq, table in SHARED["tables"].items()], en=["sequence", "block table"], zh=["序列", "块表"])
say(en=(f"Shared blocks {SHARED['shared_blocks']} (the full prompt blocks); the half-filled prompt block was copied on the first sequence's write: "
        f"`{SHARED['partial_block_copied']}`; {SHARED['blocks_in_use']} blocks in use instead of {SHARED['blocks_without_sharing']}. "
        f"Bit-exact vs the contiguous cache: `{SHARED['bit_exact_vs_contiguous']}`; largest logit difference from full recomputation "
        f"{SHARED['max_abs_logit_err_vs_full']:.1e}."),
    zh=(f"共享的物理块为 {SHARED['shared_blocks']}（即提示中已填满的几个物理块）；提示中半满的那个物理块在第一条序列写入时被复制：`{SHARED['partial_block_copied']}`；"
        f"使用中的物理块为 {SHARED['blocks_in_use']} 个，不共享则需要 {SHARED['blocks_without_sharing']} 个。与连续缓存逐比特相同：`{SHARED['bit_exact_vs_contiguous']}`；"
        f"与完整重算相比，logits 的最大差异为 {SHARED['max_abs_logit_err_vs_full']:.1e}。"))
assert SHARED["bit_exact_vs_contiguous"] and SHARED["close_to_full"] and SHARED["tokens_as_full"] and SHARED["finite"]
assert SHARED["shared_blocks"] == SHARED["full_prompt_blocks"] and len(SHARED["shared_blocks"]) == SHARED_PROMPT_LEN // BLOCK_SIZE
assert SHARED["partial_block_copied"] and SHARED["blocks_in_use"] == SHARED["blocks_without_sharing"] - len(SHARED["shared_blocks"])
# [en] The setting the text describes: a 14-token prompt, tails of 5 and 9 tokens, 8 greedy steps, blocks of 4.
# [zh] 正文所说的设置：14 个 token 的提示，5 个和 9 个 token 的后续部分，8 步贪心生成，物理块大小为 4。
assert (SHARED_PROMPT_LEN, TAILS, SHARED_STEPS, BLOCK_SIZE) == (14, (5, 9), 8, 4)

# %% [markdown] lang="en"
# **Negative controls.** Three bookkeeping mistakes, each in a subclass that changes one method, each
# run through the same checks:
#
# * **off-by-one block offset**: `reserve` hands out the slot one past the block's fill count, so each
#   position is written one slot too far while `read` reads the slots the block counts as filled;
# * **reused block not cleared**: `release` returns a block to the free list without resetting its
#   fill count; its next owner appends behind slots it never wrote, and reads them (this pool gets
#   spare blocks: stale fill counts make sequences take more blocks than the schedule reserved, and
#   running out of blocks would also be a failure, but a less informative one);
# * **shared block written in place**: no copy-on-write; the first sequence to continue after the fork
#   appends into the block it shares with the other, which then reads a token that is not its own.

# %% [markdown] lang="zh"
# **负对照**：三种记账错误，各自写成只改动一个方法的子类，都交给同样的检查：
#
# * **物理块内偏移差一**：`reserve` 分配的槽位比物理块的已填计数多一，于是每个位置都往后多偏了一个槽位，而 `read` 读取的仍是物理块记为已填的那些槽位；
# * **复用的物理块没有清理**：`release` 把物理块放回空闲列表，却没有把它的已填计数清零；下一个持有者会接在并非自己写入的槽位之后追加，并读取这些槽位（这个池多给了一些备用物理块：过期的已填计数会让序列占用比调度预留更多的物理块，而物理块耗尽虽然也算失败，提供的信息却更少）；
# * **原地写入共享的物理块**：不做写时复制；分叉后先继续生成的那条序列，会把 token 追加到与另一条序列共享的物理块里，另一条序列随之读到不属于自己的 token。

# %%
class OffByOneOffset(PagedCache):
    def reserve(self, seq, n):
        addresses = super().reserve(seq, n)
        # [en] WRONG on purpose: one slot too far.
        # [zh] 故意写错：多偏了一个槽位。
        return (addresses + 1) % (self.pool.num_blocks * self.pool.block_size)


class NotClearedPool(BlockPool):
    def clear(self, block):
        for t in self.k + self.v:
            # [en] WRONG on purpose: the fill count is kept.
            # [zh] 故意写错：保留了已填计数。
            t[block] = float("nan")


class NoCopyOnWrite(PagedCache):
    def copy_on_write(self, seq):
        # [en] WRONG on purpose: write into the shared block.
        # [zh] 故意写错：直接写入共享的物理块。
        pass


def paged_verdict(r, passed_key):
    error_key = "max_abs_logit_err" if passed_key == "close_vs_cat" else "max_abs_logit_err_vs_contiguous"
    return {"max_abs_logit_err": r[error_key], "finite": r["finite"], "detected": not r[passed_key]}


def off_by_one_run():
    pool = BlockPool(cfg, 32, BLOCK_SIZE)
    out = generate_seqs(model, OffByOneOffset(pool), PROMPTS)
    return {"max_abs_logit_err": worst(max_abs_err(a, b) for a, b in zip(out["logits"], cat_run["logits"])),
            "finite": all(bool(torch.isfinite(a).all()) for a in out["logits"]),
            "close_vs_cat": all(close(a, b) for a, b in zip(out["logits"], cat_run["logits"]))}


not_cleared_run = check_reuse_paged(pool_class=NotClearedPool, spare_blocks=REUSE_BLOCKS)
PAGED_CONTROLS = {
    "off_by_one_block_offset": paged_verdict(off_by_one_run(), "close_vs_cat"),
    "reused_block_not_cleared": paged_verdict(not_cleared_run, "bit_exact_vs_contiguous"),
    "shared_block_written_in_place": paged_verdict(check_shared(cache_class=NoCopyOnWrite), "bit_exact_vs_contiguous"),
}
say_table([[f"`{name}`", f"{c['max_abs_logit_err']:.3e}", f"`{c['finite']}`", f"`{c['detected']}`"] for name, c in PAGED_CONTROLS.items()],
          en=["broken variant", "max abs logit error", "finite", "caught"],
          zh=["改坏的版本", "最大 logits 绝对误差", "数值有限", "查出"])
assert all(c["detected"] for c in PAGED_CONTROLS.values())
# [en] The NaN pool exposes the unwritten slot and the stale slots of a reused block; writing into a shared block gives finite, wrong numbers, which the comparison catches.
# [zh] NaN 池暴露了未写入的槽位，以及复用物理块中过期的槽位；写入共享物理块给出的是有限但错误的数，由比较查出。
assert not PAGED_CONTROLS["off_by_one_block_offset"]["finite"]
assert not PAGED_CONTROLS["reused_block_not_cleared"]["finite"]
assert PAGED_CONTROLS["shared_block_written_in_place"]["finite"]
# [en] The other checks of the second criterion fail on this control too: the comparison with the alone runs, and the
# [en] reservation (stale fill counts make a request take more blocks than were reserved for it).
# [zh] 这个负对照也让第二个判据的其余检查失败：与单独运行的比较，以及预留检查（过期的已填计数让请求占用的物理块超出为它预留的数量）。
assert not not_cleared_run["close_to_alone"] and not not_cleared_run["within_reservation"]
