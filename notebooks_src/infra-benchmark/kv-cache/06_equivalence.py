# %% [markdown] lang="en"
# ## 6. Equivalence: cached path versus full recomputation
#
# First, back to the six-token example of section 2, this time through the decoder of section 5: prefill
# `[12, 7, 31, 4]`, then `[9, 18]` in one call. The decoder has the sizes of the toy layer (vocabulary
# 97, width 64, 4 heads of 16 dimensions). Each layer's cache grows from 4 to 6 positions, the logits
# come back as `[1, 2, 97]`, and they match rows 4 and 5 of a full six-token run. Layer 2's keys and
# values differ from layer 1's, as section 5 argued they must.

# %% [markdown] lang="zh"
# ## 6. 等价性：缓存路径与完整重算
#
# 先回到第 2 节六个 token 的例子，这次用第 5 节的解码器：先预填充 `[12, 7, 31, 4]`，再一次性送入 `[9, 18]`。解码器的尺寸与第 2 节的玩具层相同（词表 97，宽度 64，4 个头、每头 16 维）。每层缓存从 4 个位置增长到 6 个，返回的 logits 形状为 `[1, 2, 97]`，并且与一次性完整重算六个 token 时的第 4、5 行一致。正如第 5 节所论证的，第 2 层的 K/V 与第 1 层的不同。

# %%
# [en] The decoder has the sizes of the toy layer of section 2.
# [zh] 解码器的尺寸与第 2 节的玩具层相同。
assert (cfg.vocab, cfg.width, cfg.heads, cfg.head_dim) == (VOCAB, WIDTH, H, DH)
with torch.inference_mode():
    six = torch.tensor([IDS])
    _, six_cache = model(six[:, :4])
    six_logits, six_cache_after = model(six[:, 4:], six_cache)
    six_full_logits, _ = model(six)

assert len(six_cache) == len(six_cache_after) == cfg.layers
for (k_before, v_before), (k_after, v_after) in zip(six_cache, six_cache_after):
    assert tuple(k_before.shape) == tuple(v_before.shape) == (1, cfg.heads, 4, cfg.head_dim)
    assert tuple(k_after.shape) == tuple(v_after.shape) == (1, cfg.heads, 6, cfg.head_dim)
assert tuple(six_logits.shape) == (1, 2, cfg.vocab)
torch.testing.assert_close(six_logits, six_full_logits[:, 4:], atol=1e-5, rtol=1e-5)
(k_layer1, v_layer1), (k_layer2, v_layer2) = six_cache_after
# [en] One cache per layer: the two layers' K and V differ.
# [zh] 每层各有一份缓存：两层的 K/V 不同。
assert not torch.allclose(k_layer1, k_layer2) and not torch.allclose(v_layer1, v_layer2)
print("cache per layer:", [list(k.shape) for k, _ in six_cache], "->", [list(k.shape) for k, _ in six_cache_after])
print("logits:", list(six_logits.shape))

# %% [markdown] lang="en"
# Now the systematic check. Matching argmax tokens is a weak test: quite different logits can still pick the same token. We
# compare **every vocabulary logit at every consumed position**, plus both layers' K and V, between
#
# * the full path: one call over the whole stream, no cache; and
# * the cached path: the same stream fed in chunks, each call receiving the cache returned by the previous one.
#
# Position $t$ of the cached path is compared with position $t$ of the full path, with no shift. The
# stream is fixed: 24 token IDs drawn from `SEED`, with a second, different row for batch 2 so that the
# two sequences of a batch cannot hide each other's mistakes. The grid covers batch 1 and 2, chunks of 1,
# 2 and 5 tokens (with 5 the last chunk holds only 4), and FP32 and FP64 on the CPU: 12 configurations.
# The FP64 runs convert the very same initial weights to FP64 (`.to(torch.float64)`).
#
# Floating-point sums in a different order round differently, and a chunked call multiplies matrices of
# other shapes than a full call. So we ask for equality within a tolerance, not bit for bit:
# `atol = rtol = 1e-5` in FP32 and `1e-10` in FP64. The function also checks every shape, and that no
# call modified the cache it was given (it clones the input cache before each call and compares after).

# %% [markdown] lang="zh"
# 下面做系统的检查。只比较 argmax 选出的 token 是很弱的检验：差别很大的两组 logits 也可能选中同一个 token。我们比较的是**每个已处理位置上的全部词表 logits**，以及两层各自的 K 和 V。比较的双方是：
#
# * 完整路径：对整段序列只调用一次，不用缓存；
# * 缓存路径：把同一段序列切成若干块依次送入，每次调用都带上前一次返回的缓存。
#
# 缓存路径的第 $t$ 个位置与完整路径的第 $t$ 个位置对齐比较，不错位。输入序列是固定的：由 `SEED` 生成的 24 个 token ID；batch 为 2 时再加一行不同的序列，免得同一 batch 里的两条序列互相掩盖错误。测试网格覆盖：batch 为 1 或 2；块长为 1、2 或 5（块长为 5 时最后一块只有 4 个 token）；CPU 上的 FP32 或 FP64。共 12 种配置。FP64 运行用的是同一份初始权重，只是转换成了 FP64（`.to(torch.float64)`）。
#
# 浮点数按不同顺序求和，舍入结果也会不同；而分块调用时参与乘法的矩阵形状也与一次性调用不同。因此我们要求的是在容差范围内相等，而不是逐比特相等：FP32 用 `atol = rtol = 1e-5`，FP64 用 `1e-10`。这个函数还会核对所有形状，并确认每次调用都没有改动传给它的缓存（调用前先克隆一份，调用后再比较）。

# %%
STREAM_LEN = 24
gen = torch.Generator().manual_seed(SEED)
STREAM = torch.randint(0, cfg.vocab, (2, STREAM_LEN), generator=gen)   # row 0 for batch 1, both rows for batch 2
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}
DTYPE_NAME = {torch.float32: "fp32", torch.float64: "fp64"}
assert not torch.equal(STREAM[0], STREAM[1])                            # the two rows differ
print("stream row 0:", STREAM[0].tolist())
print("stream row 1:", STREAM[1].tolist())

# %% [markdown] lang="en"
# The single equivalence function. Sections 6 and 7 and the tests all call this one function. `chunk`
# is either a chunk length or an explicit list of chunk lengths (for example `[4, 2]`).

# %% [markdown] lang="zh"
# 等价性检查只有这一个函数：第 6、7 节和测试都调用它。`chunk` 可以是一个块长，也可以是显式给出的块长列表（例如 `[4, 2]`）。

# %%
def chunk_lengths(total: int, chunk) -> list[int]:
    if isinstance(chunk, int):
        return [min(chunk, total - start) for start in range(0, total, chunk)]
    assert sum(chunk) == total, "explicit chunks must cover the stream"
    return list(chunk)


def with_dtype(model: CacheDecoder, dtype) -> CacheDecoder:
    """The same weights (and the same hooks) in another precision; FP32 returns the model itself."""
    if dtype == torch.float32:
        return model
    converted = CacheDecoder(model.config, model.positions_fn, model.mask_fn).eval()
    converted.load_state_dict(model.state_dict())
    return converted.to(dtype)


@torch.inference_mode()
def check_equivalence(model: CacheDecoder, stream: torch.Tensor, batch: int, chunk, dtype=torch.float32) -> dict:
    """Feed stream[:batch] in chunks through the cache and compare with one full call."""
    net = with_dtype(model, dtype)
    ids = stream[:batch]
    total = ids.shape[1]
    tol = TOLERANCE[dtype]
    full_logits, full_cache = net(ids)                           # [B, T, vocab], one call, no cache

    pieces, cache, start, cache_unchanged = [], None, 0, True
    for length in chunk_lengths(total, chunk):
        before = None if cache is None else [(k.clone(), v.clone()) for k, v in cache]
        logits, new_cache = net(ids[:, start:start + length], cache)
        if cache is not None:                                    # the call must not touch its input cache
            cache_unchanged &= all(torch.equal(k, k0) and torch.equal(v, v0)
                                   for (k, v), (k0, v0) in zip(cache, before))
        pieces.append(logits)
        cache, start = new_cache, start + length
    chunked_logits = torch.cat(pieces, dim=1)                    # position t <-> position t, no shift

    kv_shape = (batch, model.config.heads, total, model.config.head_dim)
    shapes_ok = (chunked_logits.shape == full_logits.shape == (batch, total, model.config.vocab)
                 and len(cache) == len(full_cache) == model.config.layers
                 and all(t.shape == kv_shape for pair in cache + full_cache for t in pair))
    logit_err = (chunked_logits - full_logits).abs().max().item() if shapes_ok else float("inf")
    kv_err = max((a - b).abs().max().item() for pa, pb in zip(cache, full_cache) for a, b in zip(pa, pb)) if shapes_ok else float("inf")
    close = shapes_ok and torch.allclose(chunked_logits, full_logits, atol=tol, rtol=tol) and all(
        torch.allclose(a, b, atol=tol, rtol=tol) for pa, pb in zip(cache, full_cache) for a, b in zip(pa, pb))
    return {
        "batch": batch,
        "chunk": chunk if isinstance(chunk, int) else list(chunk),
        "dtype": DTYPE_NAME[dtype],
        "max_abs_logit_err": logit_err,
        "max_abs_kv_err": kv_err,
        "shapes_ok": bool(shapes_ok),
        "cache_unchanged": bool(cache_unchanged),
        "passed": bool(close and cache_unchanged),
    }

# %% [markdown] lang="en"
# Run the 12 configurations and print the largest absolute error of each. The cell also checks the
# grid itself: it is complete (with `QUICK = True` too), chunks of 5 split the 24 tokens as 5, 5, 5, 5, 4,
# and the FP64 model holds exactly the FP32 weights.

# %% [markdown] lang="zh"
# 运行 12 种配置，并打印每种配置的最大绝对误差。这个单元格也会检查网格本身：12 种配置一个不少（`QUICK = True` 时同样如此）；块长为 5 时，24 个 token 被切成 5、5、5、5、4；FP64 模型的权重与 FP32 模型完全相同。

# %%
def print_results(rows: list[dict]) -> None:
    print(f"{'batch':>5} {'chunk':>5} {'dtype':>5} {'max |logit err|':>16} {'max |K/V err|':>14}  passed")
    for r in rows:
        print(f"{r['batch']:>5} {r['chunk']:>5} {r['dtype']:>5} "
              f"{r['max_abs_logit_err']:>16.3e} {r['max_abs_kv_err']:>14.3e}  {r['passed']}")


EQUIVALENCE = [
    check_equivalence(model, STREAM, batch, chunk, dtype)
    for dtype in (torch.float32, torch.float64)
    for batch in (1, 2)
    for chunk in (1, 2, 5)
]
print_results(EQUIVALENCE)
assert len(EQUIVALENCE) == 12
assert {(r["batch"], r["chunk"], r["dtype"]) for r in EQUIVALENCE} == {   # the full grid, whatever QUICK is
    (b, c, d) for b in (1, 2) for c in (1, 2, 5) for d in ("fp32", "fp64")}
assert chunk_lengths(STREAM_LEN, 5) == [5, 5, 5, 5, 4]
fp64_weights = with_dtype(model, torch.float64).state_dict()
assert all(fp64_weights[name].dtype == torch.float64 and torch.equal(fp64_weights[name], w.double())
           for name, w in model.state_dict().items())
assert all(r["passed"] and r["shapes_ok"] and r["cache_unchanged"] for r in EQUIVALENCE)
for name in DTYPE_NAME.values():
    worst = max(r["max_abs_logit_err"] for r in EQUIVALENCE if r["dtype"] == name)
    print(f"largest {name} logit error over its 6 configurations: {worst:.3e}")

# %% [markdown] lang="en"
# Two more properties. **Causality:** changing the last token of the stream must leave every earlier
# logit unchanged (and must change the last one, or the test proves nothing). **Cache
# lifecycle:** no incremental call may modify the cache tensors it received; `check_equivalence`
# recorded this for every call of every configuration above.

# %% [markdown] lang="zh"
# 再检查两条性质。**因果性**：改动序列的最后一个 token，之前所有位置的 logits 都必须保持不变（而最后一个位置的 logits 必须改变，否则这项检验什么也证明不了）。**缓存生命周期**：任何一次增量调用都不得修改传给它的缓存张量；对上面每种配置的每一次调用，`check_equivalence` 都已经记录了这一项。

# %%
@torch.inference_mode()
def check_causality(model: CacheDecoder, stream: torch.Tensor) -> dict:
    """Change only the last token; earlier logits must not move, the last ones must."""
    altered = stream.clone()
    altered[:, -1] = (stream[:, -1] + 1) % model.config.vocab
    original, _ = model(stream)
    changed, _ = model(altered)
    earlier_err = (original[:, :-1] - changed[:, :-1]).abs().max().item()
    last_diff = (original[:, -1] - changed[:, -1]).abs().max().item()
    return {"earlier_max_abs_diff": earlier_err, "last_max_abs_diff": last_diff,
            "passed": earlier_err <= 1e-6 and last_diff > 1e-4}


CAUSALITY = check_causality(model, STREAM)
CAUSALITY_OK = CAUSALITY["passed"]
CACHE_UNCHANGED_OK = all(r["cache_unchanged"] for r in EQUIVALENCE)
print(f"causality: earlier logits moved by at most {CAUSALITY['earlier_max_abs_diff']:.3e}, "
      f"last position moved by {CAUSALITY['last_max_abs_diff']:.3e}")
print(f"input caches unchanged after every incremental call: {CACHE_UNCHANGED_OK}")
assert CAUSALITY_OK and CACHE_UNCHANGED_OK
