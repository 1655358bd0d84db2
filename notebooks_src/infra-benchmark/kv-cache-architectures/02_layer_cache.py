# %% [markdown] lang="en"
# **One cache object per layer.** The first notebook's cache was a list of `(K, V)` pairs. Here each layer
# owns a small object with one method, `update(k, v, positions)`: it stores what the layer hands it and
# returns everything the new queries may read, together with the absolute position of every returned key.
# `contents()` returns what the cache holds (oldest position first), `seen` counts the tokens consumed
# (so it is the next token's position), and `nbytes()` the bytes held. `FullKV` is the first notebook's
# cache in this form: it keeps every position and grows with `torch.cat`, which builds new tensors and
# never writes into the old ones. Caches that keep less (a window, fewer bits, some tokens only) have the
# same methods, so the attention layer never needs to know which one it has.

# %% [markdown] lang="zh"
# **每层一个缓存对象。** 第一份笔记本的缓存是由 `(K, V)` 对组成的列表。这里每一层都拥有一个小对象，它只有一个方法 `update(k, v, positions)`：存下注意力层交给它的内容，返回新查询可以读取的全部内容，以及每个返回的键的绝对位置。`contents()` 返回缓存保存的内容（按位置从旧到新），`seen` 记录已处理的 token 数（也就是下一个 token 的位置），`nbytes()` 给出占用的字节数。`FullKV` 就是改写成这种形式的第一份笔记本的缓存：它保留所有位置，用 `torch.cat` 增长；`torch.cat` 会生成新张量，从不改写旧张量。保留内容更少的缓存（只保留一段窗口、用更少的比特、只保留部分 token）也有同样的方法，所以注意力层不必知道自己拿到的是哪一种缓存。

# %%
class FullKV:
    # [en] One layer's cache that keeps every position: K, V [B, H_kv, T, D], positions [T].
    # [zh] 保留所有位置的单层缓存：K、V 的形状为 [B, H_kv, T, D]，positions 的形状为 [T]。
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
