# %% [markdown] lang="en"
# ## 6. Sliding-window attention
#
# With a sliding window of $W$ positions (Mistral 7B uses $W = 4096$), a query reads only itself and the
# $W - 1$ positions before it. In the notation of section 2, query $i$ of a chunk at absolute position
# $P + i$ reads key $j$ when
#
# $$P + i - W < j \le P + i,$$
#
# a band below the diagonal instead of the whole lower triangle. The band changes what a cache must
# keep. Once a call has consumed positions up to $p$, the next query sits at $p + 1$ or later and can
# never read position $p - W + 1$ or anything older. So the last $W - 1$ positions are all a cache needs,
# whatever the length of the sequence. We store them in a ring buffer: a fixed buffer of $W - 1$ slots in
# which position $p$ lives in slot $p \bmod (W - 1)$, overwriting position $p - W + 1$. (Hugging Face's
# `DynamicSlidingWindowLayer` keeps the same $W - 1$ positions.)
#
# A call with a chunk of $C$ tokens reads the ring's contents plus the new chunk, and only then writes the
# newest positions into the ring, so no write overwrites a key that a query of the same chunk still reads,
# however long the chunk.
# After a wrap the slots are no longer in position order. For correctness that does not matter: every key
# carries its position (section 4's `update` returns them), the band mask is computed from positions, and
# attention does not care in which order the allowed keys arrive. For rounding it does: sums taken in
# another order round differently. So `update` reads the filled slots oldest first, and its sums then add
# the same terms in the same order as a cache that keeps its positions in order (Hugging Face's, in 6.1).

# %% [markdown] lang="zh"
# ## 6. 滑动窗口注意力
#
# 采用 $W$ 个位置的滑动窗口（Mistral 7B 取 $W = 4096$）时，每个查询只读取自己和前面 $W - 1$ 个位置。沿用第 2 节的记号，分块内第 $i$ 个查询位于绝对位置 $P + i$，它能读取键 $j$ 的条件是
#
# $$P + i - W < j \le P + i,$$
#
# 也就是对角线下方的一条带状区域，而不是整个下三角。这条带改变了缓存需要保留的内容。一次调用处理完位置 $p$ 之后，下一个查询位于 $p + 1$ 或更靠后的位置，永远读不到位置 $p - W + 1$ 及更早的位置。因此，无论序列多长，缓存只需保留最后 $W - 1$ 个位置。我们把它们存进一个环形缓冲区：一个固定大小、有 $W - 1$ 个槽位的缓冲区，位置 $p$ 存放在第 $p \bmod (W - 1)$ 个槽位，覆盖掉位置 $p - W + 1$。（Hugging Face 的 `DynamicSlidingWindowLayer` 保留的也是这 $W - 1$ 个位置。）
#
# 一次调用处理含 $C$ 个 token 的分块时，先读取环形缓冲区里的内容和新分块，然后才把最新的位置写进缓冲区；这样，无论分块多长，写入都不会覆盖同一分块中某个查询还要读取的键。缓冲区绕回之后，槽位就不再按位置排序。就正确性而言这没有关系：每个键都带着自己的位置（第 4 节的 `update` 会返回它们），带状掩码由位置算出，而注意力并不在乎允许读取的键以什么顺序排列。但对舍入误差来说，顺序是有影响的：换一种顺序求和，舍入的结果就不同。所以 `update` 按位置从旧到新读取已填充的槽位，这样它求和时就以相同的顺序累加相同的项，与按位置顺序保存缓存的实现（例如 6.1 节中 Hugging Face 的实现）一样。

# %%
def window_mask(window: int):
    def mask(query_pos, key_pos):
        # bool [T_new, T_keys]: P + i - W < j <= P + i
        return (key_pos[None, :] <= query_pos[:, None]) & (key_pos[None, :] > query_pos[:, None] - window)
    return mask


class RingKV:
    # [en] One layer's cache for a sliding window: a fixed buffer of `slots` positions; position p lives in slot p % slots.
    # [zh] 滑动窗口的单层缓存：固定 `slots` 个位置的缓冲区；位置 p 存放在第 p % slots 个槽位。
    def __init__(self, slots: int):
        self.slots, self.seen = slots, 0
        self.k = self.v = None
        # [en] Position of each slot; -1 marks an empty slot.
        # [zh] 每个槽位存放的位置；-1 表示空槽位。
        self.positions = torch.full((slots,), -1)

    def update(self, k, v, positions):
        # [en] Allocate once, [B, H_kv, slots, Dh]; read the filled slots oldest first, plus the new chunk.
        # [zh] 只分配一次，形状 [B, H_kv, slots, Dh]；按位置从旧到新读取已填充的槽位，再接上新分块。
        if self.k is None:
            self.k = k.new_zeros(k.shape[0], k.shape[1], self.slots, k.shape[3])
            self.v = torch.zeros_like(self.k)
        old_k, old_v, old_pos = self.contents()
        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)
        key_pos = torch.cat((old_pos, positions))
        # [en] Only then write the newest positions into their slots.
        # [zh] 然后才把最新的位置写进各自的槽位。
        newest = positions[-self.slots:]
        slot = newest % self.slots
        self.k[:, :, slot] = k[:, :, -len(newest):]
        self.v[:, :, slot] = v[:, :, -len(newest):]
        self.positions[slot] = newest
        self.seen += len(positions)
        return keys, values, key_pos

    def contents(self):
        filled = (self.positions >= 0).nonzero().flatten()
        filled = filled[self.positions[filled].argsort()]
        return self.k[:, :, filled], self.v[:, :, filled], self.positions[filled]

    def stored(self) -> int:
        return int((self.positions >= 0).sum())

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v))


WINDOW = 8


def build_window(window: int = WINDOW, ring: bool = True, mask=None, **parts) -> ArchDecoder:
    # [en] Llama-shaped model of section 5 with a band mask; ring=False keeps every position (the full path).
    # [zh] 第 5 节的 Llama 结构模型加上带状掩码；ring=False 时保留所有位置（完整路径）。
    new_cache = (lambda: RingKV(window - 1)) if ring else FullKV
    return build_rope(mask_fn=mask or window_mask(window), new_cache=new_cache, **parts)


band = window_mask(3)(4 + torch.arange(2), torch.arange(6))
assert band.int().tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
print(band.int())

# %% [markdown] lang="en"
# The figure shows both sides for $W = 8$. Left, the band over the 24-token stream, as the full path sees
# it. Right, one call of the cached path: after 12 positions the ring holds positions 5 to 11 (in slots
# 5, 6, 0, 1, 2, 3, 4), and a chunk of 5 tokens (positions 12 to 16) reads those 7 keys plus its own 5.
# Each row is the same band, cut down to the keys the call has.

# %% [markdown] lang="zh"
# 下图画出 $W = 8$ 时的两种视角。左图是完整路径在 24 个 token 的序列上看到的带状区域。右图是缓存路径的一次调用：处理完 12 个位置之后，环形缓冲区里保存的是位置 5 到 11（依次位于槽位 5、6、0、1、2、3、4），一个含 5 个 token 的分块（位置 12 到 16）读取这 7 个键和它自己的 5 个键。每一行仍是同一条带，只是截取到这次调用手头拥有的键。

# %%
with torch.inference_mode():
    demo_ring = RingKV(WINDOW - 1)
    demo_kv = torch.zeros(1, 1, 12, 1)
    demo_ring.update(demo_kv, demo_kv, torch.arange(12))
    slots_before = demo_ring.positions.tolist()
    _, _, demo_keys = demo_ring.update(demo_kv[:, :, :5], demo_kv[:, :, :5], 12 + torch.arange(5))
assert slots_before == [7, 8, 9, 10, 11, 5, 6] and demo_keys.tolist() == list(range(5, 17))
demo_mask = window_mask(WINDOW)(12 + torch.arange(5), demo_keys)
assert torch.equal(demo_mask, window_mask(WINDOW)(torch.arange(24), torch.arange(24))[12:17, 5:17])

fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [24, 12]})
axes[0].imshow(window_mask(WINDOW)(torch.arange(24), torch.arange(24)).int().numpy(), cmap="Greens", vmin=0, vmax=1.4)
axes[0].set_title(f"full path: band, W = {WINDOW}", fontsize=10)
axes[0].set_xlabel("key position j")
axes[0].set_ylabel("query position")
axes[1].imshow(demo_mask.int().numpy(), cmap="Greens", vmin=0, vmax=1.4)
axes[1].set_title("cached call: ring (5..11) + chunk (12..16)", fontsize=10)
axes[1].set_xticks(range(12), [str(p) for p in demo_keys.tolist()], fontsize=8)
axes[1].set_yticks(range(5), [f"q{12 + i}" for i in range(5)], fontsize=8)
axes[1].set_xlabel("key position j")
fig.tight_layout()
WINDOW_PNG = OUT / "sliding_window.png"
fig.savefig(WINDOW_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# **Criteria.** With $W = 8$ and the 24-token stream, the cached path with eviction must equal full
# recomputation with the band mask, over the 12 configurations, and the ring must hold the full path's
# K/V at every position it kept; chunks of 5 straddle the window edge and
# make the ring wrap in the middle of a chunk. Those chunks are all shorter than the ring's $W - 1 = 7$
# slots, so three more runs (batch 2, FP32 and FP64) bring chunks as long as the ring (7 tokens), longer
# than it (10 tokens), and a long prefill of 16 tokens followed by one-token decode steps: such a call
# reads all of its own keys from the chunk and writes only its last 7 positions into the ring. After every
# call, every layer's ring must hold at most
# $W - 1$ positions (and be full once $W - 1$ positions have been consumed). With $W \ge T$ nothing is ever
# evicted and the band covers the whole triangle, so the windowed model must equal the unwindowed model
# of section 5. Finally, every query must read exactly $\min(W, p + 1)$ keys.

# %% [markdown] lang="zh"
# **判据。** 取 $W = 8$ 和 24 个 token 的序列：在 12 种配置上，带淘汰的缓存路径都必须与使用带状掩码的完整重算一致，而且环形缓冲区保留的每个位置上的 K/V 都必须与完整路径相同；分块长度为 5 时，分块会跨越窗口边界，环形缓冲区会在分块中途绕回。这些分块都比环形缓冲区的 $W - 1 = 7$ 个槽位短，所以我们再做三组运行（batch 为 2，FP32 和 FP64）：分块长度等于环形缓冲区（7 个 token），比它长（10 个 token），以及先用 16 个 token 预填充、再逐个 token 解码。这样的调用从新分块本身读取它自己的全部键，只把最后 7 个位置写进环形缓冲区。每次调用之后，每一层的环形缓冲区最多只能保存 $W - 1$ 个位置（处理过 $W - 1$ 个位置之后必须是满的）。当 $W \ge T$ 时，没有任何内容被淘汰，带状区域覆盖了整个下三角，所以滑动窗口模型必须与第 5 节不带窗口的模型一致。最后，每个查询读取的键必须恰好是 $\min(W, p + 1)$ 个。

# %%
ring_sizes = []


def record_ring(cache):
    ring_sizes.append((cache[0].seen, [layer.stored() for layer in cache]))


WINDOW_GRID = run_grid(build_window, reference=lambda: build_window(ring=False), after_call=record_ring)
grid_table(WINDOW_GRID)
# [en] Chunks as long as the ring, longer than it, and a long prefill followed by decoding.
# [zh] 分块与环形缓冲区一样长、比它长，以及长预填充之后再解码。
RING_CHUNKS = [WINDOW - 1, 10, [16] + [1] * (STREAM_LEN - 16)]
RING_CHUNK_RUNS = [check_cached(build_window, STREAM, 2, chunk, dtype, reference=lambda: build_window(ring=False), after_call=record_ring)
                   for chunk in RING_CHUNKS for dtype in (torch.float32, torch.float64)]
grid_table(RING_CHUNK_RUNS)
WINDOW_EQUALS_UNWINDOWED = run_grid(lambda: build_window(window=STREAM_LEN), reference=build_rope)
assert all(r["passed"] for r in WINDOW_GRID + RING_CHUNK_RUNS + WINDOW_EQUALS_UNWINDOWED)
assert max(max(chunk_lengths(STREAM_LEN, r["chunk"])) for r in WINDOW_GRID) < WINDOW - 1
assert [max(chunk_lengths(STREAM_LEN, c)) for c in RING_CHUNKS] == [WINDOW - 1, 10, 16]
assert all(stored == [min(seen, WINDOW - 1)] * cfg.layers for seen, stored in ring_sizes)
RING_MAX_STORED = max(max(stored) for _, stored in ring_sizes)
keys_read = window_mask(WINDOW)(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN)).sum(dim=-1)
assert keys_read.tolist() == [min(WINDOW, p + 1) for p in range(STREAM_LEN)]
say(en=f"W = {WINDOW}: 12/12 configurations pass against full recomputation with the band mask (largest logit error "
       f"{max(r['max_abs_logit_err'] for r in WINDOW_GRID):.1e}), and so do the {len(RING_CHUNK_RUNS)} runs with chunks of 7, 10 "
       f"and a 16-token prefill (largest error {max(r['max_abs_logit_err'] for r in RING_CHUNK_RUNS):.1e}); the ring never held more than {RING_MAX_STORED} positions "
       f"after {len(ring_sizes)} calls; with W = T = {STREAM_LEN} the windowed model equals the unwindowed one "
       f"(largest error {max(r['max_abs_logit_err'] for r in WINDOW_EQUALS_UNWINDOWED):.1e}).",
    zh=f"W = {WINDOW}：与使用带状掩码的完整重算相比，12 种配置全部通过（logits 最大误差 "
       f"{max(r['max_abs_logit_err'] for r in WINDOW_GRID):.1e}），分块长度为 7、10 以及 16 个 token 预填充的 {len(RING_CHUNK_RUNS)} 组运行也全部通过"
       f"（最大误差 {max(r['max_abs_logit_err'] for r in RING_CHUNK_RUNS):.1e}）；全部 {len(ring_sizes)} 次调用中，每次调用之后环形缓冲区保存的位置都不超过 "
       f"{RING_MAX_STORED} 个；当 W = T = {STREAM_LEN} 时，滑动窗口模型与不带窗口的模型一致（最大误差 "
       f"{max(r['max_abs_logit_err'] for r in WINDOW_EQUALS_UNWINDOWED):.1e}）。")

# %% [markdown] lang="en"
# **Negative control 1: the window off by one.** Write `>=` for `>` in the band, so that a query reads
# $W + 1$ keys, and use this mask on both paths. The full path is then simply a model with a window of
# $W + 1$; the cached path cannot follow, because its ring has already overwritten the oldest key the wider
# band asks for. The check catches it for every chunk length. (The opposite slip, a band of $W - 1$ keys,
# passes this check, since the ring holds more than such a band needs; the key count asserted above
# catches it. The cell checks both.)

# %% [markdown] lang="zh"
# **负对照 1：窗口大小差一。** 把带状条件中的 `>` 写成 `>=`，让每个查询读取 $W + 1$ 个键，并在两条路径上都使用这个掩码。此时完整路径不过是一个窗口为 $W + 1$ 的模型；缓存路径却跟不上，因为更宽的窗口要读取的那个最旧的键，已经被环形缓冲区覆盖掉了。无论分块长度是多少，检查都能发现它。（反方向的疏忽，即窗口只含 $W - 1$ 个键，倒能通过这项检查，因为环形缓冲区保存的键比这样的窗口所需的还多；上面断言的键数能抓住它。下面的单元格对这两点都做了检查。）

# %%
def window_mask_off_by_one(window: int):
    def mask(query_pos, key_pos):
        # [en] WRONG on purpose: >= reads W + 1 keys.
        # [zh] 故意写错：>= 会读取 W + 1 个键。
        return (key_pos[None, :] <= query_pos[:, None]) & (key_pos[None, :] >= query_pos[:, None] - window)
    return mask


OFF_BY_ONE = [check_cached(lambda: build_window(mask=window_mask_off_by_one(WINDOW)), STREAM, 1, chunk,
                           reference=lambda: build_window(ring=False, mask=window_mask_off_by_one(WINDOW)))
              for chunk in (1, 2, 5)]
say_table([[str(r["chunk"]), f"{r['max_abs_logit_err']:.3f}", f"`{r['passed']}`"] for r in OFF_BY_ONE],
          en=["chunk", "max abs logit error", "passed"], zh=["分块长度", "logits 最大绝对误差", "通过"])
assert not any(r["passed"] for r in OFF_BY_ONE)
assert window_mask_off_by_one(WINDOW)(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN)).sum(-1).max() == WINDOW + 1
# [en] The opposite slip, a band of W - 1 keys: cached-versus-full passes, the key count does not.
# [zh] 反方向的疏忽，窗口只含 W - 1 个键：“缓存对照完整重算”能通过，键数检查则通不过。
NARROW_WINDOW = check_cached(lambda: build_window(mask=window_mask(WINDOW - 1)), STREAM, 1, 5,
                             reference=lambda: build_window(ring=False, mask=window_mask(WINDOW - 1)))
narrow_keys_read = window_mask(WINDOW - 1)(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN)).sum(dim=-1)
assert NARROW_WINDOW["passed"] and narrow_keys_read.tolist() != [min(WINDOW, p + 1) for p in range(STREAM_LEN)]

# %% [markdown] lang="en"
# **Negative control 2: cropping the context instead of masking.** A tempting shortcut: to produce the
# logits at position $t$, run the model on the last $W$ tokens only, as a fresh sequence with positions
# restarting at 0. Two things are wrong with it. The positions restart, which RoPE happens not to see
# (section 5's lesson: we assert that a crop with its true positions gives the same logits). And the
# window applies *per layer*: position $t$ of layer 2 reads layer-1 outputs back to $t - W + 1$, each of
# which read back another $W - 1$ positions, so two layers reach $2(W - 1)$ positions into the past, not
# $W - 1$. A crop to $W$ tokens cuts this off. The cell compares crops with the cached windowed model at
# every position $t \ge W$, and then confirms the receptive field: a crop of $L(W - 1) + 1 = 15$ tokens with
# the band mask reproduces the windowed model, a crop of 14 does not.

# %% [markdown] lang="zh"
# **负对照 2：裁剪上下文，而不是使用掩码。** 一个诱人的捷径：要得到位置 $t$ 的 logits，只把最后 $W$ 个 token 当作一条新序列送入模型，位置从 0 重新开始。这种做法错在两处。第一，位置重新开始了，不过 RoPE 恰好看不到这一点（第 5 节的教训：我们会断言，保留真实位置的裁剪给出相同的 logits）。第二，窗口是**逐层**生效的：第 2 层在位置 $t$ 上读取第 1 层往前直到 $t - W + 1$ 的输出，而这些输出又各自向前读取了 $W - 1$ 个位置，所以两层加起来能回溯 $2(W - 1)$ 个位置，而不是 $W - 1$ 个。裁剪到 $W$ 个 token 就把这部分切掉了。下面的单元格在每个 $t \ge W$ 的位置上，把裁剪的结果与带缓存的滑动窗口模型比较，然后验证感受野：裁剪到 $L(W - 1) + 1 = 15$ 个 token 并使用带状掩码，能够复现滑动窗口模型；只保留 14 个则不行。

# %%
@torch.inference_mode()
def crop_logits(net, ids, t: int, length: int, true_positions: bool):
    # [en] Logits at position t from the last `length` tokens only, as a fresh call.
    # [zh] 只用最后 `length` 个 token 重新调用一次，得到位置 t 的 logits。
    start = max(0, t + 1 - length)
    restart = lambda past, new: torch.arange(new)
    shifted = lambda past, new: start + past + torch.arange(new)
    with net.parts(positions_fn=shifted if true_positions else restart):
        return net(ids[:, start:t + 1])[0][:, -1]


with torch.inference_mode():
    windowed64 = build_window(ring=False).double()
    reference_logits, _ = run_chunked(build_window().double(), STREAM[:1], 1)
    crops = {name: torch.stack([crop_logits(windowed64, STREAM[:1], t, length, true) for t in range(WINDOW, STREAM_LEN)], 1)
             for name, length, true in [("crop_W_restart", WINDOW, False), ("crop_W_true_positions", WINDOW, True),
                                        ("crop_receptive_field", cfg.layers * (WINDOW - 1) + 1, True),
                                        ("crop_receptive_field_minus_1", cfg.layers * (WINDOW - 1), True)]}
CROP = {name: (logits - reference_logits[:, WINDOW:]).abs().max().item() for name, logits in crops.items()}
CROP["restart_vs_true_positions"] = (crops["crop_W_restart"] - crops["crop_W_true_positions"]).abs().max().item()
say_table([[f"`{name}`", f"{value:.2e}"] for name, value in CROP.items()],
          en=["comparison (FP64, positions 8 to 23)", "max abs logit difference"],
          zh=["比较（FP64，位置 8 到 23）", "logits 最大绝对差"])
assert CROP["crop_W_restart"] > 1e-2 and CROP["crop_W_true_positions"] > 1e-2 and CROP["crop_receptive_field_minus_1"] > 1e-6
assert CROP["restart_vs_true_positions"] < 1e-10 and CROP["crop_receptive_field"] < 1e-10

# %% [markdown] lang="en"
# ### 6.1 Cross-check with Hugging Face Mistral (optional)
#
# `MistralForCausalLM` is Llama's architecture plus `sliding_window`. With the pinned transformers it runs
# on the CPU with eager attention, builds the band mask `kv_idx > q_idx - sliding_window` itself, and its
# `DynamicCache` gives each layer a `DynamicSlidingWindowLayer` that keeps the last $W - 1$ positions. The
# weights map exactly as for Llama, and our copy again computes Hugging Face's three FP32 steps. Besides the
# logits we compare the cache: Hugging Face's layer keeps its $W - 1$ positions in order, ours in ring
# order, so we sort ours by position first. The second row repeats the off-by-one window of control 1,
# which the referee must reject.

# %% [markdown] lang="zh"
# ### 6.1 与 Hugging Face Mistral 交叉核对（可选）
#
# `MistralForCausalLM` 就是 Llama 的结构加上 `sliding_window`。在锁定的 transformers 版本中，它可以在 CPU 上以 eager 注意力运行，自己构造带状掩码 `kv_idx > q_idx - sliding_window`，而它的 `DynamicCache` 会为每一层创建一个保留最后 $W - 1$ 个位置的 `DynamicSlidingWindowLayer`。权重映射与 Llama 完全相同，我们的模型副本同样在 FP32 下完成 Hugging Face 的那三步。除了 logits，我们还比较缓存：Hugging Face 按位置顺序保存这 $W - 1$ 个位置，我们则按环形顺序保存，所以先把我们的缓存按位置排序。第二行重现负对照 1 中大小差一的窗口，裁判必须把它判为不一致。

# %%
def hf_mistral(ours: ArchDecoder):
    hf = MistralForCausalLM(MistralConfig(**hf_fields(ours.config), sliding_window=WINDOW)).eval()
    hf.load_state_dict(llama_state_dict(ours), strict=True)
    return hf.double()


MISTRAL_CROSS = None
if HAVE_HF:
    MISTRAL_CROSS = {}
    for name, mask in (("hf_precision", window_mask(WINDOW)), ("off_by_one_control", window_mask_off_by_one(WINDOW))):
        full_model = build_llama_like(hf_precision=True, mask_fn=mask).double()
        ring_model = build_llama_like(hf_precision=True, mask_fn=mask, new_cache=lambda: RingKV(WINDOW - 1)).double()
        hf = hf_mistral(full_model)
        with torch.inference_mode():
            errors = {"full": (full_model(STREAM)[0] - hf(input_ids=STREAM).logits).abs().max().item()}
            for chunk in (1, 2, 5):
                ours_logits, ours_cache = run_chunked(ring_model, STREAM, chunk)
                hf_logits, hf_cache = hf_chunked(hf, STREAM, chunk)
                errors[f"cached_chunk_{chunk}"] = (ours_logits - hf_logits).abs().max().item()
                kv = []
                for ring, layer in zip(ours_cache, hf_cache.layers):
                    order = ring.positions.argsort()
                    assert type(layer).__name__ == "DynamicSlidingWindowLayer"
                    assert layer.keys.shape[-2] == ring.stored() == WINDOW - 1
                    kv += [(ring.k[:, :, order] - layer.keys).abs().max().item(), (ring.v[:, :, order] - layer.values).abs().max().item()]
                errors[f"kv_chunk_{chunk}"] = max(kv)
        MISTRAL_CROSS[name] = errors
    say(en="Largest absolute difference from Hugging Face `MistralForCausalLM`:",
        zh="与 Hugging Face `MistralForCausalLM` 的最大绝对差：")
    cross_table(MISTRAL_CROSS, {"hf_precision": "`window_mask(8)`, `hf_precision=True`",
                                "off_by_one_control": "`window_mask_off_by_one(8)`, `hf_precision=True`"})
    assert max(MISTRAL_CROSS["hf_precision"].values()) < 1e-10
    assert MISTRAL_CROSS["off_by_one_control"]["full"] > 1e-2
    say(en=f"Hugging Face Mistral with `sliding_window={WINDOW}` agrees with our ring-buffer model within 1e-10 in FP64 "
           "(logits and the W - 1 cached positions of every layer); the off-by-one window differs from it.",
        zh=f"`sliding_window={WINDOW}` 的 Hugging Face Mistral 与我们基于环形缓冲区的模型在 FP64 下的差异小于 1e-10"
           "（logits 以及每一层缓存中的 W - 1 个位置都是如此）；差一的窗口则与它不一致。")
else:
    say(en=f"The cross-check with Hugging Face Mistral is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"与 Hugging Face Mistral 的交叉核对已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
