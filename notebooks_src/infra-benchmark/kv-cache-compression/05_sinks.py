# %% [markdown] lang="en"
# ## 6. Attention sinks: a window that keeps the first tokens
#
# A sliding window over a long stream has a known failure in trained models: once the first tokens leave the
# window, the output degrades. StreamingLLM (Xiao et al., 2023) traced it to **attention sinks**: trained models put
# a large share of every query's attention on the first few tokens, whatever those tokens are, and a softmax that
# loses them must spread that share elsewhere. Its remedy is a cache of $S$ sink tokens (they use $S = 4$) plus the
# $W$ most recent ones (the newest being the query's own token, so $S + W - 1$ are kept between steps). A query at
# position $p$ reads the keys $j < S$ and $p - W < j \le p$.
#
# The subtle part is the position. StreamingLLM numbers the keys **as the cache sees them**: the keys a query
# reads are given positions $0, 1, 2, \dots$ in order, and the query the last one. Their example: with the tokens
# 0, 1, 2, 3, 6, 7, 8 in the cache and token 9 arriving (four sinks and a window of four), the eight tokens the query
# reads get the positions 0 to 7, not their text positions 0, 1, 2, 3, 6, 7, 8, 9.
# The distances RoPE sees therefore stay below $S + W$ however long the stream, which keeps them inside the range the
# model was trained on. But a key's position now changes every time the window slides, so a key cannot be rotated
# once and cached: StreamingLLM caches keys *before* RoPE and rotates them at every read.
#
# We write the rule as two small functions. `sink_window_mask` says which keys a query reads; `cache_positions`
# numbers them, for every query separately, by counting the readable keys to its left (a cumulative sum along the
# key axis). The table applies the rule to the paper's example ($S = 4$, $W = 4$, the query at position 9) and to
# two neighbouring queries of this section's setting ($S = 4$, $W = 8$, positions 20 and 21): the text positions of
# the keys each reads, and the positions the cache gives them. Over the 96-token streams used below, the largest
# distance RoPE sees is {{run:sinks.max_cache_distance}}, against {{run:sinks.max_text_distance}} with text positions.

# %% [markdown] lang="zh"
# ## 6. 注意力汇聚点：保留开头几个 token 的窗口
#
# 在长序列上使用滑动窗口，训练好的模型会出现一个已知的问题：开头的几个 token 一旦离开窗口，输出就变差。StreamingLLM（Xiao 等人，2023）找到了原因，即**注意力汇聚点**：训练好的模型会把每个查询相当大一部分注意力放在开头的几个 token 上，无论这些 token 是什么；softmax 一旦失去它们，就只能把这部分注意力分散到别处。它的办法是让缓存保留 $S$ 个汇聚 token（论文取 $S = 4$），外加最近的 $W$ 个 token（其中最新的一个是查询自己的 token，所以两步之间保留 $S + W - 1$ 个）。位于位置 $p$ 的查询读取键 $j < S$ 以及 $p - W < j \le p$。
#
# 微妙之处在于位置。StreamingLLM **按缓存所见**给键编号：一个查询读取的那些键依次编号为 $0, 1, 2, \dots$，查询本身是最后一个。论文中的例子：缓存里有 token 0、1、2、3、6、7、8，token 9 到来时（4 个汇聚点、窗口大小为 4），查询读取的这八个 token 的位置是 0 到 7，而不是它们在文本中的位置 0、1、2、3、6、7、8、9。这样，无论序列多长，RoPE 看到的距离始终小于 $S + W$，不会超出模型训练时见过的范围。但这也意味着，窗口每滑动一次，键的位置就会变，所以不能把键旋转一次就缓存起来：StreamingLLM 缓存的是 RoPE **之前**的键，每次读取时再旋转。
#
# 我们用两个小函数写出这条规则。`sink_window_mask` 指出一个查询读取哪些键；`cache_positions` 为每个查询分别给这些键编号，办法是数一数它左边有多少个可读的键（沿键的方向求累加和）。下表把这条规则用在论文的例子上（$S = 4$、$W = 4$，位置 9 上的查询），也用在本节设置中两个相邻的查询上（$S = 4$、$W = 8$，位置 20 和 21）：列出每个查询读取的键在文本中的位置，以及缓存给这些键的位置。在下文所用的 96 个 token 的序列上，RoPE 看到的最大距离是 {{run:sinks.max_cache_distance}}，而按文本位置编号则会达到 {{run:sinks.max_text_distance}}。

# %%
SINKS = 4


def sink_window_mask(sinks: int, window: int):
    def mask(query_pos, key_pos):
        # bool [T_new, T_keys]: (j < S | j > p - W) & j <= p
        return causal(query_pos, key_pos) & ((key_pos[None, :] < sinks) | (key_pos[None, :] > query_pos[:, None] - window))
    return mask


def cache_positions(allowed):
    # [en] The position of each key as its query sees it: its rank among the keys that query reads.
    # [zh] 每个键在其查询看来的位置：它在该查询所读取的键中的排名。
    # [en] A key the query does not read gets the number of the nearest read key on its left, or -1 if there is none,
    # [en] which clamp_min(0) makes a valid position 0. Either is harmless: the mask hides that key from that query.
    # [zh] 查询不读取的键，得到的是它左边最近一个被读取的键的编号；左边没有被读取的键时得到 -1，clamp_min(0)
    # [zh] 把它变成合法的位置 0。两种情况都无害：掩码会对这个查询屏蔽该键。
    return (allowed.long().cumsum(dim=-1) - 1).clamp_min(0)                     # [T_new, T_keys]


def read_and_numbered(sinks: int, window: int, query: int) -> tuple[list[int], list[int]]:
    # [en] The text positions of the keys one query reads, and the positions the cache gives them.
    # [zh] 一个查询所读取的键在文本中的位置，以及缓存给这些键的位置。
    allowed = sink_window_mask(sinks, window)(torch.tensor([query]), torch.arange(query + 1))[0]   # [query + 1]
    return torch.arange(query + 1)[allowed].tolist(), cache_positions(allowed[None])[0][allowed].tolist()


SINK_EXAMPLES = {(4, 4, 9): read_and_numbered(4, 4, 9)} | {(SINKS, WINDOW, p): read_and_numbered(SINKS, WINDOW, p) for p in (20, 21)}
say_table([[f"$S = {s},\\ W = {w},\\ p = {q}$", ", ".join(map(str, text)), ", ".join(map(str, cached))]
           for (s, w, q), (text, cached) in SINK_EXAMPLES.items()],
          en=["sinks, window, query position $p$", "text positions read", "cache positions"],
          zh=["汇聚点、窗口、查询位置 $p$", "读取的文本位置", "缓存位置"])
assert SINK_EXAMPLES[(4, 4, 9)] == ([0, 1, 2, 3, 6, 7, 8, 9], list(range(8)))
DENSE_LEN = 96
all_pairs = sink_window_mask(SINKS, WINDOW)(torch.arange(DENSE_LEN), torch.arange(DENSE_LEN))           # [96, 96]
SINK_DISTANCES = {"max_cache_distance": int((all_pairs.sum(dim=-1) - 1).max()), "max_text_distance": DENSE_LEN - 1}
assert SINK_DISTANCES["max_cache_distance"] == SINKS + WINDOW - 1

# %% [markdown] lang="en"
# **The cache.** `SinkRingKV` is a `RingKV` of $W - 1$ slots that keeps the first $S$ positions aside, in a `FullKV`:
# only its `write` and `contents` change, so like `RingKV` it returns its contents plus the new chunk before
# writing, oldest first.

# %% [markdown] lang="zh"
# **缓存。** `SinkRingKV` 是一个有 $W - 1$ 个槽位的 `RingKV`，只是把前 $S$ 个位置单独存在一个 `FullKV` 里：它只改动了 `write` 和 `contents`，所以和 `RingKV` 一样，先返回已有内容加上新分块（按位置从旧到新），然后才写入。

# %%
class SinkRingKV(RingKV):
    # [en] One layer's cache of the first `sinks` positions (in a FullKV) plus the newest `slots` ones (in the ring).
    # [zh] 单层缓存：前 `sinks` 个位置存在一个 FullKV 里，最新的 `slots` 个位置存在环形缓冲区里。
    def __init__(self, sinks: int, slots: int):
        super().__init__(slots)
        self.sinks, self.first = sinks, FullKV()

    def write(self, k, v, positions):
        is_sink = positions < self.sinks
        if is_sink.any():
            self.first.update(k[:, :, is_sink], v[:, :, is_sink], positions[is_sink])
        if (~is_sink).any():
            super().write(k[:, :, ~is_sink], v[:, :, ~is_sink], positions[~is_sink])

    def contents(self):
        ring_k, ring_v, ring_pos = super().contents()
        if self.first.k is None:
            return ring_k, ring_v, ring_pos
        return (torch.cat((self.first.k, ring_k), dim=-2), torch.cat((self.first.v, ring_v), dim=-2),
                torch.cat((self.first.positions, ring_pos)))

    def nbytes(self) -> int:
        return super().nbytes() + (0 if self.first.k is None else self.first.nbytes())

# %% [markdown] lang="en"
# `StreamingAttention` caches K *without* rotating it and rotates at every read. Decoding one token, it rotates the
# query at its own cache position (the last of the keys it reads, its own: the number of those keys minus 1) and each
# cached key once, at its place in the cache (what a real decoder does). A chunk of several tokens needs more, because
# the window slides between its queries. In the table above, a chunk of tokens 20 and 21: query 20 reads key 14 at
# cache position 5, query 21 (whose window no longer holds key 13) at position 4, so key 14 must be rotated once for
# each. The layer therefore rotates, for every (query, key) pair, the key at the position that query gives it, a
# `[B, H, T_new, T_keys, D]` tensor (with $T_\text{new} = 1$, the one-token case above), and then attends under the
# sink-and-window mask. The cell after the class feeds that chunk to a `SinkRingKV` and prints what `cache_positions`
# gives each key, for each of the two queries (in parentheses: keys the mask hides from that query).

# %% [markdown] lang="zh"
# `StreamingAttention` 缓存的是**未经旋转**的 K，每次读取时再旋转。解码单个 token 时，它按查询自己的缓存位置旋转查询（查询本身就是它读取的最后一个键，位置等于它读取的键数减 1），并把每个缓存的键按它在缓存中的位置旋转一次（实际的解码器正是这样做的）。一次送入多个 token 时，这样做就不够了，因为窗口在这些查询之间会滑动。以上表中由 token 20 和 21 组成的分块为例：查询 20 读到的键 14 在缓存位置 5，查询 21（它的窗口里已经没有键 13）读到的键 14 在位置 4，所以键 14 要为这两个查询各旋转一次。因此，这个注意力层为每一对（查询，键）按该查询给这个键的位置旋转键，得到一个 `[B, H, T_new, T_keys, D]` 的张量（$T_\text{new} = 1$ 时就是上面单个 token 的情形），然后在“汇聚点加窗口”的掩码下计算注意力。类定义之后的单元格把这个分块送入一个 `SinkRingKV`，并打印 `cache_positions` 为这两个查询分别赋予每个键的位置（括号里是掩码对该查询屏蔽的键）。

# %%
class StreamingAttention(Attention):
    def __init__(self, c: ArchConfig, sinks: int, window: int):
        super().__init__(c)
        self.sinks, self.window = sinks, window

    def new_cache(self, caches: list):
        return SinkRingKV(self.sinks, self.window - 1)

    def mask(self, query_pos, key_pos):
        return sink_window_mask(self.sinks, self.window)(query_pos, key_pos)

    def forward(self, x, positions, cache):
        q = split_heads(self.q(x), self.heads)
        k = split_heads(self.k(x), self.kv_heads)
        v = split_heads(self.v(x), self.kv_heads)
        # [en] K is cached before RoPE.
        # [zh] 缓存的是 RoPE 之前的 K。
        keys, values, key_pos = cache.update(k, v, positions)
        allowed = self.mask(positions, key_pos)                                    # [T_new, T_keys]
        q = self.rotary(q, allowed.sum(dim=-1) - 1)                                # [B, H, T_new, Dh]
        groups = self.heads // self.kv_heads
        keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
        # [en] Each key rotated once per query that reads it; when decoding one token (T_new = 1),
        # [en] this is just each cached key rotated once.
        # [zh] 每个键对读取它的每个查询各旋转一次；解码单个 token（T_new = 1）时，就是把每个缓存的键旋转一次。
        seen = self.rotary(keys[:, :, None], cache_positions(allowed))            # [B, H, T_new, T_keys, Dh]
        scores = (q[:, :, :, None, :] * seen).sum(dim=-1) * self.head_dim ** -0.5  # [B, H, T_new, T_keys]
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return self.proj(merge_heads(weights @ values))


# %%
# [en] Tokens 0 to 19 one at a time, then the chunk of 20 and 21, as StreamingAttention.forward calls the cache; the
# [en] keys and values are zeros of shape [B, H, T, 1]: only their positions matter here.
# [zh] 先逐个送入 token 0 到 19，再送入 20 和 21 组成的分块，与 StreamingAttention.forward 调用缓存的方式相同；
# [zh] 键和值都是形状为 [B, H, T, 1] 的零张量：这里只关心它们的位置。
demo_cache, dummy = SinkRingKV(SINKS, WINDOW - 1), torch.zeros(1, 1, 1, 1)
for p in range(20):
    demo_cache.update(dummy, dummy, torch.tensor([p]))
chunk = torch.tensor([20, 21])
_, _, key_pos = demo_cache.update(dummy.expand(1, 1, 2, 1), dummy.expand(1, 1, 2, 1), chunk)
allowed = sink_window_mask(SINKS, WINDOW)(chunk, key_pos)                                    # [2, T_keys]
numbered = cache_positions(allowed)                                                         # [2, T_keys]
say_table([[str(q)] + [f"{n}" if a else f"({n})" for n, a in zip(row.tolist(), ok.tolist())]
           for q, row, ok in zip(chunk.tolist(), numbered, allowed)],
          en=["query / key"] + [str(k) for k in key_pos.tolist()], zh=["查询 / 键"] + [str(k) for k in key_pos.tolist()])
# [en] The same key at two places: key 14 is at cache position 5 for query 20 and at 4 for query 21, as in the table above.
# [zh] 同一个键处在两个位置：对查询 20，键 14 的缓存位置是 5；对查询 21，是 4，与上表一致。
assert numbered[:, key_pos.tolist().index(14)].tolist() == [cached[text.index(14)] for (_, _, p), (text, cached) in SINK_EXAMPLES.items()
                                                           if p in (20, 21)] == [5, 4]

# %% [markdown] lang="en"
# **The definition, one query at a time.** To check the vectorized layer and its cache we need the rule written
# independently. `StreamingByQuery` is used only as the full recomputation: for each query it lists the keys it
# reads, numbers them $0, 1, \dots$, rotates the query and those keys, and attends to them alone, with no mask,
# no cumulative sum and no ring.

# %% [markdown] lang="zh"
# **按定义逐个查询计算。** 为了检验向量化的注意力层及其缓存，我们需要一份独立写出的规则。`StreamingByQuery` 只用作完整重算：对每个查询，它列出该查询读取的键，把它们编号为 $0, 1, \dots$，旋转查询和这些键，然后只在这些键上计算注意力；不用掩码，不用累加和，也不用环形缓冲区。

# %%
class StreamingByQuery(StreamingAttention):
    def forward(self, x, positions, cache):
        q = split_heads(self.q(x), self.heads)
        k = split_heads(self.k(x), self.kv_heads)
        v = split_heads(self.v(x), self.kv_heads)
        keys, values, key_pos = cache.update(k, v, positions)
        groups = self.heads // self.kv_heads
        keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
        rows = []
        for i, p in enumerate(positions.tolist()):
            read = [j for j, kp in enumerate(key_pos.tolist()) if kp <= p and (kp < self.sinks or kp > p - self.window)]
            numbered = torch.arange(len(read))
            q_i = self.rotary(q[:, :, i:i + 1], numbered[-1:])                     # [B, H, 1, Dh]
            k_i = self.rotary(keys[:, :, read], numbered)                          # [B, H, len(read), Dh]
            weights = (q_i @ k_i.transpose(-2, -1) * self.head_dim ** -0.5).softmax(dim=-1)
            rows.append(weights @ values[:, :, read])
        return self.proj(merge_heads(torch.cat(rows, dim=2)))

# %% [markdown] lang="en"
# **Criterion: the streaming cache equals full recomputation of the same sparse pattern.** The cached
# `StreamingAttention` model (chunks of 1, 2 and 5) against one full call of `StreamingByQuery` with the same weights,
# over the 12 configurations; with $S = 4$, $W = 8$ and 24 tokens, the window slides past the sinks after 12 tokens.
# The caches must also hold the same pre-RoPE keys, never more than $S + W - 1$ positions.

# %% [markdown] lang="zh"
# **判据：流式缓存等于对同一稀疏注意力模式的完整重算。** 带缓存的 `StreamingAttention` 模型（分块长度 1、2、5）与同一份权重下 `StreamingByQuery` 的一次完整调用相比较，共 12 种配置；取 $S = 4$、$W = 8$、24 个 token，处理完 12 个 token 之后，窗口就滑过了汇聚点。两边的缓存还必须保存相同的、RoPE 之前的键，而且位置数从不超过 $S + W - 1$。

# %%
def streaming(sinks: int = SINKS, window: int = WINDOW, layer=StreamingAttention):
    return lambda i: layer(llama_cfg, sinks, window)


STREAMING_GRID = run_grid(lambda: build(llama_cfg, streaming()), reference=lambda: build(llama_cfg, streaming(layer=StreamingByQuery)))
summary_table({"`StreamingAttention` / `StreamingByQuery`": STREAMING_GRID})
with torch.inference_mode():
    _, stream_cache = run_chunked(build(llama_cfg, streaming()), STREAM, 5)
assert all(r["passed"] for r in STREAMING_GRID)
assert all(c.contents()[2].tolist() == list(range(SINKS)) + list(range(STREAM_LEN - WINDOW + 1, STREAM_LEN)) for c in stream_cache)

# %% [markdown] lang="en"
# **Negative control: keys rotated once, when cached.** The habit from ordinary RoPE caches: rotate each key when it
# is written, at the position it has at that moment, and never again. Until the window first slides, that position is
# right; afterwards every key keeps a stale rotation while its cache position moves. The check must fail.

# %% [markdown] lang="zh"
# **负对照：键在存入缓存时旋转一次。** 这是沿用普通 RoPE 缓存的习惯：每个键在写入时按它当时的位置旋转，以后再也不转。在窗口第一次滑动之前，这个位置是对的；之后，键的缓存位置在变，它的旋转却停在了过去。检查必须失败。

# %%
class RotatedOnWrite(StreamingAttention):
    # [en] WRONG on purpose: a key is rotated once, when cached, at the cache position it has then (min(p, S + W - 1)).
    # [zh] 故意写错：键只在存入缓存时按当时的缓存位置（min(p, S + W - 1)）旋转一次。
    def forward(self, x, positions, cache):
        q = split_heads(self.q(x), self.heads)
        k = self.rotary(split_heads(self.k(x), self.kv_heads), positions.clamp(max=self.sinks + self.window - 1))
        v = split_heads(self.v(x), self.kv_heads)
        keys, values, key_pos = cache.update(k, v, positions)
        allowed = self.mask(positions, key_pos)
        q = self.rotary(q, allowed.sum(dim=-1) - 1)
        return self.proj(merge_heads(softmax_attention(q, keys, values, allowed)))


CONTROLS["keys_rotated_once_when_cached"] = {"section": 6, **run_control(lambda: build(llama_cfg, streaming(layer=RotatedOnWrite)),
                                                                          reference=lambda: build(llama_cfg, streaming(layer=StreamingByQuery)))}
say(en=f"Keys rotated once, when cached: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['keys_rotated_once_when_cached']['measured']:.2f}): caught.",
    zh=f"键在存入缓存时只旋转一次：分块长度为 1、2、5 时检查全部失败（logits 的最大绝对误差最小也有 "
       f"{CONTROLS['keys_rotated_once_when_cached']['measured']:.2f}），已查出。")
assert CONTROLS["keys_rotated_once_when_cached"]["caught"]

# %% [markdown] lang="en"
# **How far from dense attention?** Exactness was against the sparse pattern; against the dense model with the same
# weights (ordinary causal attention, text positions) the streaming cache is an approximation. On two streams of 96
# tokens, fed one token at a time, the cell measures the largest logit difference at every position, for sinks plus
# window and for the window alone ($S = 0$). Up to position $S + W - 1$ a query reads every earlier key and the cache
# positions equal the text positions, so both must equal dense attention within FP32's tolerance there (the window
# alone only up to $W - 1$). Beyond it they differ, and we report by how much, with the share of positions whose
# greedy (argmax) token is still the dense model's, from position $S + W$ on for both.

# %% [markdown] lang="zh"
# **离稠密注意力有多远？** 前面的精确性是相对稀疏模式而言的；与同一份权重的稠密模型（普通因果注意力，按文本位置编号）相比，流式缓存只是一种近似。下面的单元格取两条各 96 个 token 的序列，逐个 token 送入，测量每个位置上 logits 的最大绝对误差：一种是汇聚点加窗口，另一种是只有窗口（$S = 0$）。直到位置 $S + W - 1$，查询都能读到之前的每一个键，缓存位置也等于文本位置，所以在这一段两者都必须在 FP32 的容差内等于稠密注意力（只有窗口时，只到 $W - 1$ 为止）。过了这一段就会出现差异，我们报告差异有多大，以及从位置 $S + W$ 起（两者相同），贪心（argmax）选出的 token 仍与稠密模型相同的位置所占的比例。

# %%
long_stream = torch.randint(0, llama_cfg.vocab, (2, DENSE_LEN), generator=torch.Generator().manual_seed(SEED + 2))
with torch.inference_mode():
    dense_logits, _ = build(llama_cfg)(long_stream)
    approx_logits = {"sinks_and_window": run_chunked(build(llama_cfg, streaming()), long_stream, 1)[0],
                     "window_only": run_chunked(build(llama_cfg, streaming(sinks=0)), long_stream, 1)[0]}
exact_until = {"sinks_and_window": SINKS + WINDOW, "window_only": WINDOW}
STREAMING_LABELS = {"sinks_and_window": f"S = {SINKS}, W = {WINDOW}", "window_only": f"S = 0, W = {WINDOW}"}
DENSE_DISTANCE = {name: {"exact_positions": exact_until[name],
                         "exact_max_abs_logit_err": max_abs_err(logits[:, :exact_until[name]], dense_logits[:, :exact_until[name]]),
                         "max_abs_logit_err": max_abs_err(logits, dense_logits),
                         # [en] From S + W on for both caches: the positions where both have left the exact regime.
                         # [zh] 两种缓存都从 S + W 起计：从这里开始，两者都已离开精确的区间。
                         "greedy_agreement": float((logits.argmax(-1) == dense_logits.argmax(-1))[:, SINKS + WINDOW:].float().mean()),
                         "per_position": (logits - dense_logits).abs().amax(dim=(0, 2)).tolist()}
                  for name, logits in approx_logits.items()}
say_table([["$" + STREAMING_LABELS[name].replace(", ", r",\ ") + "$", str(d["exact_positions"]), f"{d['exact_max_abs_logit_err']:.1e}", f"{d['max_abs_logit_err']:.2f}",
            f"{d['greedy_agreement']:.0%}"] for name, d in DENSE_DISTANCE.items()],
          en=["cache", "positions that read every earlier key", "their max logit difference", "max logit difference, all positions",
              f"greedy agreement with dense attention, positions {SINKS + WINDOW}–{DENSE_LEN - 1}"],
          zh=["缓存", "能读到全部先前键的位置数", "这些位置的 logits 最大绝对误差", "全部位置的 logits 最大绝对误差",
              f"与稠密注意力的贪心 token 一致率（位置 {SINKS + WINDOW}–{DENSE_LEN - 1}）"])
assert all(close(logits[:, :exact_until[name]], dense_logits[:, :exact_until[name]]) for name, logits in approx_logits.items())
assert all(d["max_abs_logit_err"] > 1e-2 for d in DENSE_DISTANCE.values())

# %% [markdown] lang="en"
# The per-position differences as a figure, on a logarithmic scale.

# %% [markdown] lang="zh"
# 把每个位置上的差异画成图（对数刻度）。

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
for (name, d), style in zip(DENSE_DISTANCE.items(), ("-", "--")):
    ax.plot(range(DENSE_LEN), d["per_position"], style, label=STREAMING_LABELS[name])
ax.axvline(SINKS + WINDOW - 0.5, color="gray", linestyle=":", linewidth=1)
ax.set_yscale("log")
ax.set_xlabel("position in the stream")
ax.set_ylabel("max abs logit difference vs dense")
ax.set_title(f"S = {SINKS} sinks, window W = {WINDOW}, random weights", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
SINKS_PNG = OUT / "sinks_vs_dense.png"
fig.savefig(SINKS_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: the largest logit difference from dense attention (vertical axis, log scale) at each position of the two
# 96-token streams ("position in the stream"; the title's "random weights" means an untrained model), for
# sinks plus window (solid, "S = 4, W = 8") and the window alone (dashed, "S = 0, W = 8"). Left of the dotted line
# both read every earlier key and the difference is FP32 rounding (the window alone leaves that regime at $W$).*
#
# Read the right part with care: with random weights it says almost nothing about quality. Our toy has no attention
# sinks, since nothing trained it to put attention on the first tokens, so here they are just $S$ more keys to read:
# over the same positions (the table's last column), the greedy agreement is {{run:sinks.agreement_with_sinks:.0%}} with
# sinks and {{run:sinks.agreement_window_only_same_positions:.0%}} without. StreamingLLM's evidence is perplexity on long texts (PG19, up to
# 4 million tokens) with trained Llama-2, MPT, Falcon and Pythia models: window attention's perplexity rises sharply
# once the first tokens are evicted, while four sink tokens keep it close to that of a sliding window that
# recomputes its keys.

# %% [markdown] lang="zh"
# *图：横轴 position in the stream 是序列中的位置，纵轴（对数刻度）是两条 96 个 token 的序列上每个位置与稠密注意力（dense）的 logits 最大绝对误差；标题中的 S = 4 sinks 指 4 个汇聚 token，window W = 8 指窗口 $W = 8$，random weights 表示随机权重，即未经训练的模型。实线（S = 4, W = 8）是汇聚点加窗口，虚线（S = 0, W = 8）是只有窗口。点线左侧，两者都能读到之前的每一个键，差异只是 FP32 的舍入误差（只有窗口的模型从位置 $W$ 起就不再是这种情形）。*
#
# 右半部分要谨慎解读：在随机权重下，它几乎说明不了质量问题。我们的玩具模型没有注意力汇聚点，因为没有任何训练让它把注意力放在开头的 token 上，所以在这里，它们只是多读的 $S$ 个键：在同样的位置上（表格最后一列），与稠密注意力的贪心 token 一致率在有汇聚点时为 {{run:sinks.agreement_with_sinks:.0%}}，没有时为 {{run:sinks.agreement_window_only_same_positions:.0%}}。StreamingLLM 的证据是训练好的 Llama-2、MPT、Falcon 和 Pythia 模型在长文本（PG19，最长 400 万个 token）上的困惑度：开头的 token 一旦被淘汰，窗口注意力的困惑度就急剧上升；而保留四个汇聚 token，困惑度就能保持在接近“每步重算键的滑动窗口”的水平。
