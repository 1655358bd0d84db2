# %% [markdown] lang="en"
# The figure shows both sides for $W = 8$ on the Llama-shaped model of section 5. Left, the band over the
# 24-token stream, as the full path sees it. Right, layer 0's ring of $W - 1 = 7$ slots while the model reads
# the stream one token per call: the row labelled $t$ shows which position each slot holds after $t$ tokens.
# The first cell runs the stream and asserts what the figure shows: after $t$ tokens the ring holds
# $\min(t, W - 1)$ positions, in `nbytes()` exactly the bytes of $W - 1$ positions, however many tokens came
# before; the second, folded, draws it.

# %% [markdown] lang="zh"
# 下图以第 5 节的 Llama 结构模型、$W = 8$ 为例画出两种视角。左图是完整路径在 24 个 token 的序列上看到的带状区域。右图是模型逐个 token 读入序列时，第 0 层那个有 $W - 1 = 7$ 个槽位的环形缓冲区：纵轴标注为 $t$ 的那一行，表示读入 $t$ 个 token 之后每个槽位存放的是哪个位置。第一个单元格逐个 token 读入序列，并用断言核对图中所示的内容：读入 $t$ 个 token 之后，环形缓冲区保存 $\min(t, W - 1)$ 个位置；无论之前读入了多少 token，它的 `nbytes()` 都恰好是 $W - 1$ 个位置的字节数。第二个单元格（代码已折叠）画出这张图。

# %%
WINDOW = 8


def window_model(window: int = WINDOW) -> Decoder:
    return build(LLAMA_CFG, lambda i: WindowAttention(LLAMA_CFG, window))


with torch.inference_mode():
    net, cache, RING_SLOTS, RING_HELD, RING_BYTES = window_model(), None, [], [], set()
    for t in range(STREAM_LEN):
        _, cache = net(STREAM[:1, t:t + 1], cache)
        RING_SLOTS.append(cache[0].positions.tolist())
        RING_HELD.append(len(cache[0].contents()[2]))
        RING_BYTES |= {c.nbytes() for c in cache}
RING_FORMULA_BYTES = kv_bytes_per_token(1, LLAMA_CFG.n_kv, LLAMA_CFG.head_dim, 4) * (WINDOW - 1)
assert RING_HELD == [min(t + 1, WINDOW - 1) for t in range(STREAM_LEN)] and RING_BYTES == {RING_FORMULA_BYTES}

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(10, 5), gridspec_kw={"width_ratios": [24, 11]})
axes[0].imshow(band_mask(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN), WINDOW).int().numpy(), cmap="Greens", vmin=0, vmax=1.4)
axes[0].set_title(f"band_mask, W = {WINDOW}", fontsize=10)
axes[0].set_xlabel("key position")
axes[0].set_ylabel("query position")
slots = np.array(RING_SLOTS)                                                    # [T, W - 1]
axes[1].imshow(np.where(slots >= 0, slots, np.nan), cmap="viridis", aspect="auto")
for (t, s), position in np.ndenumerate(slots):
    if position >= 0:
        axes[1].text(s, t, str(position), ha="center", va="center", fontsize=8, color="black" if position > 0.6 * slots.max() else "white")
axes[1].set_title(f"RingKV({WINDOW - 1}), layer 0", fontsize=10)
axes[1].set_xlabel("slot")
axes[1].set_ylabel("tokens consumed t")
axes[1].set_yticks(range(0, STREAM_LEN, 4), [str(t + 1) for t in range(0, STREAM_LEN, 4)])
fig.tight_layout()
WINDOW_PNG = OUT / "sliding_window.png"
fig.savefig(WINDOW_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: left, `band_mask` with $W = 8$ over 24 positions: a row per query ("query position"), a column per
# key ("key position"), green where the query may read the key. Right, `RingKV(7)`, the ring buffer of layer 0,
# after each of the 24 one-token calls: a row per call, labelled with the number of tokens consumed $t$ (the
# row labelled $t$ shows the ring after $t$ tokens), a column per slot ("slot", 0–6). Each cell is labelled
# with the position it holds, brighter for newer positions, empty until written. From the eighth token on,
# each new position overwrites the oldest one, in slot $p \bmod 7$.*

# %% [markdown] lang="zh"
# *图：左图是 $W = 8$ 时 24 个位置上的带状掩码 `band_mask`：每行是一个查询（纵轴 query position，查询的位置），每列是一个键（横轴 key position，键的位置），绿色表示该查询可以读取该键。右图是第 0 层的环形缓冲区 `RingKV(7)` 在 24 次单 token 调用中每次调用之后的状态：每行对应一次调用，纵轴 tokens consumed t 是已处理的 token 数 $t$（标注为 $t$ 的那一行就是读入 $t$ 个 token 之后的状态）；每列是一个槽位（横轴 slot，槽位编号 0–6）。每个格子标注着该槽位存放的位置，位置越新颜色越亮，写入之前是空的。从第 8 个 token 起，每个新位置都覆盖最旧的那个位置，写在第 $p \bmod 7$ 个槽位。*

# %% [markdown] lang="en"
# **Criteria.** With $W = 8$ and the 24-token stream:
#
# 1. **cached = full.** Over the 12 configurations, the cached path with eviction equals full recomputation with
#    the band mask, and at the end of the stream the ring of the cached run (filled chunk by chunk) holds the
#    same positions with the same K/V as the ring of one full call (filled in a single call). Chunks of 5 straddle the window
#    edge and make the ring wrap in the middle of a chunk.
# 2. **Chunks as long as the ring, and longer.** The grid's chunks are all shorter than the ring's $W - 1 = 7$
#    slots, so three more runs (batch 2, FP32 and FP64, `RING_CHUNKS`) bring chunks of 7 tokens, of 10 tokens,
#    and a prefill of 16 tokens followed by one-token decode steps. Such a call reads all of its own keys from
#    the chunk and writes only its last 7 positions into the ring.
# 3. **A window wider than the stream changes nothing.** With $W > T$ nothing is ever evicted and the band
#    covers the whole triangle, so `window_model(25)` must equal the unwindowed model of section 5,
#    `build(LLAMA_CFG)`, caches included.
# 4. **The key count.** Every query reads exactly $\min(W, p + 1)$ keys.

# %% [markdown] lang="zh"
# **判据。** 取 $W = 8$ 和 24 个 token 的序列：
#
# 1. **缓存 = 完整重算。** 在 12 种配置上，带淘汰的缓存路径都必须与使用带状掩码的完整重算一致，而且在序列结束时，带缓存运行的环形缓冲区（逐个分块填入）与一次完整调用的环形缓冲区（一次调用填入）保留的位置相同，各位置上的 K/V 也相同。分块长度为 5 时，分块会跨越窗口边界，环形缓冲区也会在分块中途绕回。
# 2. **分块与环形缓冲区一样长，或者更长。** 网格中的分块都比环形缓冲区的 $W - 1 = 7$ 个槽位短，所以我们再做三组运行（batch 为 2，FP32 和 FP64，即 `RING_CHUNKS`）：分块长 7 个 token；分块长 10 个 token；先用 16 个 token 做预填充（prefill），再逐个 token 解码。这样的调用直接从新分块中读取本分块的全部键，只把最后 7 个位置写进环形缓冲区。
# 3. **窗口比序列还宽时，什么都不变。** 当 $W > T$ 时，没有任何内容被淘汰，带状区域覆盖了整个下三角，所以 `window_model(25)` 必须与第 5 节不带窗口的模型 `build(LLAMA_CFG)` 一致，缓存也包括在内。
# 4. **键数。** 每个查询读取的键必须恰好是 $\min(W, p + 1)$ 个。

# %%
WINDOW_GRID = run_grid(window_model)
RING_CHUNKS = [WINDOW - 1, 10, [16] + [1] * (STREAM_LEN - 16)]
RING_CHUNK_RUNS = [check_cached(window_model, 2, chunk, dtype) for chunk in RING_CHUNKS for dtype in (torch.float32, torch.float64)]
WINDOW_WIDER_THAN_STREAM = run_grid(lambda: window_model(STREAM_LEN + 1), reference=lambda: build(LLAMA_CFG))
summary_table({f"1: `window_model({WINDOW})`": WINDOW_GRID, "2: `RING_CHUNKS`": RING_CHUNK_RUNS,
               f"3: `window_model({STREAM_LEN + 1})`": WINDOW_WIDER_THAN_STREAM})
KEYS_READ = band_mask(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN), WINDOW).sum(dim=-1).tolist()
assert all(r["passed"] for r in WINDOW_GRID + RING_CHUNK_RUNS + WINDOW_WIDER_THAN_STREAM)
assert KEYS_READ == [min(WINDOW, p + 1) for p in range(STREAM_LEN)]

# %% [markdown] lang="en"
# **Negative control 1: the window one key too wide.** `WiderWindow` writes `>=` for `>` in the band, so a
# query reads $W + 1$ keys, the paper's wording read inclusively. Its full path is simply a model with a window
# of $W + 1$; its cached path cannot follow, because the ring has already overwritten the oldest key the wider
# band asks for. The check must fail for every chunk length. **Negative control 2: one key too narrow.** The
# mask reads $W - 1$ keys (the query's own and $W - 2$ before it), the ring keeps $W - 1$ slots, so nothing is
# missing and cached = full passes; only the key count of criterion 4 catches it (query positions reading a
# number of keys other than $\min(W, p + 1)$: {{run:window.narrow_wrong_queries}} of {{run:window.queries}}).

# %% [markdown] lang="zh"
# **负对照 1：窗口宽了一个键。** `WiderWindow` 把带状条件中的 `>` 写成了 `>=`，于是每个查询读取 $W + 1$ 个键，这正是把论文的说法按两端都算在内来理解的结果。它的完整路径只不过是一个窗口为 $W + 1$ 的模型；缓存路径却跟不上，因为更宽的窗口要读取的那个最旧的键，已经被环形缓冲区覆盖了。无论分块长度是多少，检查都必须失败。**负对照 2：窗口窄了一个键。** 掩码读取 $W - 1$ 个键（查询自身及其前面的 $W - 2$ 个），环形缓冲区保存 $W - 1$ 个槽位，所以什么也不缺，“缓存 = 完整重算”能够通过；只有判据 4 的键数检查能查出它（读取的键数不等于 $\min(W, p + 1)$ 的查询位置：{{run:window.narrow_wrong_queries}} 个，共 {{run:window.queries}} 个）。

# %%
class WiderWindow(WindowAttention):
    # [en] WRONG on purpose: >= lets a query read W + 1 keys.
    # [zh] 故意写错：>= 让每个查询读取 W + 1 个键。
    def mask(self, query_pos, key_pos):
        return causal(query_pos, key_pos) & (key_pos[None, :] >= query_pos[:, None] - self.window)


class NarrowerWindow(WindowAttention):
    # [en] WRONG on purpose: a band of W - 1 keys, the ring still sized for a window of W (W - 1 slots).
    # [zh] 故意写错：窗口只含 W - 1 个键，环形缓冲区仍按窗口 W 分配（W - 1 个槽位）。
    def mask(self, query_pos, key_pos):
        return band_mask(query_pos, key_pos, self.window - 1)


def keys_read(net: Decoder) -> list[int]:
    return net.blocks[0].attn.mask(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN)).sum(dim=-1).tolist()


# %%
wider = lambda: build(LLAMA_CFG, lambda i: WiderWindow(LLAMA_CFG, WINDOW))
narrower = lambda: build(LLAMA_CFG, lambda i: NarrowerWindow(LLAMA_CFG, WINDOW))
wide, wide_keys = run_control(wider), keys_read(wider())
narrow_passed, narrow_keys = check_cached(narrower, 1, 5)["passed"], keys_read(narrower())
narrow_caught = narrow_keys != KEYS_READ
CONTROLS["window_one_key_too_wide"] = {"section": 6, "check": "check_cached", "caught": wide["caught"]}
CONTROLS["window_one_key_too_narrow"] = {"section": 6, "check": "keys_read", "caught": narrow_caught}
mark = {True: "✓", False: "✗"}
say_table([["`WindowAttention`", str(KEYS_READ[-1]), mark[all(r["passed"] for r in WINDOW_GRID)], "–"],
           ["`WiderWindow`", str(wide_keys[-1]), mark[all(wide["passed"])], mark[wide["caught"]]],
           ["`NarrowerWindow`", str(narrow_keys[-1]), mark[narrow_passed], mark[narrow_caught]]],
          en=["attention", "keys read by the last query", "cached = full", "caught"],
          zh=["注意力层", "最后一个查询读取的键数", "缓存 = 完整重算", "查出"])
assert wide["caught"] and narrow_passed and narrow_caught

# %% tags=["prose-values"]
{"window": {"narrow_wrong_queries": sum(n != k for n, k in zip(narrow_keys, KEYS_READ)), "queries": len(KEYS_READ)}}
