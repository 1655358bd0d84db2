# %% [markdown] lang="en"
# ## 8. Fused attention
#
# Our attention so far is explicit: a score matrix, a mask, a softmax and a second matrix product, each
# a separate tensor. `torch.nn.functional.scaled_dot_product_attention` (SDPA) computes the same thing in
# one call and may choose a fused kernel that never writes the score matrix to memory. For a cache the
# only question is the mask, because a chunk after a cache gives a score matrix of shape $[C, P + C]$,
# which is not square. Section 2 showed SDPA's two conventions on random tensors: `is_causal=True`
# aligns the triangle to the upper-left corner (wrong after a cache), `causal_lower_right(C, P + C)` to the
# lower-right corner (our offset mask). Here they run inside the decoder. Three `attend` functions plug
# into the model of section 5:
#
# * `sdpa_bool_mask`: SDPA with our boolean mask (`True` = may read), so any mask rule works, including
#   the band of section 6;
# * `sdpa_lower_right`: SDPA with `causal_lower_right`, valid when the keys are exactly positions
#   $0 \dots P + C - 1$ in order (a `FullKV`);
# * `sdpa_causal_if_several` (the negative control): no mask, and `is_causal=True` whenever the call has
#   more than one query. This is a pattern one finds in real code: it is right for a prefill (square
#   scores) and harmless for a one-token decode step (a single query may read every cached key), but
#   after a non-empty cache it hides most of the cache from a multi-token chunk.

# %% [markdown] lang="zh"
# ## 8. 融合注意力
#
# 到目前为止，我们的注意力都是显式计算的：分数矩阵、掩码、softmax 和第二次矩阵乘法，各自是一个单独的张量。`torch.nn.functional.scaled_dot_product_attention`（SDPA）用一次调用算出同样的结果，还可能选用一个从不把分数矩阵写入内存的融合算子。对缓存来说，唯一的问题是掩码：接在缓存之后的分块，其分数矩阵的形状是 $[C, P + C]$，不是方阵。第 2 节已经用随机张量展示了 SDPA 的两种约定：`is_causal=True` 把三角形对齐到左上角（接在缓存之后就是错的），`causal_lower_right(C, P + C)` 则对齐到右下角（即我们带偏移的掩码）。这里让它们在解码器内部运行。下面三个 `attend` 函数可以插进第 5 节的模型：
#
# * `sdpa_bool_mask`：把我们的布尔掩码（`True` 表示可以读取）交给 SDPA，因此任何掩码规则都适用，包括第 6 节的带状掩码；
# * `sdpa_lower_right`：SDPA 加上 `causal_lower_right`，要求键恰好按顺序对应位置 $0 \dots P + C - 1$（即 `FullKV`）；
# * `sdpa_causal_if_several`（负对照）：不传掩码，只要这次调用的查询多于一个，就设 `is_causal=True`。实际代码中确实能见到这种写法：对预填充（分数矩阵是方阵）它是对的；对单 token 的解码步它也无害（单个查询本来就可以读取全部缓存的键）；但在非空缓存之后，它会让多 token 的分块看不到大部分缓存。

# %%
from torch.nn.attention.bias import causal_lower_right


def sdpa_bool_mask(q, k, v, allowed):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def sdpa_lower_right(q, k, v, allowed):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[-2], k.shape[-2]))


def sdpa_causal_if_several(q, k, v, allowed):
    # [en] WRONG on purpose after a cache: upper-left causal triangle for any call with several queries.
    # [zh] 故意写错（已有缓存时）：只要有多个查询，就使用左上角对齐的因果三角形。
    return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[-2] > 1)

# %% [markdown] lang="en"
# **Criterion: each SDPA path equals the explicit-softmax path** (full recomputation of section 5's
# model) over the 12 configurations, with the usual tolerances (`1e-5` in FP32, `1e-10` in FP64).
# The two compute the same sums in a different order, so equality within rounding is all we can ask for.

# %% [markdown] lang="zh"
# **判据：两种 SDPA 路径都与显式 softmax 路径一致**（与第 5 节模型的完整重算比较），覆盖 12 种配置，容差照旧（FP32 为 `1e-5`，FP64 为 `1e-10`）。两者以不同的顺序计算同样的求和，所以只能要求在舍入误差范围内相等。

# %%
SDPA_GRIDS = {name: run_grid(lambda attend=attend: build_rope(attend=attend), reference=build_rope)
              for name, attend in (("sdpa_bool_mask", sdpa_bool_mask), ("sdpa_lower_right", sdpa_lower_right))}
for name, rows in SDPA_GRIDS.items():
    say(en=f"`{name}` against the explicit softmax:", zh=f"`{name}` 对照显式 softmax：")
    grid_table(rows)
assert all(r["passed"] for rows in SDPA_GRIDS.values() for r in rows)

# %% [markdown] lang="en"
# **Negative control: `is_causal=True` after a non-empty cache.** Chunks of 2 and 5 tokens must fail, and
# the one-token run must pass: every call after the prefill has one query and no mask, which is correct.
# The prefill call itself (the first chunk) is square and correct too. That is exactly why this bug
# survives in code that is only ever tested with prefill plus one-token decoding.

# %% [markdown] lang="zh"
# **负对照：在非空缓存之后使用 `is_causal=True`。** 分块长度为 2 和 5 时必须失败，而逐 token 运行必须通过：预填充之后的每次调用都只有一个查询、不加掩码，这是正确的。预填充调用本身（第一个分块）的分数矩阵是方阵，也是正确的。正因如此，如果代码只在“预填充 + 逐 token 解码”的情形下测试过，这个错误就会一直藏在那里。

# %%
IS_CAUSAL_CONTROL = [check_cached(lambda: build_rope(attend=sdpa_causal_if_several), STREAM, 1, chunk, reference=build_rope)
                     for chunk in (1, 2, 5)]
say_table([[str(r["chunk"]), f"{r['max_abs_logit_err']:.2e}", f"`{r['passed']}`"] for r in IS_CAUSAL_CONTROL],
          en=["chunk", "max abs logit error", "passed"], zh=["分块长度", "logits 最大绝对误差", "通过"])
assert IS_CAUSAL_CONTROL[0]["passed"] and not IS_CAUSAL_CONTROL[1]["passed"] and not IS_CAUSAL_CONTROL[2]["passed"]

# %% [markdown] lang="en"
# **Timing, both ways.** A prefill of 256 tokens and one decode step after a 256-token cache, each with
# the explicit softmax and with `sdpa_lower_right`, on section 5's model: one thread, FP32,
# `inference_mode()`. Every round runs the two paths in alternating order; a decode step starts from a
# copy of the same prefix cache (copying is outside the timed window). We report the median and keep the
# raw samples. Nothing is asserted about these numbers: on a CPU, with a model this small, which path is
# faster and by how much depends on the kernel PyTorch picks, the machine and its load. The
# reason fused attention matters on GPUs, not writing a $[C, P + C]$ score matrix for every head to
# memory, is not something this measurement can show.

# %% [markdown] lang="zh"
# **计时：两种方式各测一遍。** 在第 5 节的模型上，分别用显式 softmax 和 `sdpa_lower_right`，测量 256 个 token 的预填充，以及在 256 个 token 的缓存之后的一个解码步：单线程、FP32、`inference_mode()`。两条路径的先后顺序逐轮交替；每个解码步都从同一个前缀缓存的副本出发（复制不计入计时窗口）。我们报告中位数，并保留原始样本。对这些数字不做任何断言：在 CPU 上、对这么小的模型，哪条路径更快、快多少，取决于 PyTorch 选用的算子实现、机器及其负载。融合注意力在 GPU 上之所以重要，是因为它不必为每个头把 $[C, P + C]$ 的分数矩阵写入显存，而这一点是本次测量无法展示的。

# %%
TIMING_PROMPT = 256
WARMUPS, REPEATS = (1, 5) if QUICK else (3, 30)
TIMING_IDS = torch.randint(0, cfg.vocab, (1, TIMING_PROMPT + 1), generator=torch.Generator().manual_seed(SEED + 1))


def copy_cache(cache):
    # [en] FullKV.update rebinds its tensors (torch.cat), so a shallow copy per layer leaves the original intact.
    # [zh] FullKV.update 会重新绑定张量（torch.cat），所以逐层浅拷贝不会改动原缓存。
    copies = []
    for layer in cache:
        twin = FullKV()
        twin.k, twin.v, twin.positions, twin.seen = layer.k, layer.v, layer.positions, layer.seen
        copies.append(twin)
    return copies


@torch.inference_mode()
def time_attention() -> dict:
    nets = {"explicit": build_rope(), "sdpa": build_rope(attend=sdpa_lower_right)}
    prompt, token = TIMING_IDS[:, :TIMING_PROMPT], TIMING_IDS[:, TIMING_PROMPT:]
    prefix = {name: net(prompt)[1] for name, net in nets.items()}
    samples = {f"{name}_{what}": [] for name in nets for what in ("prefill", "decode")}
    for round_index in range(WARMUPS + REPEATS):
        order = list(nets) if round_index % 2 == 0 else list(nets)[::-1]
        for name in order:
            net, cache = nets[name], copy_cache(prefix[name])
            start = time.perf_counter_ns()
            net(prompt)
            middle = time.perf_counter_ns()
            net(token, cache)
            end = time.perf_counter_ns()
            if round_index >= WARMUPS:
                samples[f"{name}_prefill"].append((middle - start) / 1e6)
                samples[f"{name}_decode"].append((end - middle) / 1e6)
    assert all(len(s) == REPEATS for s in samples.values())
    assert all(c.seen == TIMING_PROMPT for c in prefix["explicit"])
    return {name: {"p50_ms": float(np.median(s)), "samples_ms": [round(x, 6) for x in s]} for name, s in samples.items()}


FUSED_TIMING = time_attention()
say_table([[f"`{attend}`", f"{FUSED_TIMING[f'{name}_prefill']['p50_ms']:.3f}", f"{FUSED_TIMING[f'{name}_decode']['p50_ms']:.3f}"]
           for name, attend in (("explicit", "softmax_attention"), ("sdpa", "sdpa_lower_right"))],
          en=["attention", f"prefill of {TIMING_PROMPT} tokens, p50 ms", f"decode step after {TIMING_PROMPT}, p50 ms"],
          zh=["注意力实现", f"预填充 {TIMING_PROMPT} 个 token，p50 毫秒", f"{TIMING_PROMPT} 个 token 之后的解码步，p50 毫秒"])
say(en=f"{REPEATS} measured rounds after {WARMUPS} warm-up round(s); raw samples are saved in results.json.",
    zh=f"预热 {WARMUPS} 轮之后正式测量 {REPEATS} 轮；原始样本保存在 results.json 中。")

# %% [markdown] lang="en"
# In this run the prefill took {{run:fused.explicit_prefill:.2f}} ms with the explicit softmax and
# {{run:fused.sdpa_prefill:.2f}} ms with SDPA, and the decode step {{run:fused.explicit_decode:.2f}} ms and
# {{run:fused.sdpa_decode:.2f}} ms (medians). These are single-thread CPU numbers for a 64-wide model; they
# say nothing about a GPU or a real model's size, and another machine may order them differently.

# %% [markdown] lang="zh"
# 在本次运行中，预填充用显式 softmax 耗时 {{run:fused.explicit_prefill:.2f}} 毫秒，用 SDPA 耗时 {{run:fused.sdpa_prefill:.2f}} 毫秒；解码步分别为 {{run:fused.explicit_decode:.2f}} 毫秒和 {{run:fused.sdpa_decode:.2f}} 毫秒（均为中位数）。这些是宽度仅为 64 的模型在单线程 CPU 上的数字，既不能说明 GPU 上的情况，也不能说明真实规模的模型；换一台机器，两者的快慢顺序也可能不同。

# %% tags=["prose-values"]
{"fused": {f"{name}_{what}": FUSED_TIMING[f"{name}_{what}"]["p50_ms"] for name in ("explicit", "sdpa") for what in ("prefill", "decode")}}