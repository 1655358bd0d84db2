# %% [markdown] lang="en"
# **Two layer caches.** `FullKV` is the first notebook's cache: it keeps every position and grows with
# `torch.cat`, which builds new tensors and never writes into the old ones. `RingKV` keeps only the newest
# `slots` positions, in a buffer allocated once: position $p$ lives in slot $p \bmod \mathrm{slots}$ and
# overwrites the position that was there. A call first reads the ring's contents plus its own new chunk and
# only then writes the newest positions, so a chunk longer than the ring never overwrites a key that one of its
# own queries still reads. After the ring wraps, its slots are no longer in position order; `contents()` reads
# them oldest first, so that attention adds the same numbers in the same order as a cache kept in position
# order (a different order would round differently). Both caches count the tokens they have `seen` (the next
# token's position) and report the bytes they hold (`nbytes`).

# %% [markdown] lang="zh"
# **两种单层缓存。** `FullKV` 就是第一份笔记本的缓存：保留所有位置，用 `torch.cat` 增长；`torch.cat` 会生成新张量，从不改写旧张量。`RingKV` 只保留最新的 `slots` 个位置，存在一个只分配一次的缓冲区里：位置 $p$ 存放在第 $p \bmod \mathrm{slots}$ 个槽位，覆盖原先在那里的位置。每次调用先读取环形缓冲区的内容和本次的新分块，然后才写入最新的位置；这样，即使分块比环形缓冲区还长，写入也不会覆盖同一分块中某个查询还要读取的键。缓冲区绕回之后，槽位就不再按位置排序；`contents()` 按位置从旧到新读取它们，使注意力按与“按位置顺序保存的缓存”相同的顺序累加同样的数（换一种顺序，舍入结果就会不同）。两种缓存都记录已经见过（`seen`）的 token 数（也就是下一个 token 的位置），并报告自己占用的字节数（`nbytes`）。

# %%
class FullKV:
    # [en] One layer's cache that keeps every position: K, V [B, H_kv, T, Dh], positions [T].
    # [zh] 保留所有位置的单层缓存：K、V 形状为 [B, H_kv, T, Dh]，positions 形状为 [T]。
    def __init__(self):
        self.k = self.v = None
        self.positions = torch.empty(0, dtype=torch.long)
        self.seen = 0

    def update(self, k, v, positions):
        self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=-2)
        self.positions = torch.cat((self.positions, positions), dim=-1)
        self.seen += k.shape[-2]
        return self.k, self.v, self.positions

    def contents(self):
        return self.k, self.v, self.positions

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v))


class RingKV:
    # [en] One layer's cache of the newest `slots` positions; position p lives in slot p % slots.
    # [zh] 只保留最新 `slots` 个位置的单层缓存；位置 p 存放在第 p % slots 个槽位。
    def __init__(self, slots: int):
        self.slots, self.seen = slots, 0
        self.k = self.v = None
        # [en] Position held by each slot; -1 marks an empty slot.
        # [zh] 每个槽位存放的位置；-1 表示空槽位。
        self.positions = torch.full((slots,), -1)

    def update(self, k, v, positions):
        if self.k is None:
            self.k = k.new_zeros(k.shape[0], k.shape[1], self.slots, k.shape[3])        # [B, H_kv, slots, Dh]
            self.v = torch.zeros_like(self.k)
        old_k, old_v, old_pos = self.contents()
        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)
        key_pos = torch.cat((old_pos, positions))
        self.write(k, v, positions)
        return keys, values, key_pos

    def write(self, k, v, positions):
        # [en] Only the newest `slots` positions of the chunk are written.
        # [zh] 只写入分块中最新的 `slots` 个位置。
        newest = positions[-self.slots:]
        slot = newest % self.slots
        self.k[:, :, slot] = k[:, :, -len(newest):]
        self.v[:, :, slot] = v[:, :, -len(newest):]
        self.positions[slot] = newest
        self.seen += len(positions)

    def contents(self):
        # [en] The filled slots, oldest position first.
        # [zh] 已填充的槽位，按位置从旧到新。
        filled = (self.positions >= 0).nonzero().flatten()
        filled = filled[self.positions[filled].argsort()]
        return self.k[:, :, filled], self.v[:, :, filled], self.positions[filled]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v))
