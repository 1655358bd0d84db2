# %% [markdown] lang="en"
# ## 8. Fused attention
#
# Our attention so far is explicit: a score matrix, a mask, a softmax and a second matrix product, each a
# separate tensor. `torch.nn.functional.scaled_dot_product_attention` (SDPA) computes the same thing in one
# call and may choose a fused kernel that never writes the score matrix to memory. For a cache the first
# question is the mask: a chunk after a cache gives a score matrix of shape $[C, P + C]$, which is not square.
# Section 2 showed SDPA's two conventions on random tensors: `is_causal=True` aligns the triangle to the
# upper-left corner (wrong after a cache), `causal_lower_right(C, P + C)` to the lower-right corner (our offset
# mask). Here they run inside the decoder, as three subclasses of `Attention` that override `attend`. All three
# hand SDPA the $H_{kv}$ cached K/V heads (`enable_gqa=True`; whether a backend copies them internally is not
# measured here):
#
# * `SDPABoolMask`: SDPA with our boolean mask (`True` = may read), so any mask rule works, the band of
#   section 6 included;
# * `SDPALowerRight`: SDPA with `causal_lower_right`, valid when the keys are exactly positions
#   $0 \dots P + C - 1$ in order (a `FullKV`);
# * `SDPACausalIfSeveral` (the negative control): no mask, and `is_causal=True` whenever the call has more than
#   one query. One finds this pattern in real code: it is right for a prefill (square scores) and harmless for
#   a one-token decode step (a single query may read every cached key), but after a non-empty cache it hides
#   most of the cache from a multi-token chunk.


# %% [markdown] lang="zh"
# ## 8. 融合注意力
#
# 到目前为止，我们的注意力都是显式计算的：分数矩阵、掩码、softmax 和第二次矩阵乘法，各自是一个单独的张量。`torch.nn.functional.scaled_dot_product_attention`（SDPA）用一次调用算出同样的结果，还可能选用一个从不把分数矩阵写入内存的融合内核。对缓存来说，首先要问的是掩码：接在缓存之后的分块，其分数矩阵的形状是 $[C, P + C]$，不是方阵。第 2 节已经用随机张量展示了 SDPA 的两种约定：`is_causal=True` 把三角形对齐到左上角（接在缓存之后就是错的），`causal_lower_right(C, P + C)` 则对齐到右下角（即我们带偏移的掩码）。这里让它们在解码器内部运行，写成 `Attention` 的三个子类，各自重写 `attend`，三者都把缓存中的 $H_{kv}$ 个 K/V 头原样交给 SDPA（`enable_gqa=True`；后端内部是否复制它们，这里没有测量）：
#
# * `SDPABoolMask`：把我们的布尔掩码（`True` 表示可以读取）交给 SDPA，因此任何掩码规则都适用，包括第 6 节的带状掩码；
# * `SDPALowerRight`：SDPA 加上 `causal_lower_right`，要求键恰好按顺序对应位置 $0 \dots P + C - 1$（即 `FullKV`）；
# * `SDPACausalIfSeveral`（负对照）：不传掩码，只要这次调用有不止一个查询，就设 `is_causal=True`。实际代码中确实能见到这种写法：对预填充（分数矩阵是方阵）它是对的；对单 token 的解码步它也无害（单个查询本来就可以读取缓存中的每个键）；但在非空缓存之后，它会让多 token 的分块看不到缓存中的大部分内容。


# %%
from torch.nn.attention.bias import causal_lower_right


class SDPABoolMask(Attention):
    def attend(self, q, keys, values, allowed):
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed, enable_gqa=True)


class SDPALowerRight(Attention):
    def attend(self, q, keys, values, allowed):
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=causal_lower_right(q.shape[-2], keys.shape[-2]),
                                              enable_gqa=True)


class SDPACausalIfSeveral(Attention):
    # [en] WRONG on purpose after a cache: the upper-left causal triangle for any call with several queries.
    # [zh] 故意写错（已有缓存时）：只要有多个查询，就使用左上角对齐的因果三角形。
    def attend(self, q, keys, values, allowed):
        return F.scaled_dot_product_attention(q, keys, values, is_causal=q.shape[-2] > 1, enable_gqa=True)


SDPA_MODELS = {"sdpa_bool_mask": lambda: build(LLAMA_CFG, lambda i: SDPABoolMask(LLAMA_CFG)),
               "sdpa_lower_right": lambda: build(LLAMA_CFG, lambda i: SDPALowerRight(LLAMA_CFG)),
               "sdpa_causal_if_several": lambda: build(LLAMA_CFG, lambda i: SDPACausalIfSeveral(LLAMA_CFG))}

# %% [markdown] lang="en"
# **Criterion: each SDPA path equals the explicit-softmax path** (full recomputation of section 5's model)
# over the 12 configurations, with the usual tolerances ($10^{-5}$ in FP32, $10^{-10}$ in FP64). The two compute the
# same sums in a different order, so equality within rounding is all we can ask for. **Negative control:
# `is_causal=True` after a non-empty cache.** It runs four schedules. Two must pass: one token per call (every
# call has one query and no mask, which is correct), and a prefill of 16 tokens followed by one-token steps (the
# same schedule as section 6's `RING_CHUNKS`: the prefill call is square, so `is_causal=True` is right there, and
# every later call has one query). Chunks of 2 and of 5 tokens must fail. So a test suite that only ever runs a
# prefill and then one-token decoding passes this bug; only a multi-token chunk after a non-empty cache catches it.

# %% [markdown] lang="zh"
# **判据：两种 SDPA 路径都与显式 softmax 路径一致**（以第 5 节模型的完整重算为参照），覆盖 12 种配置，容差照旧（FP32 为 $10^{-5}$，FP64 为 $10^{-10}$）。两者以不同的顺序计算同样的求和，所以只能要求在舍入误差范围内相等。**负对照：在非空缓存之后使用 `is_causal=True`。** 它按四种调用方式运行。其中两种必须通过：每次调用送入一个 token（每次调用都只有一个查询、不加掩码，这是对的）；先用 16 个 token 做预填充，再逐个 token 解码（与第 6 节 `RING_CHUNKS` 中的方式相同：预填充调用的分数矩阵是方阵，`is_causal=True` 在这里是对的，之后的每次调用都只有一个查询）。分块长度为 2 和 5 时则必须失败。所以，只测试“预填充后逐 token 解码”的测试集查不出这个错误；只有在非空缓存之后送入多 token 的分块，才能查出它。

# %%
SDPA_GRIDS = {name: run_grid(SDPA_MODELS[name], reference=lambda: build(LLAMA_CFG)) for name in ("sdpa_bool_mask", "sdpa_lower_right")}
summary_table({"`SDPABoolMask`": SDPA_GRIDS["sdpa_bool_mask"], "`SDPALowerRight`": SDPA_GRIDS["sdpa_lower_right"]})
assert all(r["passed"] for rows in SDPA_GRIDS.values() for r in rows)

# %%
# [en] The same chunking as RING_CHUNKS[2] of section 6.
# [zh] 与第 6 节的 RING_CHUNKS[2] 分块方式相同。
PREFILL_THEN_DECODE = [16] + [1] * (STREAM_LEN - 16)
sdpa_control = run_control(SDPA_MODELS["sdpa_causal_if_several"], reference=lambda: build(LLAMA_CFG),
                           chunks=(1, PREFILL_THEN_DECODE, 2, 5))
sdpa_caught = sdpa_control["passed"] == [True, True, False, False]
CONTROLS["is_causal_after_cache"] = {"section": 8, "check": "check_cached", "caught": sdpa_caught}
SCHEDULES = ["1", f"`[16] + [1] * {STREAM_LEN - 16}`", "2", "5"]
say_table([[schedule, f"{error:.2e}", f"`{passed}`"] for schedule, error, passed in zip(SCHEDULES, sdpa_control["errors"], sdpa_control["passed"])],
          en=["`SDPACausalIfSeveral`: tokens per call", "max abs logit error", "passed"],
          zh=["`SDPACausalIfSeveral`：每次调用的 token 数", "logits 最大绝对误差", "通过"])
assert sdpa_caught

# %% [markdown] lang="en"
# <details><summary>Optional: what a real kernel adds. None of it changes the numbers the check compares; all of it
# decides the speed.</summary>
#
# * **The mask decides which kernel may run.** On a GPU, PyTorch's SDPA uses its FlashAttention backend only when no
#   mask tensor is passed (a causal flag at most), so a boolean mask such as the band sends it to one of its other
#   backends, those that accept a mask. That is a limit of SDPA's interface, not of FlashAttention.
# * **Sliding windows without a mask.** The FlashAttention library takes a window natively, `window_size=(W - 1, 0)`
#   with `causal=True`: each query reads itself and the $W - 1$ keys before it, the band of section 6. vLLM's
#   FlashAttention backend passes exactly that for a windowed layer. Hugging Face's Mistral, loaded with
#   `attn_implementation="flash_attention_2"`, passes `window_size=(W - 1, W - 1)` with `causal=True` only when the
#   call's key length exceeds $W$ (`key_length > sliding_window` in transformers 5.23.0's
#   `modeling_flash_attention_utils.py`); with $W$ keys or fewer it passes no window, since every key is inside it. The causal flag
#   makes that equivalent to `(W - 1, 0)`.
# * **Split-K decoding.** A one-query decode step gives a kernel little to parallelize over, so decode kernels split
#   the cached keys into blocks and combine the partial softmaxes (as in Flash-Decoding).
# * **Paged caches.** A paged cache stores K/V in blocks that the kernel must read through a block table (vLLM's
#   PagedAttention).
# * **GQA by indexing.** GQA pays off only if the kernel indexes the shared K/V heads instead of copying them.
#
# </details>

# %% [markdown] lang="zh"
# <details><summary>可选：真实的内核还要做什么。这些都不会改变检查所比较的数值，却决定了速度。</summary>
#
# * **掩码本身就决定了能用哪个内核。** 在 GPU 上，只有不传掩码张量（最多给一个因果标志）时，PyTorch 的 SDPA 才会使用它的 FlashAttention 后端，所以像带状掩码这样的布尔掩码会让它改用其他接受掩码的后端。这是 SDPA 接口的限制，而不是 FlashAttention 的限制。
# * **不用掩码的滑动窗口。** FlashAttention 库本身就支持滑动窗口，设置 `causal=True` 和 `window_size=(W - 1, 0)` 即可：每个查询读取它自己和前面的 $W - 1$ 个键，正是第 6 节的带状区域。vLLM 的 FlashAttention 后端对带窗口的层传入的正是这组参数。Hugging Face 的 Mistral 以 `attn_implementation="flash_attention_2"` 加载时，只在这次调用的键数超过 $W$ 时才传入 `window_size=(W - 1, W - 1)` 加 `causal=True`（transformers 5.23.0 的 `modeling_flash_attention_utils.py` 中的条件是 `key_length > sliding_window`）；键不超过 $W$ 个时，每个键都在窗口之内，它就不传窗口。有了因果标志，它与 `(W - 1, 0)` 等价。
# * **split-K 解码。** 单个查询的解码步几乎没有可供并行的维度，所以解码用的内核会把缓存中的键切成若干段，分别计算局部的 softmax 再合并（例如 Flash-Decoding）。
# * **分页缓存。** 分页缓存把 K/V 存在若干物理块里，内核必须通过块表去读取（vLLM 的 PagedAttention）。
# * **按下标读取的 GQA。** 只有在内核按下标读取共享的 K/V 头、而不是复制它们时，GQA 才能真正省下访存。
#
# </details>

# %% [markdown] lang="en"
# **An aside on timing (optional).** Times on a shared CPU depend on the machine and its load, so the two cells below
# are folded and assert nothing. The first times a 256-token prefill and one decode step after it, explicit softmax
# against `SDPALowerRight` (section 5's model, one thread, FP32, alternating order, medians; raw samples in
# `results.json`). The prefill is where attention has the most work (256 queries against 256 keys per head):
# the two models differ only in `attend`, and in this run the whole model's prefill took
# {{run:fused.prefill_ratio:.2f}} times as long with SDPA as with the explicit softmax
# ({{run:fused.sdpa_prefill:.2f}} against {{run:fused.explicit_prefill:.2f}} ms).
# The decode step took {{run:fused.decode_ratio:.2f}} times as long with SDPA ({{run:fused.sdpa_decode:.3f}} against
# {{run:fused.explicit_decode:.3f}} ms; a ratio below 1 means SDPA was faster). The second cell, a profile of that step by operator, has one lesson: a
# decode step is hundreds of small operator calls (here {{run:fused.explicit_calls:.0f}} with the explicit softmax and
# {{run:fused.sdpa_calls:.0f}} with SDPA: projections, `torch.cat`, rotary lookups, reshapes), of which attention is a
# few, and the attention path changes only those few. The profile's self times are not a timing: the profiler adds its
# own cost to every call, so the profile and the clock can rank the two paths differently. What a fused kernel saves on a GPU at real sizes, never
# writing a $[C, P + C]$ score matrix per head to memory, a CPU run of a tiny model does not measure.

# %% [markdown] lang="zh"
# **旁注：计时（可选）。** 在共享的 CPU 上，耗时取决于机器和它当时的负载，所以下面两个单元格的代码折叠了起来，也不做任何断言。第一个单元格在第 5 节的模型上比较显式 softmax 与 `SDPALowerRight`，测量 256 个 token 的预填充和其后的一个解码步（单线程、FP32、两条路径逐轮交替先后、取中位数；原始样本保存在 `results.json` 中）。注意力的工作量在预填充中最大（每个头 256 个查询对 256 个键）。两个模型只有 `attend` 不同。本次运行中，整个模型的预填充用 SDPA 时的耗时是用显式 softmax 时的 {{run:fused.prefill_ratio:.2f}} 倍（{{run:fused.sdpa_prefill:.2f}} 毫秒对 {{run:fused.explicit_prefill:.2f}} 毫秒）。解码步用 SDPA 时的耗时是用显式 softmax 时的 {{run:fused.decode_ratio:.2f}} 倍（{{run:fused.sdpa_decode:.3f}} 毫秒对 {{run:fused.explicit_decode:.3f}} 毫秒；比值小于 1 说明 SDPA 更快）。第二个单元格按算子分析这一步的耗时，它只说明一点：一个解码步由数百次小的算子调用组成（本次运行中显式 softmax 为 {{run:fused.explicit_calls:.0f}} 次，SDPA 为 {{run:fused.sdpa_calls:.0f}} 次：各个投影、`torch.cat`、旋转位置编码的查表、改变形状的操作），注意力只占其中几次，换一种注意力路径改变的也只是这几次。性能分析给出的自身耗时并不是计时：性能分析器给每次调用都加上了自己的开销，所以性能分析和时钟对两条路径的快慢排序可能不同。融合内核在 GPU 上、真实规模下省下的是：不必为每个头把 $[C, P + C]$ 的分数矩阵写入显存；在 CPU 上运行一个极小的模型，测不到这一点。

# %% tags=["hide-input"]
TIMING_PROMPT = 256
WARMUPS, REPEATS = (1, 5) if QUICK else (3, 30)
TIMING_IDS = torch.randint(0, cfg.vocab, (1, TIMING_PROMPT + 1), generator=torch.Generator().manual_seed(SEED + 1))
TIMED = {"explicit": build(LLAMA_CFG), "sdpa": SDPA_MODELS["sdpa_lower_right"]()}


@torch.inference_mode()
def time_attention() -> dict:
    prompt, token = TIMING_IDS[:, :TIMING_PROMPT], TIMING_IDS[:, TIMING_PROMPT:]
    prefix = {name: net(prompt)[1] for name, net in TIMED.items()}
    samples = {f"{name}_{what}": [] for name in TIMED for what in ("prefill", "decode")}
    for round_index in range(WARMUPS + REPEATS):
        for name in (list(TIMED) if round_index % 2 == 0 else list(TIMED)[::-1]):
            net, cache = TIMED[name], copy.deepcopy(prefix[name])
            start = time.perf_counter_ns()
            net(prompt)
            middle = time.perf_counter_ns()
            net(token, cache)
            end = time.perf_counter_ns()
            if round_index >= WARMUPS:
                samples[f"{name}_prefill"].append((middle - start) / 1e6)
                samples[f"{name}_decode"].append((end - middle) / 1e6)
    return {name: {"p50_ms": float(np.median(s)), "samples_ms": [round(x, 6) for x in s]} for name, s in samples.items()}


FUSED_TIMING = time_attention()
say_table([[f"`{attention}`", f"{FUSED_TIMING[f'{name}_prefill']['p50_ms']:.2f}", f"{FUSED_TIMING[f'{name}_decode']['p50_ms']:.3f}"]
           for name, attention in (("explicit", "softmax_attention"), ("sdpa", "SDPALowerRight"))],
          en=["attention", f"prefill of {TIMING_PROMPT} tokens, p50 (ms)", f"decode step after {TIMING_PROMPT}, p50 (ms)"],
          zh=["注意力实现", f"预填充 {TIMING_PROMPT} 个 token，p50（毫秒）", f"{TIMING_PROMPT} 个 token 之后的解码步，p50（毫秒）"])

# %% tags=["hide-input"]
import os

from torch.profiler import ProfilerActivity, profile

# [en] Kineto, the profiler's C++ layer, logs a line to stderr at every start and stop; level 6 keeps it quiet.
# [zh] 性能分析器的 C++ 层 Kineto 每次启动和停止都会向 stderr 输出一行日志；级别 6 让它保持安静。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
PROFILE_ROUNDS, PROFILE_STEPS = 5, 10


@torch.inference_mode()
def decode_profile(net, top: int = 6) -> dict:
    # [en] One decode step after the 256-token prompt, PROFILE_STEPS times per round: each operator's calls and
    # [en] self time per step, the smallest over the rounds.
    # [zh] 在 256 个 token 的提示之后做解码步，每轮 PROFILE_STEPS 步：每个算子每步的调用次数和自身耗时，耗时取各轮中的最小值。
    prompt, token = TIMING_IDS[:, :TIMING_PROMPT], TIMING_IDS[:, TIMING_PROMPT:]
    prefix, rounds = net(prompt)[1], []
    for _ in range(PROFILE_ROUNDS):
        caches = [copy.deepcopy(prefix) for _ in range(PROFILE_STEPS)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for cache in caches:
                net(token, cache)
        rounds.append({e.key: (e.count / PROFILE_STEPS, e.self_cpu_time_total / PROFILE_STEPS) for e in prof.key_averages()})
    best = {op: (calls, min(r[op][1] for r in rounds if op in r)) for op, (calls, _) in rounds[0].items()}
    total = sum(us for _, us in best.values())
    rows = [{"op": op, "calls_per_step": calls, "self_us_per_step": us, "share": us / total}
            for op, (calls, us) in sorted(best.items(), key=lambda item: -item[1][1])]
    return {"calls": sum(calls for calls, _ in best.values()), "self_us": total, "top": rows[:top]}


DECODE_PROFILE = {name: decode_profile(net) for name, net in TIMED.items()}
for name, prof in DECODE_PROFILE.items():
    explicit = name == "explicit"
    say(en=f"{'Explicit softmax path (`softmax_attention`)' if explicit else 'SDPA path (`SDPALowerRight`)'}: one decode step "
           f"after {TIMING_PROMPT} tokens: {prof['calls']:.0f} operator calls, {prof['self_us']:.0f} us of self time in all",
        zh=f"{'显式 softmax 路径（`softmax_attention`）' if explicit else 'SDPA 路径（`SDPALowerRight`）'}：{TIMING_PROMPT} 个 token "
           f"之后的一个解码步，共 {prof['calls']:.0f} 次算子调用，自身耗时合计 {prof['self_us']:.0f} 微秒")
    say_table([[f"`{r['op']}`", f"{r['calls_per_step']:g}", f"{r['self_us_per_step']:.0f}", f"{r['share']:.0%}"] for r in prof["top"]],
              en=["operator", "calls per step", "self time per step (us)", "share of the step"],
              zh=["算子", "每步调用次数", "每步自身耗时（微秒）", "占该步的比例"])

# %% tags=["prose-values"]
{"fused": {**{f"{name}_{what}": FUSED_TIMING[f"{name}_{what}"]["p50_ms"] for name in ("explicit", "sdpa") for what in ("prefill", "decode")},
           **{f"{name}_calls": float(prof["calls"]) for name, prof in DECODE_PROFILE.items()},
           **{f"{name}_self_us": float(prof["self_us"]) for name, prof in DECODE_PROFILE.items()},
           "largest_share": max(prof["top"][0]["share"] for prof in DECODE_PROFILE.values()),
           "prefill_ratio": FUSED_TIMING["sdpa_prefill"]["p50_ms"] / FUSED_TIMING["explicit_prefill"]["p50_ms"],
           "decode_ratio": FUSED_TIMING["sdpa_decode"]["p50_ms"] / FUSED_TIMING["explicit_decode"]["p50_ms"]}}
