# %% [markdown] lang="en"
# **The block pool.** `BlockPool` holds, per layer, one tensor for K and one for V of shape
# `[num_blocks, block_size, H, Dh]`, addressed as `block * block_size + slot`. Each physical block records
# how many of its slots are filled (its fill count) and how many sequences hold it (its reference count),
# so that sequences can share blocks. `hold` counts one more holder and `release` one fewer; a block whose reference count drops to 0 goes to `reclaim`, which empties it and
# puts it back on the free list (a subclass may keep it instead: a prefix cache keeps its K/V for later
# requests). Two test instruments: the pool starts filled with NaN, and a released
# block is filled with NaN again (a real engine would not spend the time), so any read of a slot the
# reader did not write turns the logits into NaN. The free list is shuffled with a seeded generator, so
# block tables are random, not consecutive. A pool with no free block raises a `RuntimeError`.
#
# *An aside, how vLLM differs:* its blocks keep a reference count too, and a block hash for prefix
# caching; how many slots of a sequence's last block are filled, vLLM derives from the number of tokens
# the request has computed, so a block needs no fill count of its own there.

# %% [markdown] lang="zh"
# **物理块池**：`BlockPool` 在每一层各有一个 K 张量和一个 V 张量，形状为 `[num_blocks, block_size, H, Dh]`，按 `block * block_size + slot` 寻址。每个物理块记录自己已填了多少个槽位（已填计数），以及有几条序列持有它（引用计数），这样多条序列才能共享物理块。`hold` 把持有者数加一，`release` 把它减一；引用计数降到 0 的物理块交给 `reclaim`，由它清空这个物理块并放回空闲列表（子类可以改为保留它：前缀缓存（prefix caching）就把其中的 K/V 留给以后的请求）。另有两个检测手段：池一开始填满 NaN；物理块被释放时再次填满 NaN（真正的推理引擎不会在这上面花时间）。这样，只要读到不是自己写入的槽位，logits 就会变成 NaN。空闲列表用固定种子的随机数打乱，所以块表里的编号是随机的，而不是连续的。池中没有空闲物理块时，分配会抛出 `RuntimeError`。
#
# *附带一提，vLLM 的不同之处*：它的物理块同样记录引用计数，为前缀缓存还记录块哈希；序列最后一个物理块填到了第几个槽位，vLLM 由请求已计算的 token 数推出，所以它的物理块本身不需要已填计数。

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
            raise RuntimeError(f"free == [] (num_blocks = {self.num_blocks})")
        block = self.free.pop()
        self.refs[block] = 1
        self.allocations.append(block)
        return block

    def hold(self, block):
        self.refs[block] += 1

    def release(self, block):
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.reclaim(block)

    def reclaim(self, block):
        # [en] Nobody holds the block any more: emptied, and back to the free list.
        # [zh] 已没有序列持有这个物理块：清空，放回空闲列表。
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
# **The block tables.** `PagedCache` keeps one block table per sequence. `reserve(seq, n)` finds slots
# for $n$ new positions: it appends to the last block while that block has room, and takes a new block
# from the pool when it is full. It returns the slots' addresses; `write` puts each layer's new K/V
# there, and `read` gathers a sequence's filled slots, block by block, into `[H, length, Dh]`.
#
# `add(seq)` starts a sequence with an empty table; `add(seq, blocks)` starts it with blocks that other
# sequences hold, each block's reference count going up by one. `fork(parent, child)` is `add` with the
# parent's whole table: the child shares all of its parent's blocks, and nothing is copied. `reserve` then applies **copy-on-write**: before writing into a block
# that another sequence also holds, it copies the block into a fresh one and writes there. Full shared
# blocks are never written, so they stay shared. This is what parallel sampling and beam search use: the
# candidates of one request fork from its prompt and share its blocks, and a block is copied only when
# one candidate writes where another still reads. `free(seq)` releases a sequence's blocks, the last one first.

# %% [markdown] lang="zh"
# **块表**：`PagedCache` 为每条序列保存一张块表。`reserve(seq, n)` 为 $n$ 个新位置分配槽位：最后一个物理块还有空位时就往里追加，满了就从池中取一个新的物理块。它返回这些槽位的地址；`write` 把每层新的 K/V 写到那里，`read` 则逐个物理块收集序列已填的槽位，得到 `[H, length, Dh]`。
#
# `add(seq)` 以一张空块表开始一条新序列；`add(seq, blocks)` 则让块表从其他序列持有的物理块开始，每个物理块的引用计数加一。`fork(parent, child)` 就是以父序列的整张块表调用 `add`：子序列共享父序列的全部物理块，什么都不复制。之后 `reserve` 实行**写时复制**（copy-on-write）：要往一个其他序列也持有的物理块里写入之前，先把它复制到一个新的物理块，再写入这个新的物理块。已经填满的共享物理块永远不会再被写入，所以会一直共享下去。并行采样和束搜索用的正是这一机制：同一个请求的几个候选序列从它的提示分叉出来，共享提示的物理块；只有当某个候选要写入另一个候选仍在读取的物理块时，才复制这个物理块。`free(seq)` 从最后一个物理块开始，释放一条序列的全部物理块。

# %%
class PagedCache:
    def __init__(self, pool: BlockPool):
        # [en] sequence -> block table
        # [zh] 序列 → 块表
        self.pool, self.tables = pool, {}

    def add(self, seq, blocks=()):
        # [en] A new sequence; its table may start with blocks that other sequences hold, each held once more.
        # [zh] 新序列；它的块表可以从其他序列持有的物理块开始，每个物理块的持有者加一。
        self.tables[seq] = list(blocks)
        for block in blocks:
            self.pool.hold(block)

    def fork(self, parent, child):
        self.add(child, self.tables[parent])

    def free(self, seq):
        # [en] Last block first.
        # [zh] 从最后一个物理块开始释放。
        for block in reversed(self.tables.pop(seq)):
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

    def pointers(self):
        return [t.data_ptr() for t in self.pool.k + self.pool.v]
