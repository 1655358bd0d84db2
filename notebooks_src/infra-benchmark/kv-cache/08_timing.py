# %% [markdown] lang="en"
# ## 8. Timing on this CPU
#
# Only now that equivalence holds does timing mean anything. For prompts of $P$ = 16, 64, 128 and 256
# tokens we time three windows separately:
#
# * **prefill:** one call over the $P$ prompt tokens, building the cache;
# * **full recomputation:** consume $G = 16$ predetermined tokens, each step running the whole current prefix through the model without a cache;
# * **cached continuation:** consume the same 16 tokens one at a time, starting from an existing prefix cache (so prefill is not inside this window).
#
# Both continuation paths return logits after every token. Tokenization, sampling, queues and
# networking are outside all windows. Our full path is the naive one: it projects every prefix
# position to vocabulary logits and keeps the last. (A general remark, not measured here: an optimized
# full path would project only the last position.)
# The dynamic `torch.cat` of the cached path allocates new tensors and copies the history on every
# step, and that cost is inside its window.
#
# Protocol: one thread, FP32, `eval()`, `inference_mode()`; 3 warm-up rounds and 15 measured rounds per
# path; in each round the order of the three paths is rotated (prefill–full–cached, full–cached–prefill,
# cached–prefill–full, …) so that no path always runs first; `time.perf_counter_ns`; we report the
# median (p50) and the 95th percentile (p95) of the measured rounds. `QUICK = True` keeps only 16 and 64
# tokens, 1 warm-up and 3 rounds. The measurement loop counts the warm-up runs of every path and
# records the order of every round, and asserts both.

# %% [markdown] lang="zh"
# ## 8. 在这台 CPU 上计时
#
# 只有在等价性成立之后，计时才有意义。对长度 $P$ = 16、64、128、256 的提示（prompt），我们分别测量三个窗口的耗时：
#
# * **预填充**：对 $P$ 个提示 token 调用一次模型，建立缓存；
# * **完整重算**：依次处理 $G = 16$ 个预先确定的 token，每一步都把当前的整个前缀送入模型，不用缓存；
# * **缓存续写**：从已有的前缀缓存出发，逐个处理同样的 16 个 token（因此预填充不在这个窗口内）。
#
# 两条续写路径在每个 token 之后都返回 logits。分词、采样、排队和网络传输都不在任何窗口之内。我们的完整路径是朴素的写法：把前缀每个位置都投影成词表 logits，再只取最后一个。（这里顺带一提，并未实测：优化过的完整路径只需投影最后一个位置。）缓存路径每一步都用 `torch.cat` 动态拼接，要分配新张量并复制历史数据，这部分开销也算在它的窗口里。
#
# 测量规程：单线程、FP32、`eval()`、`inference_mode()`；每条路径预热 3 轮、正式测量 15 轮；每一轮都轮换三条路径的执行顺序（预填充–完整–缓存、完整–缓存–预填充、缓存–预填充–完整……），免得某条路径总是第一个运行；计时用 `time.perf_counter_ns`；报告正式测量轮次的中位数（p50）和第 95 百分位数（p95）。`QUICK = True` 时只测 16 和 64 个 token，预热 1 轮、测量 3 轮。测量循环会统计每条路径实际预热的次数，并记录每一轮的执行顺序，再用断言核对这两项。

# %%
PROMPTS = [16, 64] if QUICK else [16, 64, 128, 256]
WARMUPS, REPEATS = (1, 3) if QUICK else (3, 15)
CONTINUATION = 16
PATHS = ("prefill", "full", "cached")
gen = torch.Generator().manual_seed(SEED + 1)
TIMING_STREAM = torch.randint(0, cfg.vocab, (1, 256 + CONTINUATION), generator=gen)   # long enough for P = 256
assert TIMING_STREAM.shape[1] <= cfg.max_positions


@torch.inference_mode()
def prefill(model, prompt):
    logits, cache = model(prompt)
    return cache, prompt.shape[1]                                # (cache, positions fed to the model)


@torch.inference_mode()
def full_continuation(model, prompt, continuation):
    ids, fed, outputs = prompt, 0, []
    for step in range(continuation.shape[1]):
        ids = torch.cat((ids, continuation[:, step:step + 1]), dim=1)
        logits, _ = model(ids)                                   # the whole prefix, every step
        outputs.append(logits[:, -1])
        fed += ids.shape[1]
    return torch.stack(outputs, dim=1), fed


@torch.inference_mode()
def cached_continuation(model, cache, continuation):
    fed, outputs = 0, []
    for step in range(continuation.shape[1]):
        logits, cache = model(continuation[:, step:step + 1], cache)   # one new position per step
        outputs.append(logits[:, -1])
        fed += 1
    return torch.stack(outputs, dim=1), fed, cache

# %% [markdown] lang="en"
# Before timing anything, the two continuation paths must agree, and the work they do must match the
# formulas. After prefill, the full path feeds $P + j$ positions at step $j$, in total
# $\sum_{j=1}^{G} (P + j) = GP + G(G+1)/2$ positions per layer; the cached path feeds $G$. For
# $P = 256$, $G = 16$ that is 4,232 versus 16. The cell checks the formula against the positions the
# loops actually fed and against a forward pre-hook that counts what reached the model; a second hook
# on the vocabulary projection confirms that the full path projects every one of those positions. The ratio is
# not a latency prediction: matrix efficiency, memory traffic, dispatch and Python overhead differ
# between the paths.
#
# The logical size of the cache is $M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$
# bytes (K and V, batch, length, layers, KV heads, head dimension, bytes per element). Every attention
# head of our model keeps its own K and V, so the number of KV heads $H_{kv}$ is simply the number of
# heads. With batch 1,
# final length 272, 2 layers, 4 KV heads, head dimension 16 and 4-byte FP32, that is 278,528 bytes
# (272 KiB). The cell compares it with the sum of `numel() * element_size()` over the real cache. It
# counts neither the parameters, the attention scores, the temporary tensors of `torch.cat`, allocator
# overhead nor Python objects, so it is not the peak memory of the process.

# %% [markdown] lang="zh"
# 计时之前，两条续写路径的结果必须一致，它们的工作量也必须与公式相符。预填充之后，完整路径在第 $j$ 步送入 $P + j$ 个位置，每层合计 $\sum_{j=1}^{G} (P + j) = GP + G(G+1)/2$ 个位置；缓存路径只送入 $G$ 个。当 $P = 256$、$G = 16$ 时，两者分别是 4,232 和 16。下面的单元格把公式与两个来源核对：循环实际送入的位置数，以及一个前向预钩子（forward pre-hook）统计到的、真正到达模型的位置数；词表投影上的第二个钩子则确认，完整路径把这些位置全部投影成了 logits。这个比值并不能预测延迟：两条路径在矩阵运算效率、访存、调度和 Python 开销上都不一样。
#
# 缓存的逻辑大小为 $M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$ 字节（依次对应 K 和 V 两份、batch、序列长度、层数、KV 头数、每头维度、每个元素的字节数）。我们的模型里每个注意力头都保留自己的 K 和 V，所以 KV 头数 $H_{kv}$ 就等于头数。取 batch 1、最终长度 272、2 层、4 个 KV 头、每头 16 维、FP32 每元素 4 字节，合计 278,528 字节（272 KiB）。下面的单元格会把它与真实缓存上 `numel() * element_size()` 的总和比较。这个数不包括参数、注意力分数、`torch.cat` 产生的临时张量、内存分配器的额外开销和 Python 对象，因此并不是进程的峰值内存。

# %%
def projected_positions(prompt_len: int, generated: int) -> dict:
    return {"full": generated * prompt_len + generated * (generated + 1) // 2, "cached": generated}


def kv_payload_bytes(batch: int, length: int, config: DecoderConfig, bytes_per_element: int) -> int:
    return 2 * batch * length * config.layers * config.heads * config.head_dim * bytes_per_element


def cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for pair in cache for t in pair)


fed_to_model, projected = [], []
counter = model.register_forward_pre_hook(lambda module, args: fed_to_model.append(args[0].shape[1]))
head_counter = model.lm_head.register_forward_pre_hook(lambda module, args: projected.append(args[0].shape[1]))
try:
    P = 256
    prompt, continuation = TIMING_STREAM[:, :P], TIMING_STREAM[:, P:P + CONTINUATION]
    ref_cache, _ = prefill(model, prompt)
    fed_to_model.clear()
    projected.clear()
    full_out, full_fed = full_continuation(model, prompt, continuation)
    full_hooked, full_projected = sum(fed_to_model), sum(projected)
    fed_to_model.clear()
    cached_out, cached_fed, ref_final_cache = cached_continuation(model, ref_cache, continuation)
    cached_hooked = sum(fed_to_model)
finally:
    counter.remove()
    head_counter.remove()

assert tuple(full_out.shape) == tuple(cached_out.shape) == (1, CONTINUATION, cfg.vocab)   # logits after every token
torch.testing.assert_close(cached_out, full_out, atol=1e-5, rtol=1e-5)   # same logits, step by step
assert projected_positions(256, 16) == {"full": 4_232, "cached": 16}
assert (full_fed, cached_fed) == (full_hooked, cached_hooked) == (4_232, 16)
assert full_projected == full_hooked                                     # the naive full path projects every position
assert kv_payload_bytes(1, 272, cfg, 4) == cache_bytes(ref_final_cache) == 278_528
print(f"P=256, G=16: positions fed by the full path {full_fed:,}, by the cached path {cached_fed}")
print(f"K/V payload at batch 1, T=272, fp32: {cache_bytes(ref_final_cache):,} bytes = {cache_bytes(ref_final_cache) // 1024} KiB")
print(f"max |cached - full| over the 16 continuation steps: {(cached_out - full_out).abs().max().item():.3e}")

# %% [markdown] lang="en"
# The measurement loop. Only `perf_counter_ns` readings around each path are kept; every round
# rotates the order of the three paths.

# %% [markdown] lang="zh"
# 测量循环。只保留每条路径前后两次 `perf_counter_ns` 读数；每一轮都轮换三条路径的顺序。

# %%
def percentile_summary(samples_ns: list[int]) -> dict:
    ms = np.array(samples_ns) / 1e6
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "samples": [round(float(x), 6) for x in ms]}


def time_prompt(model, prompt_len: int) -> dict:
    prompt = TIMING_STREAM[:, :prompt_len]
    continuation = TIMING_STREAM[:, prompt_len:prompt_len + CONTINUATION]
    prefix_cache, _ = prefill(model, prompt)                     # the cached path starts from this
    runs = {
        "prefill": lambda: prefill(model, prompt),
        "full": lambda: full_continuation(model, prompt, continuation),
        "cached": lambda: cached_continuation(model, prefix_cache, continuation),
    }
    samples = {path: [] for path in PATHS}
    calls, orders = dict.fromkeys(PATHS, 0), []
    for round_index in range(WARMUPS + REPEATS):
        shift = round_index % len(PATHS)
        orders.append(PATHS[shift:] + PATHS[:shift])             # rotate the order every round
        for path in orders[-1]:
            start = time.perf_counter_ns()
            runs[path]()
            elapsed = time.perf_counter_ns() - start
            calls[path] += 1
            if round_index >= WARMUPS:
                samples[path].append(elapsed)
    assert {path: calls[path] - len(samples[path]) for path in PATHS} == dict.fromkeys(PATHS, WARMUPS)   # warm-ups run
    assert orders[:3] == [("prefill", "full", "cached"), ("full", "cached", "prefill"), ("cached", "prefill", "full")]
    assert all(a != b for a, b in zip(orders, orders[1:]))                 # consecutive rounds never share an order
    assert {order[0] for order in orders[WARMUPS:]} == set(PATHS)         # no path always runs first
    _, _, final_cache = cached_continuation(model, prefix_cache, continuation)   # untimed, for the payload
    assert cache_bytes(final_cache) == kv_payload_bytes(1, prompt_len + CONTINUATION, cfg, 4)
    return {
        "prompt_tokens": prompt_len,
        "prefill_ms": percentile_summary(samples["prefill"]),
        "full_ms": percentile_summary(samples["full"]),
        "cached_ms": percentile_summary(samples["cached"]),
        "kv_bytes": cache_bytes(final_cache),
        "projected_positions": projected_positions(prompt_len, CONTINUATION),
    }


TIMING_ROWS = [time_prompt(model, p) for p in PROMPTS]
def p50_p95(ms: dict) -> str:
    return f"{ms['p50']:.3f} / {ms['p95']:.3f}"


print(f"{'prompt':>6}  {'prefill p50 / p95':>18}  {'full p50 / p95':>18}  {'cached p50 / p95':>18}  {'K/V KiB':>7}  {'positions full / cached':>23}")
print(f"{'':>6}  {'ms':>18}  {'ms':>18}  {'ms':>18}")
for r in TIMING_ROWS:
    positions = f"{r['projected_positions']['full']:,} / {r['projected_positions']['cached']}"
    print(f"{r['prompt_tokens']:>6}  {p50_p95(r['prefill_ms']):>18}  {p50_p95(r['full_ms']):>18}  "
          f"{p50_p95(r['cached_ms']):>18}  {r['kv_bytes'] // 1024:>7}  {positions:>23}")
assert all(len(r[f"{path}_ms"]["samples"]) == REPEATS for r in TIMING_ROWS for path in PATHS)

# %% [markdown] lang="en"
# The plot shows the p50 of each path against the prompt length (log scale), with a bar reaching up to its p95.
# Continuation times cover all 16 steps.

# %% [markdown] lang="zh"
# 下图画出每条路径的 p50 随提示长度的变化（纵轴为对数刻度），误差棒向上延伸到 p95。续写时间是全部 16 步的总和。

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
lengths = [r["prompt_tokens"] for r in TIMING_ROWS]
labels = {"prefill": "prefill (P tokens)", "full": "full recomputation (16 steps)", "cached": "cached continuation (16 steps)"}
for path, marker in zip(PATHS, ("s", "o", "^")):
    p50 = np.array([r[f"{path}_ms"]["p50"] for r in TIMING_ROWS])
    p95 = np.array([r[f"{path}_ms"]["p95"] for r in TIMING_ROWS])
    ax.errorbar(lengths, p50, yerr=[np.zeros_like(p50), p95 - p50], marker=marker, capsize=3, label=labels[path])
ax.set_xlabel("prompt length P (tokens)")
ax.set_ylabel("time (ms): p50, bar up to p95")
ax.set_xticks(lengths)
ax.set_yscale("log")
ax.set_title(f"CPU, 1 thread, fp32, {REPEATS} measured rounds per path", fontsize=10)
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
fig.tight_layout()
TIMING_PNG = OUT / "timing.png"
fig.savefig(TIMING_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# How to read this. A p95 over 15 samples (3 with `QUICK = True`) is an empirical quantile, good for
# spotting noise but far too few samples to estimate a service's tail latency. The full path repeats
# work that grows with the prefix; the cached path still reads a growing K/V on every step. Both pay a
# per-call overhead (Python, operator dispatch) that, as a general rule, weighs heavily for a model
# this small; the numbers here do not separate that overhead from the arithmetic. To get a feel for
# it, compare two columns of the table: prefill is one call over $P$ tokens, the cached continuation
# is 16 calls of one token each. What these numbers **do not** establish: speed-ups on a GPU, the
# latency of a serving system, client-side time to first token (TTFT) or inter-token latency
# (ITL), or how vLLM, SGLang or any production kernel, cache layout or scheduler would perform. Those
# need measurements on their own hardware and workloads.

# %% [markdown] lang="zh"
# 如何解读这些数字：15 个样本（`QUICK = True` 时只有 3 个）的 p95 只是经验分位数，可以用来发现噪声，但样本远远不够，无法估计一个服务的尾延迟。完整路径重复的工作量随前缀增长；缓存路径每一步仍要读取不断变长的 K/V。两条路径都要承担每次调用的开销（Python、算子调度）；一般来说，对这么小的模型，这部分开销占比很大，而这里的数字并没有把它与计算本身区分开。想对这部分开销有个感觉，可以对照表中的两列：预填充是对 $P$ 个 token 的一次调用，缓存续写则是 16 次调用、每次只送一个 token。这些数字**不能**说明：GPU 上的加速效果、推理服务系统的延迟、客户端的首 token 延迟（TTFT）或 token 间延迟（ITL），也不能说明 vLLM、SGLang 或任何生产级的算子、缓存布局或调度器的表现。这些都需要在各自的硬件和负载上实际测量。
