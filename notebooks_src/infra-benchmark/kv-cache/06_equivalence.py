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
# 先回到第 2 节六个 token 的例子，这次换用第 5 节的解码器：先预填充 `[12, 7, 31, 4]`，再一次性送入 `[9, 18]`。解码器的尺寸与第 2 节的玩具层相同（词表大小 97，宽度 64，4 个头、每头 16 维）。每层的缓存从 4 个位置增长到 6 个，返回的 logits 形状为 `[1, 2, 97]`，并且与完整重算六个 token 时的第 4、5 行一致。正如第 5 节所论证的，第 2 层的 K/V 与第 1 层的不同。

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
say_table([[str(layer), f"`{list(before[0].shape)}`", f"`{list(after[0].shape)}`"]
           for layer, (before, after) in enumerate(zip(six_cache, six_cache_after))],
          en=["layer", "cached K after the prefill", "cached K after `[9, 18]`"],
          zh=["层", "预填充后缓存的 K", "送入 `[9, 18]` 后缓存的 K"])
six_err = (six_logits - six_full_logits[:, 4:]).abs().max().item()
say(en=f"Logits `{list(six_logits.shape)}`; largest difference from rows 4 and 5 of the full recomputation: {six_err:.3e}.",
    zh=f"logits 形状为 `{list(six_logits.shape)}`；与完整重算第 4、5 行的最大差为 {six_err:.3e}。")

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
# 下面进行系统的检查。只比较 argmax 选出的 token 是很弱的检验：差别很大的两组 logits 也可能选中同一个 token。我们比较的是**每个已处理位置上的全部词表 logits**，以及两层各自的 K 和 V。比较的双方是：
#
# * 完整路径：对整段序列只调用一次，不用缓存；
# * 缓存路径：把同一段序列切成若干分块依次送入，每次调用都带上前一次返回的缓存。
#
# 缓存路径的第 $t$ 个位置与完整路径的第 $t$ 个位置对齐比较，不错位。输入序列是固定的：由 `SEED` 生成的 24 个 token ID；batch 为 2 时再加一行不同的序列，免得同一 batch 里的两条序列互相掩盖错误。测试网格包括：batch 为 1 或 2；分块长度为 1、2 或 5（长度为 5 时最后一个分块只有 4 个 token）；在 CPU 上用 FP32 或 FP64。共 12 种配置。FP64 运行用的是同一份初始权重，只是转换成了 FP64（`.to(torch.float64)`）。
#
# 浮点数按不同的顺序求和，舍入结果就会不同；而分块调用时参与乘法的矩阵，形状也与完整调用时不同。因此我们要求的是在容差范围内相等，而不是逐比特相同：FP32 用 `atol = rtol = 1e-5`，FP64 用 `1e-10`。这个函数还会核对所有形状，并确认每次调用都没有改动传给它的缓存（每次调用前先克隆一份输入缓存，调用后再与它比较）。

# %%
STREAM_LEN = 24
gen = torch.Generator().manual_seed(SEED)
STREAM = torch.randint(0, cfg.vocab, (2, STREAM_LEN), generator=gen)   # [2, 24]
# [en] Row 0 serves batch 1; batch 2 uses both rows, which differ.
# [zh] batch 为 1 时只用第 0 行；batch 为 2 时两行都用，且两行不同。
assert not torch.equal(STREAM[0], STREAM[1])
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
    total = ids.shape[1]
    tol = TOLERANCE[dtype]
    # [en] The full path: one call, no cache.
    # [zh] 完整路径：一次调用，不用缓存。
    full_logits, full_cache = net(ids)                           # [B, T, vocab]

    pieces, cache, start, cache_unchanged = [], None, 0, True
    for length in chunk_lengths(total, chunk):
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
# Run the 12 configurations and show the largest absolute error of each. The cell also checks the
# grid itself: it is complete (with `QUICK = True` too), chunks of 5 split the 24 tokens as 5, 5, 5, 5, 4,
# and the FP64 model holds exactly the FP32 weights.

# %% [markdown] lang="zh"
# 运行这 12 种配置，并列出每种配置的最大绝对误差。这个单元格也会检查网格本身：12 种配置一个不少（`QUICK = True` 时也是如此）；分块长度为 5 时，24 个 token 被切成 5、5、5、5、4；FP64 模型的权重与 FP32 模型完全相同。

# %%
def show_results(rows: list[dict]) -> None:
    say_table([[str(r["batch"]), str(r["chunk"]), r["dtype"], f"{r['max_abs_logit_err']:.3e}",
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
assert len(EQUIVALENCE) == 12
# [en] The full grid, whatever QUICK is.
# [zh] 无论 QUICK 取何值，网格都是完整的。
assert {(r["batch"], r["chunk"], r["dtype"]) for r in EQUIVALENCE} == {
    (b, c, d) for b in (1, 2) for c in (1, 2, 5) for d in ("fp32", "fp64")}
assert chunk_lengths(STREAM_LEN, 5) == [5, 5, 5, 5, 4]
fp64_weights = with_dtype(model, torch.float64).state_dict()
assert all(fp64_weights[name].dtype == torch.float64 and torch.equal(fp64_weights[name], w.double())
           for name, w in model.state_dict().items())
assert all(r["passed"] and r["shapes_ok"] and r["cache_unchanged"] for r in EQUIVALENCE)
WORST_LOGIT_ERR = {name: max(r["max_abs_logit_err"] for r in EQUIVALENCE if r["dtype"] == name)
                   for name in DTYPE_NAME.values()}
say(en=f"All 12 configurations passed. Largest logit error over the 6 configurations of each precision: "
       f"FP32 {WORST_LOGIT_ERR['fp32']:.3e}, FP64 {WORST_LOGIT_ERR['fp64']:.3e}.",
    zh=f"12 种配置全部通过。每种精度 6 种配置中 logits 的最大误差：FP32 为 {WORST_LOGIT_ERR['fp32']:.3e}，"
       f"FP64 为 {WORST_LOGIT_ERR['fp64']:.3e}。")

# %% [markdown] lang="en"
# Two more properties. **Causality:** changing the last token of the stream must leave every earlier
# logit unchanged (and must change the last one, or the test proves nothing). **Cache
# lifecycle:** no incremental call may modify the cache tensors it received; `check_equivalence`
# recorded this for every call of every configuration above. Each check gets its negative control: a
# mask that lets every query read every key must fail the causality test, and a decoder that writes
# into the cache it received must be flagged by `check_equivalence`.

# %% [markdown] lang="zh"
# 再检查两条性质。**因果性**：改动序列的最后一个 token，之前所有位置的 logits 都必须保持不变（而最后一个位置的 logits 必须改变，否则这项检验什么也证明不了）。**缓存生命周期**：任何一次增量调用都不得修改传给它的缓存张量；对上面每种配置的每一次调用，`check_equivalence` 都已经记录了这一项。两项检查各配一个负对照：让每个查询都能读取所有键的掩码必须通不过因果性检验；往传入的缓存里写数据的解码器必须被 `check_equivalence` 标记出来。

# %%
# [en] Change only the last token: earlier logits must not move, the last ones must.
# [zh] 只改最后一个 token：之前的 logits 不得变化，最后一个位置的 logits 必须变化。
@torch.inference_mode()
def check_causality(model: CacheDecoder, stream: torch.Tensor) -> dict:
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
assert CAUSALITY_OK and CACHE_UNCHANGED_OK


# [en] WRONG on purpose: every query reads every key, its future included.
# [zh] 故意写错：每个查询都能读取所有键，包括它未来的键。
def see_everything(past_len: int, new_len: int) -> torch.Tensor:
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool)


# [en] WRONG on purpose: adds 0.5 to the newest key of layer 0 in the cache it receives.
# [zh] 故意写错：往收到的缓存里第 0 层最新的键上加 0.5。
class WritesIntoCache(CacheDecoder):
    def forward(self, ids, cache=None):
        if cache is not None:
            cache[0][0][..., -1, :] += 0.5
        return super().forward(ids, cache)


with model.hooks(mask_fn=see_everything):
    LEAKY_CAUSALITY = check_causality(model, STREAM)
writer = WritesIntoCache(cfg).eval()
writer.load_state_dict(model.state_dict())
assert not LEAKY_CAUSALITY["passed"] and not check_equivalence(writer, STREAM, 1, 2)["cache_unchanged"]
say(en=f"Causality: earlier logits moved by at most {CAUSALITY['earlier_max_abs_diff']:.3e}, the last position "
       f"by {CAUSALITY['last_max_abs_diff']:.3e}. Every incremental call left its input cache unchanged. "
       f"Negative controls: with `see_everything` earlier logits moved by {LEAKY_CAUSALITY['earlier_max_abs_diff']:.3e}; "
       f"`WritesIntoCache` was flagged.",
    zh=f"因果性：之前位置的 logits 最多变化 {CAUSALITY['earlier_max_abs_diff']:.3e}，最后一个位置的 logits 变化了 "
       f"{CAUSALITY['last_max_abs_diff']:.3e}。每次增量调用都没有改动传给它的缓存。"
       f"负对照：换上 `see_everything` 后，之前位置的 logits 变化了 {LEAKY_CAUSALITY['earlier_max_abs_diff']:.3e}；"
       f"`WritesIntoCache` 被标记了出来。")

# %% [markdown] lang="en"
# ### Greedy generation, with and without the cache
#
# So far every continuation was a predetermined stream. A real decoder chooses each next token from the
# logits it has just returned. The loop below is the one you will meet in libraries, reduced to greedy
# decoding (always the most likely token): a **prefill** over the prompt, then one token per step, each
# step feeding only the token just chosen together with the cache the previous call returned. With
# `use_cache=False` the same loop feeds the whole sequence every step instead, the full recomputation.
#
# The batch holds 2 prompts of 8 tokens each (the first 8 tokens of both stream rows), and each run
# generates 40 tokens. The two runs must choose the same tokens, and the logits that every step chose
# from must agree within the FP32 tolerance above. Equal tokens alone would be the weak test of
# matching argmax again, so we also look at how close the decision was: at every step the gap between
# the best and the second-best logit must be far larger than the difference between the two runs,
# otherwise equal tokens could be luck.

# %% [markdown] lang="zh"
# ### 贪心生成：用缓存与不用缓存
#
# 到目前为止，续写的 token 都来自预先确定的序列。真正的解码器要根据刚返回的 logits 选出下一个 token。下面的循环就是各种库里常见的写法，只是简化成了贪心解码（每次都选概率最大的 token）：先对提示做一次**预填充**，然后每步生成一个 token；每一步只送入刚选出的 token，以及上一次调用返回的缓存。当 `use_cache=False` 时，同一个循环每一步都改为把整个序列重新送入，也就是完整重算。
#
# batch 中有 2 个提示，每个 8 个 token（取序列两行各自的前 8 个 token），每次运行生成 40 个 token。两次运行必须选出相同的 token，而且每一步用来做选择的 logits 必须在上面的 FP32 容差内一致。只看 token 是否相同，又回到了只比较 argmax 的弱检验，所以我们还要看每次选择有多大把握：每一步 logits 中最大值与次大值之差（选择的余量）都必须远大于两次运行之间的差异，否则 token 相同可能只是运气。

# %%
GEN_PROMPT_LEN, GEN_TOKENS = 8, 40
GEN_PROMPTS = STREAM[:, :GEN_PROMPT_LEN]                       # [2, 8]


@torch.inference_mode()
def greedy_generate(model: CacheDecoder, prompt: torch.Tensor, new_tokens: int, use_cache: bool = True):
    # [en] The first call is the prefill: the whole prompt.
    # [zh] 第一次调用就是预填充：送入整个提示。
    ids, cache, step_input = prompt, None, prompt
    chosen_logits = []
    for _ in range(new_tokens):
        if use_cache:
            logits, cache = model(step_input, cache)            # [B, T_new, vocab]
        else:
            logits, _ = model(ids)                              # [B, T, vocab]
        next_logits = logits[:, -1]                             # [B, vocab]
        next_id = next_logits.argmax(dim=-1, keepdim=True)      # [B, 1]
        ids = torch.cat((ids, next_id), dim=1)
        step_input = next_id
        chosen_logits.append(next_logits)
    return ids[:, prompt.shape[1]:], torch.stack(chosen_logits, dim=1)   # [B, G], [B, G, vocab]


GEN_CACHED, GEN_CACHED_LOGITS = greedy_generate(model, GEN_PROMPTS, GEN_TOKENS, use_cache=True)
GEN_FULL, GEN_FULL_LOGITS = greedy_generate(model, GEN_PROMPTS, GEN_TOKENS, use_cache=False)
for row in range(GEN_PROMPTS.shape[0]):
    print(f"GEN_PROMPTS[{row}] ", GEN_PROMPTS[row].tolist())
    print(f"GEN_CACHED[{row}]  ", GEN_CACHED[row].tolist())
    print(f"GEN_FULL[{row}]    ", GEN_FULL[row].tolist())

# %% [markdown] lang="en"
# The checks: same shapes, the very same 40 tokens in both rows, logits within tolerance at every step,
# and a decision margin that dwarfs the difference. A negative control completes the picture: with the
# upper-left mask swapped in through the hook, the cached run reads the wrong keys and the comparison
# fails. (The run without a cache has no past, so the hook leaves it correct.)

# %% [markdown] lang="zh"
# 接下来的检查包括：形状一致；两行都生成了完全相同的 40 个 token；每一步的 logits 都在容差之内；选择的余量远大于两次运行的差异。最后再加一个负对照：通过钩子换上左上角三角形掩码后，用缓存的运行读错了键，比较随即失败。（不用缓存的运行没有缓存的历史可读，所以换上这个钩子后它仍然正确。）

# %%
GEN_TOL = TOLERANCE[torch.float32]


def compare_generations(cached, cached_logits, full, full_logits) -> dict:
    top2 = full_logits.topk(2, dim=-1).values                   # [B, G, 2]
    return {
        "tokens_equal": bool(torch.equal(cached, full)),
        "max_abs_logit_err": (cached_logits - full_logits).abs().max().item(),
        "min_top2_margin": (top2[..., 0] - top2[..., 1]).min().item(),
        "logits_close": bool(torch.allclose(cached_logits, full_logits, atol=GEN_TOL, rtol=GEN_TOL)),
    }


GENERATION = compare_generations(GEN_CACHED, GEN_CACHED_LOGITS, GEN_FULL, GEN_FULL_LOGITS)
assert tuple(GEN_CACHED.shape) == tuple(GEN_FULL.shape) == (2, GEN_TOKENS)
assert tuple(GEN_CACHED_LOGITS.shape) == tuple(GEN_FULL_LOGITS.shape) == (2, GEN_TOKENS, cfg.vocab)
assert GENERATION["tokens_equal"] and GENERATION["logits_close"]
assert GENERATION["min_top2_margin"] > 100 * GENERATION["max_abs_logit_err"]

# [en] Negative control: the cached run with the upper-left mask.
# [zh] 负对照：缓存路径换上左上角三角形掩码。
with model.hooks(mask_fn=local_triangle_mask):
    broken_tokens, broken_logits = greedy_generate(model, GEN_PROMPTS, GEN_TOKENS, use_cache=True)
GENERATION_BROKEN = compare_generations(broken_tokens, broken_logits, GEN_FULL, GEN_FULL_LOGITS)
assert not GENERATION_BROKEN["logits_close"]
# [en] Without a cache the upper-left triangle is the ordinary causal mask: the uncached run stays correct.
# [zh] 没有缓存时，左上角三角形就是普通的因果掩码：不用缓存的运行仍然正确。
assert torch.equal(local_triangle_mask(0, GEN_PROMPT_LEN + GEN_TOKENS), causal_mask(0, GEN_PROMPT_LEN + GEN_TOKENS))
assert model.mask_fn is causal_mask

say_table(
    [["`use_cache=True`", f"`{GENERATION['tokens_equal']}`", f"{GENERATION['max_abs_logit_err']:.3e}",
      f"`{GENERATION['logits_close']}`"],
     ["`use_cache=True`, `local_triangle_mask`", f"`{GENERATION_BROKEN['tokens_equal']}`",
      f"{GENERATION_BROKEN['max_abs_logit_err']:.3e}", f"`{GENERATION_BROKEN['logits_close']}`"]],
    en=["run, compared with `use_cache=False`", "same 40 tokens", "max abs logit error", "within tolerance"],
    zh=["运行方式（与 `use_cache=False` 比较）", "40 个 token 相同", "logits 最大绝对误差", "在容差之内"],
)
say(en=f"Greedy generation: the cached and the uncached loop chose the same {GEN_TOKENS} tokens in both rows; "
       f"their logits differ by at most {GENERATION['max_abs_logit_err']:.3e}, while the closest decision "
       f"had a margin of {GENERATION['min_top2_margin']:.3e}.",
    zh=f"贪心生成：用缓存与不用缓存的循环在两行中都选出了相同的 {GEN_TOKENS} 个 token；两者的 logits 最多相差 "
       f"{GENERATION['max_abs_logit_err']:.3e}，而最接近的一次选择，余量也有 {GENERATION['min_top2_margin']:.3e}。")
