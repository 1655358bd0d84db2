# %% [markdown] lang="en"
# ## 6. Equivalence: cached path versus full recomputation
#
# Does the cached path of the decoder compute what a full recomputation computes? We check it three
# ways: call by call on the six-token example (6.1), every logit over a grid of batch sizes, chunk
# lengths and precisions (6.2), and in a generation loop that chooses its own tokens (6.3).
#
# ### 6.1 The cache, call by call
#
# First, back to the six-token example of section 2, this time through the decoder of section 5, which
# has the toy layer's sizes (vocabulary 97, width 64, 4 heads of 16 dimensions): prefill
# `[12, 7, 31, 4]`, then `[9, 18]` in one call, and then two more calls of one token each, `[55]` and
# `[23]`, the way generation continues. After every call, each layer's cache must hold one more row per
# new token, and the rows it already held must come back unchanged. Those rows are copied by `torch.cat`,
# never recomputed, so they are compared bit for bit. The logits of each call must match the same rows
# of one full call over all eight tokens, within the FP32 tolerance.

# %% [markdown] lang="zh"
# ## 6. 等价性：缓存路径与完整重算
#
# 解码器的缓存路径算出的结果，与完整重算相同吗？我们从三个方面检查：在六个 token 的例子上逐次调用检查（6.1）；在由 batch 大小、分块长度和精度组成的网格上比较全部 logits（6.2）；在自己选择下一个 token 的生成循环中比较（6.3）。
#
# ### 6.1 缓存如何随调用增长
#
# 先回到第 2 节六个 token 的例子，这次换用第 5 节的解码器，它的尺寸与玩具层相同（词表大小 97，宽度 64，4 个头、每头 16 维）：先预填充 `[12, 7, 31, 4]`，再一次性送入 `[9, 18]`，然后像生成时那样再调用两次，每次一个 token：`[55]` 和 `[23]`。每次调用之后，每一层的缓存都应当为每个新 token 多出一行，而原有的行必须原样保留。这些行是 `torch.cat` 复制过来的，没有重新计算，所以要求逐比特相同。每次调用返回的 logits 则要与一次处理全部八个 token 的完整调用的对应行在 FP32 容差内一致。

# %%
GROWTH_CALLS = [[12, 7, 31, 4], [9, 18], [55], [23]]
GROWTH_IDS = torch.tensor([sum(GROWTH_CALLS, [])])                     # [1, 8]

with torch.inference_mode():
    growth_full, _ = model(GROWTH_IDS)                                 # [1, 8, vocab]
    cache, start, cache_lengths, rows_kept, call_errors = None, 0, [], [], []
    for call in GROWTH_CALLS:
        logits, new_cache = model(torch.tensor([call]), cache)
        # [en] K and V of every layer: rows already cached come back bit for bit.
        # [zh] 每一层的 K 和 V：已缓存的行原样返回，逐比特相同。
        if cache is not None:
            rows_kept.append(all(torch.equal(new[..., :start, :], old)
                                 for pair, new_pair in zip(cache, new_cache) for old, new in zip(pair, new_pair)))
        cache_lengths.append([k.shape[-2] for k, _ in new_cache])
        call_errors.append(max_abs_err(logits, growth_full[:, start:start + len(call)]))
        cache, start = new_cache, start + len(call)

say_table([[f"`{call}`", ", ".join(map(str, lengths)), f"{err:.1e}"]
           for call, lengths, err in zip(GROWTH_CALLS, cache_lengths, call_errors)],
          en=["call", "cache length after it, layers 0, 1", "max abs error vs the full call"],
          zh=["调用", "调用后的缓存长度（第 0、1 层）", "与完整调用相比的最大绝对误差"])
assert cache_lengths == [[4, 4], [6, 6], [7, 7], [8, 8]] and all(rows_kept)
assert all(err <= TOLERANCE[torch.float32] for err in call_errors)

# %% [markdown] lang="en"
# The figure draws what the table says, one panel per layer, titled with the shape of that layer's K
# and V, `[1, 4, T, 16]`. Each row is one call, from the prefill at the top to the last one-token step
# at the bottom, labelled with the IDs it fed and the cache length $T$ after it; each column is a
# position, and the number in a cell is the token ID at that position. An orange cell is a row of K and V computed by that call; a blue cell is a row carried over
# from the cache, read by the new queries but not recomputed; a white cell does not exist yet. The two
# layers grow in step, but each keeps its own keys and values (section 5). The plotting code is folded.

# %% [markdown] lang="zh"
# 下图把上表的内容画出来，每一层一幅子图。子图标题 layer 0: K and V, [1, 4, T, 16] 意为“第 0 层的 K 和 V，形状为 `[1, 4, T, 16]`”，第 1 层同理。每一行是一次调用，从最上面的预填充到最下面最后一次单 token 调用；行标签 call 1: [12, 7, 31, 4] -> T = 4 意为“第 1 次调用送入 `[12, 7, 31, 4]`，之后缓存长度 $T = 4$”，其余各行依此类推。每一列是一个位置，横轴标签 position (token id in the cell) 意为“位置（格子里的数是该位置的 token ID）”。橙色格子是这次调用新算出的一行 K/V（图例 computed by this call，“由这次调用算出”）；蓝色格子是从缓存中带过来的行，新查询会读取它，但不会重新计算（图例 carried over from the cache (read, not recomputed)，意思正是“从缓存中带过来（只读取，不重新计算）”）；白色格子表示这一行还不存在。两层同步增长，但各自保存自己的键和值（见第 5 节）。绘图代码已折叠。

# %% tags=["hide-input"]
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

# [en] 0 = not there yet, 1 = carried over from the cache, 2 = computed by this call.
# [zh] 0 = 尚不存在，1 = 从缓存中带过来，2 = 由这次调用算出。
growth = np.zeros((len(GROWTH_CALLS), GROWTH_IDS.shape[1]), dtype=int)    # [calls, positions]
for row, length in enumerate(cache_lengths):
    previous = cache_lengths[row - 1][0] if row else 0
    growth[row, :previous], growth[row, previous:length[0]] = 1, 2

fig, axes = plt.subplots(1, cfg.layers, figsize=(10, 2.8), sharey=True)
for layer, ax in enumerate(axes):
    ax.imshow(growth, cmap=ListedColormap(["white", "lightsteelblue", "darkorange"]), vmin=0, vmax=2)
    for (row, col), state in np.ndenumerate(growth):
        if state:
            ax.text(col, row, str(GROWTH_IDS[0, col].item()), ha="center", va="center", fontsize=8)
    ax.set_title(f"layer {layer}: K and V, [1, {cfg.heads}, T, {cfg.head_dim}]", fontsize=10)
    ax.set_xticks(range(GROWTH_IDS.shape[1]))
    ax.set_xlabel("position (token id in the cell)")
    ax.set_xticks(np.arange(-0.5, GROWTH_IDS.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, len(GROWTH_CALLS)), minor=True)
    ax.grid(which="minor", color="gray", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
axes[0].set_yticks(range(len(GROWTH_CALLS)), [f"call {i + 1}: {c} -> T = {n[0]}"
                                              for i, (c, n) in enumerate(zip(GROWTH_CALLS, cache_lengths))])
fig.legend(handles=[Patch(color="darkorange", label="computed by this call"),
                    Patch(color="lightsteelblue", label="carried over from the cache (read, not recomputed)")],
           loc="lower center", ncol=2, fontsize=8, frameon=False)
fig.tight_layout(rect=(0, 0.1, 1, 1))
CACHE_GROWTH_PNG = OUT / "cache_growth.png"
fig.savefig(CACHE_GROWTH_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# ### 6.2 Every logit, twelve configurations
#
# Now the systematic check. Matching argmax tokens is a weak test: quite different logits can still pick the same token. We
# compare **every vocabulary logit at every consumed position**, plus both layers' K and V, between
#
# * the full path: one call over the whole stream, no cache; and
# * the cached path: the same stream fed in chunks, each call receiving the cache returned by the previous one.
#
# Position $t$ of the cached path is compared with position $t$ of the full path, with no shift. The
# stream is fixed: 24 token IDs drawn from `SEED`, with a second, different row for batch 2, so that a bug
# mixing the two rows on one path only changes that path's logits (a mix-up both paths share would pass
# this comparison; 6.3 checks for it). The grid covers batch 1 and 2, chunks of 1,
# 2 and 5 tokens (with 5 the last chunk holds only 4), and FP32 and FP64 on the CPU: 12 configurations.
# The FP64 runs convert the very same initial weights to FP64 (`.to(torch.float64)`).
#
# Floating-point sums in a different order round differently, and a chunked call multiplies matrices of
# other shapes than a full call. So we ask for equality within a tolerance, not bit for bit:
# `TOLERANCE`, used as `atol` and `rtol`, is $10^{-5}$ in FP32 and $10^{-10}$ in FP64. The check also compares every
# shape, and asks that no call modified the cache it was given (it clones the input cache before each call
# and compares after).

# %% [markdown] lang="zh"
# ### 6.2 逐个 logit 比较：12 种配置
#
# 下面进行系统的检查。只比较 argmax 选出的 token 是很弱的检验：差别很大的两组 logits 也可能选中同一个 token。我们比较的是**每个已处理位置上的全部词表 logits**，以及两层各自的 K 和 V。比较的双方是：
#
# * 完整路径：对整段序列只调用一次，不用缓存；
# * 缓存路径：把同一段序列切成若干分块依次送入，每次调用都带上前一次返回的缓存。
#
# 缓存路径的第 $t$ 个位置与完整路径的第 $t$ 个位置对齐比较，不错位。输入序列是固定的：由 `SEED` 生成的 24 个 token ID；batch 为 2 时再加一行不同的序列：只在一条路径上把两行混在一起的错误，会改变这条路径的 logits（两条路径同样混杂的错误逃得过这项比较，6.3 另作检查）。测试网格包括：batch 为 1 或 2；分块长度为 1、2 或 5（长度为 5 时最后一个分块只有 4 个 token）；在 CPU 上用 FP32 或 FP64。共 12 种配置。FP64 运行用的是同一份初始权重，只是转换成了 FP64（`.to(torch.float64)`）。
#
# 浮点数按不同的顺序求和，舍入结果就会不同；而分块调用时参与乘法的矩阵，形状也与完整调用时不同。因此我们要求的是在容差范围内相等，而不是逐比特相同：`TOLERANCE` 同时用作 `atol` 和 `rtol`，FP32 下为 $10^{-5}$，FP64 下为 $10^{-10}$。这项检查还会核对所有形状，并确认每次调用都没有改动传给它的缓存（每次调用前先克隆一份输入缓存，调用后再与它比较）。

# %%
STREAM_LEN = 24
gen = torch.Generator().manual_seed(SEED)
# [en] Row 0 serves batch 1; batch 2 uses both rows, which differ.
# [zh] batch 为 1 时只用第 0 行；batch 为 2 时两行都用，且两行不同。
STREAM = torch.randint(0, cfg.vocab, (2, STREAM_LEN), generator=gen)   # [2, 24]
print("STREAM[0]:", STREAM[0].tolist())
print("STREAM[1]:", STREAM[1].tolist())

# %% [markdown] lang="en"
# The single equivalence function. This section, the broken variants of section 7 and the tests all
# call this one function. `chunk` is either a chunk length or an explicit list of chunk lengths (for
# example `[4, 2]`).

# %% [markdown] lang="zh"
# 等价性检查只有这一个函数：本节、第 7 节改坏的版本以及测试都调用它。`chunk` 可以是一个分块长度，也可以是显式给出的分块长度列表（例如 `[4, 2]`）。

# %%
def chunk_lengths(total: int, chunk) -> list[int]:
    if isinstance(chunk, int):
        return [min(chunk, total - start) for start in range(0, total, chunk)]
    assert sum(chunk) == total
    return list(chunk)


# [en] The same weights (and the same hooks) in another precision; FP32 returns the model itself.
# [zh] 同一份权重（以及同样的钩子）换成另一种精度；FP32 直接返回模型本身。
def with_dtype(model: CacheDecoder, dtype) -> CacheDecoder:
    if dtype == torch.float32:
        return model
    converted = CacheDecoder(model.config, model.positions_fn, model.mask_fn).eval()
    converted.load_state_dict(model.state_dict())
    return converted.to(dtype)


# [en] Feed stream[:batch] in chunks through the cache and compare with one full call.
# [zh] 把 stream[:batch] 分块送入缓存路径，再与一次完整调用比较。
@torch.inference_mode()
def check_equivalence(model: CacheDecoder, stream: torch.Tensor, batch: int, chunk, dtype=torch.float32) -> dict:
    net = with_dtype(model, dtype)
    ids = stream[:batch]
    # [en] The full path: one call, no cache.
    # [zh] 完整路径：一次调用，不用缓存。
    full_logits, full_cache = net(ids)                           # [B, T, vocab]

    pieces, cache, start, cache_unchanged = [], None, 0, True
    for length in chunk_lengths(ids.shape[1], chunk):
        before = None if cache is None else [(k.clone(), v.clone()) for k, v in cache]
        logits, new_cache = net(ids[:, start:start + length], cache)
        # [en] The call must not touch the cache it received.
        # [zh] 这次调用不得改动传给它的缓存。
        if cache is not None:
            cache_unchanged &= all(torch.equal(k, k0) and torch.equal(v, v0)
                                   for (k, v), (k0, v0) in zip(cache, before))
        pieces.append(logits)
        cache, start = new_cache, start + length
    # [en] Position t of one path faces position t of the other: no shift.
    # [zh] 两条路径的第 t 个位置彼此对齐，不错位。
    chunked_logits = torch.cat(pieces, dim=1)                    # [B, T, vocab]

    kv_pairs = [(a, b) for pair, full_pair in zip(cache, full_cache) for a, b in zip(pair, full_pair)]
    same_shapes = len(cache) == len(full_cache) and all(
        a.shape == b.shape for a, b in [(chunked_logits, full_logits), *kv_pairs])
    return {
        "batch": batch,
        "chunk": chunk if isinstance(chunk, int) else list(chunk),
        "dtype": DTYPE_NAME[dtype],
        "max_abs_logit_err": max_abs_err(chunked_logits, full_logits) if same_shapes else float("inf"),
        "max_abs_kv_err": max(max_abs_err(a, b) for a, b in kv_pairs) if same_shapes else float("inf"),
        "cache_unchanged": bool(cache_unchanged),
        "passed": bool(same_shapes and close(chunked_logits, full_logits)
                       and all(close(a, b) for a, b in kv_pairs) and cache_unchanged),
    }

# %% [markdown] lang="en"
# Run the 12 configurations and show the largest absolute error of each.

# %% [markdown] lang="zh"
# 运行这 12 种配置，并列出每种配置的最大绝对误差。

# %%
def show_results(rows: list[dict]) -> None:
    say_table([[str(r["batch"]), str(r["chunk"]), r["dtype"].upper(), f"{r['max_abs_logit_err']:.3e}",
                f"{r['max_abs_kv_err']:.3e}", f"`{r['passed']}`"] for r in rows],
              en=["batch", "chunk", "dtype", "max abs logit error", "max abs K/V error", "passed"],
              zh=["batch", "分块长度", "精度", "logits 最大绝对误差", "K/V 最大绝对误差", "通过"])


EQUIVALENCE = [
    check_equivalence(model, STREAM, batch, chunk, dtype)
    for dtype in (torch.float32, torch.float64)
    for batch in (1, 2)
    for chunk in (1, 2, 5)
]
show_results(EQUIVALENCE)
WORST_LOGIT_ERR = {name: max(r["max_abs_logit_err"] for r in EQUIVALENCE if r["dtype"] == name)
                   for name in DTYPE_NAME.values()}
say(en=f"Largest logit error over the 6 configurations of each precision: "
       f"FP32 {WORST_LOGIT_ERR['fp32']:.3e}, FP64 {WORST_LOGIT_ERR['fp64']:.3e}.",
    zh=f"每种精度 6 种配置中 logits 的最大绝对误差：FP32 为 {WORST_LOGIT_ERR['fp32']:.3e}，"
       f"FP64 为 {WORST_LOGIT_ERR['fp64']:.3e}。")
assert all(r["passed"] for r in EQUIVALENCE)

# %% [markdown] lang="en"
# Two more properties. **Causality:** changing the last token of the stream must leave every earlier
# logit unchanged (within the tolerance) and must change the last one, or the test proves nothing.
# **Cache lifecycle:** no incremental call may modify the cache tensors it received; `check_equivalence`
# recorded this for every call of every configuration above. Each check gets its negative control: a
# mask that lets every query read every key must fail the causality test, and a decoder that writes
# into the cache it received must be caught by `check_equivalence`. That decoder writes after computing
# its step, so its logits and its new cache are right: only the lifecycle check can catch it, the bug
# a caller meets when it keeps an old cache (to try two continuations, say). One table per property gives
# the verdicts and the numbers behind them.

# %% [markdown] lang="zh"
# 再检查两条性质。**因果性**：改动序列的最后一个 token，之前所有位置的 logits 都必须保持不变（在容差之内），而最后一个位置的 logits 必须改变，否则这项检验什么也证明不了。**缓存生命周期**：任何一次增量调用都不得修改传给它的缓存张量；对上面每种配置的每一次调用，`check_equivalence` 都已经记录了这一项。两项检查各配一个负对照：让每个查询都能读取所有键的掩码必须通不过因果性检验；往传入的缓存里写数据的解码器必须被 `check_equivalence` 查出。这个解码器在算完这一步之后才往缓存里写数据，所以它的 logits 和新缓存都是对的，只有生命周期检查能查出它；调用方保留旧缓存时（比如要试两种续写）就会遇到这种错误。每项性质一张表，给出检查的结论及其依据的数字。

# %%
# [en] Change only the last token: earlier logits must not move, the last ones must.
# [zh] 只改最后一个 token：之前的 logits 不得变化，最后一个位置的 logits 必须变化。
@torch.inference_mode()
def check_causality(model: CacheDecoder, stream: torch.Tensor) -> dict:
    altered = stream.clone()
    altered[:, -1] = (stream[:, -1] + 1) % model.config.vocab
    original, _ = model(stream)
    changed, _ = model(altered)
    return {"earlier_max_abs_diff": max_abs_err(original[:, :-1], changed[:, :-1]),
            "last_max_abs_diff": max_abs_err(original[:, -1], changed[:, -1]),
            "passed": close(original[:, :-1], changed[:, :-1]) and not close(original[:, -1], changed[:, -1])}


# [en] WRONG on purpose: every query reads every key, its future included.
# [zh] 故意写错：每个查询都能读取所有键，包括它未来的键。
def see_everything(past_len: int, new_len: int) -> torch.Tensor:
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool)


# [en] WRONG on purpose: once its step is computed (right), adds 0.5 to the newest key of layer 0 in the
# [en] cache it received, the cache its caller still holds.
# [zh] 故意写错：这一步（正确地）算完之后，往收到的缓存里第 0 层最新的键上加 0.5，而调用方手里的
# [zh] 还是这份缓存。
class WritesIntoCache(CacheDecoder):
    def forward(self, ids, cache=None):
        logits, new_cache = super().forward(ids, cache)
        if cache is not None:
            cache[0][0][..., -1, :] += 0.5
        return logits, new_cache


CAUSALITY = check_causality(model, STREAM)
CACHE_UNCHANGED_OK = all(r["cache_unchanged"] for r in EQUIVALENCE)
with model.hooks(mask_fn=see_everything):
    LEAKY_CAUSALITY = check_causality(model, STREAM)
writer = WritesIntoCache(cfg).eval()
writer.load_state_dict(model.state_dict())
WRITER_RUN = check_equivalence(writer, STREAM, 1, 2)
say_table(
    [[label, f"{run['earlier_max_abs_diff']:.1e}", f"{run['last_max_abs_diff']:.1e}", f"`{run['passed']}`"]
     for label, run in (("`model`", CAUSALITY), ("`model` + `see_everything`", LEAKY_CAUSALITY))],
    en=["causality: decoder", "earlier logits moved (max abs)", "last logits moved (max abs)", "`check_causality` passes"],
    zh=["因果性：解码器", "之前位置 logits 的变化量（最大绝对值）", "最后一个位置 logits 的变化量（最大绝对值）",
        "`check_causality` 通过"],
)
say_table(
    [["`model`", f"{max(WORST_LOGIT_ERR.values()):.1e}", f"`{CACHE_UNCHANGED_OK}`",
      f"`{all(r['passed'] for r in EQUIVALENCE)}`"],
     ["`WritesIntoCache`", f"{WRITER_RUN['max_abs_logit_err']:.1e}",
      f"`{WRITER_RUN['cache_unchanged']}`", f"`{WRITER_RUN['passed']}`"]],
    en=["cache lifecycle: decoder", "logits: max abs error", "received caches unchanged", "`check_equivalence` passes"],
    zh=["缓存生命周期：解码器", "logits 最大绝对误差", "传入的缓存未被改动", "`check_equivalence` 通过"],
)
assert CAUSALITY["passed"] and CACHE_UNCHANGED_OK and not LEAKY_CAUSALITY["passed"] and not WRITER_RUN["passed"]
# [en] The writer's logits are right: only the lifecycle check catches it.
# [zh] 这个解码器的 logits 是对的：只有生命周期检查能查出它。
assert WRITER_RUN["max_abs_logit_err"] <= TOLERANCE[torch.float32] and not WRITER_RUN["cache_unchanged"]
