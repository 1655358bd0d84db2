# %% [markdown] lang="en"
# **A ring buffer for a window.** `RingKV` keeps the newest `slots` positions in a buffer allocated once:
# position $p$ lives in slot $p \bmod \mathrm{slots}$ and overwrites the position that was there. A call first
# reads the ring's contents plus its own new chunk, and only then writes the newest positions, so a chunk
# longer than the ring never overwrites a key that one of its own queries still reads. After the ring wraps,
# its slots are no longer in position order. For correctness that does not matter: every key carries its
# position and the mask is computed from positions. For rounding it does, since sums taken in another order
# round differently; so `contents()` reads the filled slots oldest first, and attention adds the same terms
# in the same order as a cache kept in position order. `WindowAttention` is the attention layer with two
# methods replaced: the band mask ($p^q_i - W < p^k_j \le p^q_i$, `band_mask`) and a ring of $W - 1$ slots.

# %% [markdown] lang="zh"
# **给窗口用的环形缓冲区。** `RingKV` 把最新的 `slots` 个位置存在一个只分配一次的缓冲区里：位置 $p$ 存放在第 $p \bmod \mathrm{slots}$ 个槽位，覆盖原先在那里的位置。每次调用先读取环形缓冲区的内容和本次的新分块，然后才写入最新的位置；这样，即使分块比环形缓冲区还长，写入也不会覆盖同一分块中某个查询还要读取的键。缓冲区绕回之后，槽位就不再按位置排序。就正确性而言，这没有关系：每个键都带着自己的位置，掩码也由位置算出。但对舍入误差来说，顺序是有影响的，换一种顺序求和，舍入结果就会不同。所以 `contents()` 按位置从旧到新读取已填充的槽位，注意力求和时就以相同的顺序累加相同的项，与按位置顺序保存的缓存一样。`WindowAttention` 就是替换了两个方法的注意力层：带状掩码（$p^q_i - W < p^k_j \le p^q_i$，即 `band_mask`），以及有 $W - 1$ 个槽位的环形缓冲区。

# %%
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
            self.k = k.new_zeros(k.shape[0], k.shape[1], self.slots, k.shape[-1])      # [B, H_kv, slots, D]
            self.v = torch.zeros_like(self.k)
        old_k, old_v, old_pos = self.contents()
        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)
        key_pos = torch.cat((old_pos, positions))
        self.write(k, v, positions)
        self.seen += len(positions)
        return keys, values, key_pos

    def write(self, k, v, positions):
        # [en] Only the newest `slots` positions of the chunk are written.
        # [zh] 只写入分块中最新的 `slots` 个位置。
        newest = positions[-self.slots:]
        slot = newest % self.slots
        self.k[:, :, slot] = k[:, :, -len(newest):]
        self.v[:, :, slot] = v[:, :, -len(newest):]
        self.positions[slot] = newest

    def contents(self):
        # [en] The filled slots, oldest position first.
        # [zh] 已填充的槽位，按位置从旧到新。
        filled = (self.positions >= 0).nonzero().flatten()
        filled = filled[self.positions[filled].argsort()]
        return self.k[:, :, filled], self.v[:, :, filled], self.positions[filled]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v))


def band_mask(query_pos, key_pos, window: int):
    # bool [T_new, T_keys]: p_q - W < p_k <= p_q
    return causal(query_pos, key_pos) & (key_pos[None, :] > query_pos[:, None] - window)


class WindowAttention(Attention):
    def __init__(self, c: ArchConfig, window: int):
        super().__init__(c)
        self.window = window

    def new_cache(self, caches: list):
        return RingKV(self.window - 1)

    def mask(self, query_pos, key_pos):
        return band_mask(query_pos, key_pos, self.window)
