# %% [markdown] lang="en"
# **Timing.** Now the step time. For prefix lengths $P$ from 16 to 480 tokens (batch 1), we time one decode
# step, one new token, with each store. Before every timed call the store is put back to length $P$
# (for `torch.cat`: the same $P$-position tensors; for the static store: the length set to $P$, the
# slot written again), so every sample measures the same step. A third timed call makes only the
# copies of a `torch.cat` step, nothing else. That makes three calls for each $P$. Every round times all
# of them once, every $P$ and every call, in an order that rotates from round to round: the machine's
# load drifts over the seconds this takes, and interleaving lets it slow every prefix length alike,
# instead of whichever $P$ happened to be timed during a busy moment. We report p50 and p95 and keep the
# raw samples. Before timing, the two steps must give the same logits at every $P$, within the FP32
# tolerance (the stores hand attention different memory layouts).

# %% [markdown] lang="zh"
# **计时**：接下来看每一步的耗时。对 $P$ 从 16 到 480 个 token 的前缀（batch 大小为 1），分别用两种存储对象给一个解码步（一个新 token）计时。每次计时之前，都把存储对象恢复到长度 $P$（`torch.cat` 存储对象换回同一组 $P$ 个位置的张量；静态存储对象把长度设回 $P$，同一个槽位再写一次），这样每个样本测的都是同一个解码步。第三项计时只做 `torch.cat` 解码步中的那些复制，别的什么都不做。于是每个 $P$ 有三项调用。每一轮把所有 $P$ 的所有调用各计时一次，先后顺序逐轮轮换：计时要持续好几秒，其间机器的负载会起伏；交错进行，负载的起伏就会同样地落到每个前缀长度上，而不是只拖慢恰好在繁忙时刻计时的那个 $P$。我们报告 p50 和 p95，并保留原始样本。计时之前，两种做法在每个 $P$ 上给出的 logits 都必须在 FP32 容差内一致（两种存储对象交给注意力的内存布局不同）。

# %%
STEP_PREFIXES = [16, 480] if QUICK else [16, 64, 128, 256, 480]
STEP_WARMUPS, STEP_REPEATS = (2, 10) if QUICK else (10, 60)
gen = torch.Generator().manual_seed(SEED + 2)
STEP_STREAM = torch.randint(0, cfg.vocab, (1, max(STEP_PREFIXES) + 1), generator=gen)
# [en] Bytes of K and V for one position, over all layers, in FP32.
# [zh] 一个位置在所有层上的 K 和 V 字节数，FP32。
STEP_KV_BYTES = kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, 4)


def prepared_stores(prefix_len):
    # [en] A torch.cat store and a static store holding the same P positions, and restore(), which puts both back to P.
    # [zh] 一个 torch.cat 存储对象和一个静态存储对象，都存有同样的 P 个位置；restore() 把两者都恢复到长度 P。
    prompt, ones = STEP_STREAM[:, :prefix_len], torch.ones(1, prefix_len, dtype=torch.bool)
    cat_store, static_store = CatStore(cfg, 1), StaticStore(cfg, 1, prefix_len + 1)
    store_forward(model, prompt, ones, cat_store)
    store_forward(model, prompt, ones, static_store)
    saved_layers, saved_mask = list(cat_store.layers), cat_store.key_mask

    def restore():
        cat_store.layers, cat_store.key_mask = list(saved_layers), saved_mask
        static_store.length = prefix_len
    return cat_store, static_store, restore


def step_calls(prefix_len) -> dict:
    # [en] The three timed calls at one prefix length, and whether the two stores' steps agree.
    # [zh] 某个前缀长度上要计时的三项调用，以及两种存储对象的解码步是否一致。
    cat_store, static_store, restore = prepared_stores(prefix_len)
    token, one = STEP_STREAM[:, prefix_len:prefix_len + 1], torch.ones(1, 1, dtype=torch.bool)
    restore()
    # [en] The P-position (K, V) of each layer.
    # [zh] 每层长度为 P 的 (K, V)。
    history = list(cat_store.layers)
    agree = close(store_forward(model, token, one, cat_store), store_forward(model, token, one, static_store))
    new_kv = torch.zeros(1, cfg.heads, 1, cfg.head_dim)

    def copies_only():
        # [en] Only the copies a torch.cat step makes: history plus one position, K and V, every layer.
        # [zh] 只做 torch.cat 解码步中的复制：每层的 K 和 V，历史加一个位置。
        for k, v in history:
            torch.cat((k, new_kv), dim=-2)
            torch.cat((v, new_kv), dim=-2)

    return {"restore": restore, "agree": agree,
            "runs": {"cat": lambda: store_forward(model, token, one, cat_store),
                     "static": lambda: store_forward(model, token, one, static_store), "copies": copies_only}}


def time_steps(prefixes) -> list:
    calls = {p: step_calls(p) for p in prefixes}
    cases = [(p, name) for p in prefixes for name in calls[p]["runs"]]
    samples = {case: [] for case in cases}
    for round_index in range(STEP_WARMUPS + STEP_REPEATS):
        shift = round_index % len(cases)
        # [en] Every prefix length and every call once per round, the order rotating from round to round.
        # [zh] 每一轮把每个前缀长度的每项调用各计时一次，先后顺序逐轮轮换。
        for p, name in cases[shift:] + cases[:shift]:
            calls[p]["restore"]()
            start = time.perf_counter_ns()
            calls[p]["runs"][name]()
            elapsed = time.perf_counter_ns() - start
            if round_index >= STEP_WARMUPS:
                samples[p, name].append(elapsed / 1e6)
    # [en] A cat step writes the whole history plus the new position; a static step, the new position only.
    # [zh] cat 解码步写入全部历史加上新位置；静态缓存的解码步只写新位置。
    return [{"prefix": p, "logits_agree": calls[p]["agree"],
             "cat_bytes_written": STEP_KV_BYTES * (p + 1), "static_bytes_written": STEP_KV_BYTES,
             **{f"{name}_ms": {"p50": float(np.percentile(samples[p, name], 50)), "p95": float(np.percentile(samples[p, name], 95)),
                               "samples": [round(x, 6) for x in samples[p, name]]} for name in calls[p]["runs"]}}
            for p in prefixes]

# %%
STEP_TIMING = time_steps(STEP_PREFIXES)
say_table([[str(r["prefix"]), f"{r['cat_ms']['p50']:.3f} / {r['cat_ms']['p95']:.3f}",
            f"{r['static_ms']['p50']:.3f} / {r['static_ms']['p95']:.3f}", f"{r['copies_ms']['p50']:.3f} / {r['copies_ms']['p95']:.3f}",
            f"{r['cat_bytes_written'] // 1024}", f"{r['static_bytes_written']:,}"] for r in STEP_TIMING],
          en=["prefix length $P$", "`torch.cat` step p50 / p95 (ms)", "static step p50 / p95 (ms)", "its copies alone p50 / p95 (ms)",
              "K/V KiB written, `cat`", "K/V bytes written, static"],
          zh=["前缀长度 $P$", "`torch.cat` 解码步 p50 / p95（毫秒）", "静态缓存解码步 p50 / p95（毫秒）", "仅其中的复制 p50 / p95（毫秒）",
              "`cat` 写入的 K/V（KiB）", "静态缓存写入的 K/V（字节）"])
assert all(r["logits_agree"] for r in STEP_TIMING)

fig, ax = plt.subplots(figsize=(6, 3.6))
for name, marker in (("cat", "o"), ("static", "s"), ("copies", "^")):
    p50 = np.array([r[f"{name}_ms"]["p50"] for r in STEP_TIMING])
    p95 = np.array([r[f"{name}_ms"]["p95"] for r in STEP_TIMING])
    ax.errorbar(STEP_PREFIXES, p50, yerr=[np.zeros_like(p50), p95 - p50], marker=marker, capsize=3,
                label={"cat": "torch.cat cache", "static": "static cache", "copies": "the copies of a torch.cat step, alone"}[name])
ax.set_xlabel("prefix length P (tokens)")
ax.set_ylabel("time (ms): p50, bar to p95")
ax.set_yscale("log")
ax.set_title(f"CPU, 1 thread, fp32, batch 1, {STEP_REPEATS} rounds", fontsize=10)
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
fig.tight_layout()
STEP_PNG = OUT / "static_vs_cat_step.png"
fig.savefig(STEP_PNG, dpi=120)
plt.show()
shortest, longest = STEP_TIMING[0], STEP_TIMING[-1]
STEP_SUMMARY = {"prefix": longest["prefix"], "cat_p50_ms": longest["cat_ms"]["p50"], "static_p50_ms": longest["static_ms"]["p50"],
                "copies_p50_ms": longest["copies_ms"]["p50"], "cat_kib_written": longest["cat_bytes_written"] // 1024,
                "copies_share_pct": 100 * longest["copies_ms"]["p50"] / longest["cat_ms"]["p50"],
                "short_prefix": shortest["prefix"], "short_cat_p50_ms": shortest["cat_ms"]["p50"],
                "short_static_p50_ms": shortest["static_ms"]["p50"], "short_copies_p50_ms": shortest["copies_ms"]["p50"]}

# %% [markdown] lang="en"
# The figure plots the table: for each store, the median time of one decode step (marker) with a bar up
# to its 95th percentile, against the prefix length, on a logarithmic time axis; triangles are the
# copies of a `torch.cat` step timed on their own.
#
# At the longest prefix, $P = {{run:step.prefix}}$, the median step took {{run:step.cat_p50_ms:.3f}} ms
# with `torch.cat` and {{run:step.static_p50_ms:.3f}} ms with the static cache on this run; at
# $P = {{run:step.short_prefix}}$ it took {{run:step.short_cat_p50_ms:.3f}} and {{run:step.short_static_p50_ms:.3f}} ms.
# A step grows only a little with $P$: attention reads more keys, and a `torch.cat` step copies more.
# Between neighbouring prefix lengths the medians differ by a few hundredths of a millisecond, which is
# within the noise of this machine: their order may change from one run to the next. A
# `torch.cat` step allocates two new tensors per layer and copies the whole history into them,
# {{run:step.cat_kib_written}} KiB of K/V at the longest prefix; timed alone, those copies took
# {{run:step.copies_p50_ms:.3f}} ms there ({{run:step.short_copies_p50_ms:.3f}} ms at $P = {{run:step.short_prefix}}$),
# {{run:step.copies_share_pct:.0f}}% of the `torch.cat` step. The static step writes one slot per layer
# instead, and hands attention a slice of its buffer rather than a fresh tensor. The copies are the main
# difference between the two steps, not the only one, and all of it is small next to everything else a
# step does: the gap between the two medians need not equal the time of the copies. The variation of a step from one sample to the next can be larger than the copies themselves:
# the gap between p50 and p95 is wide on a busy machine, where the operating system now and then pauses our
# thread for a few milliseconds to run other programs, and the wall clock counts the pause. So either median
# may come out ahead on a given run: timing is reported, not asserted. What the rest of a step is made of, a profiler shows.

# %% [markdown] lang="zh"
# 上图画的就是表中的数。横轴 prefix length P (tokens) 是前缀长度（token 数），纵轴 time (ms): p50, bar to p95 是对数刻度的时间（毫秒）：标记是一个解码步耗时的中位数，竖线一直画到第 95 百分位数。图例中，torch.cat cache 是 `torch.cat` 缓存，static cache 是静态缓存，the copies of a torch.cat step, alone（三角形）是单独计时的 `torch.cat` 解码步中的复制。标题写明计时条件：CPU，单线程，FP32，batch 为 1，以及计时的轮数（rounds）。
#
# 在最长的前缀 $P = {{run:step.prefix}}$ 上，本次运行中 `torch.cat` 解码步的中位数耗时为 {{run:step.cat_p50_ms:.3f}} 毫秒，静态缓存为 {{run:step.static_p50_ms:.3f}} 毫秒；$P = {{run:step.short_prefix}}$ 时分别为 {{run:step.short_cat_p50_ms:.3f}} 毫秒和 {{run:step.short_static_p50_ms:.3f}} 毫秒。解码步的耗时随 $P$ 只增长一点：注意力要读取的键多了，`torch.cat` 解码步要复制的也多了。相邻两个前缀长度的中位数只差零点零几毫秒，落在这台机器的噪声之内：换一次运行，它们的大小顺序可能就变了。`torch.cat` 每一步都要为每层分配两个新张量，并把全部历史复制进去，在最长的前缀上是 {{run:step.cat_kib_written}} KiB 的 K/V；单独计时，这些复制在那里耗时 {{run:step.copies_p50_ms:.3f}} 毫秒（$P = {{run:step.short_prefix}}$ 时为 {{run:step.short_copies_p50_ms:.3f}} 毫秒），占 `torch.cat` 解码步的 {{run:step.copies_share_pct:.0f}}%。静态缓存的解码步则每层只写一个槽位，交给注意力的是缓冲区的一个切片，而不是新建的张量。复制是两种解码步的主要区别，但不是唯一的区别；这些区别与一个解码步要做的其余工作相比都很小，两个中位数之差也不一定等于复制的耗时。解码步耗时在样本之间的波动甚至可能比这些复制本身还大：机器繁忙时，p50 与 p95 相差很大，因为操作系统会不时把我们的线程暂停几毫秒去运行别的程序，而挂钟时间把这段暂停也算了进去。所以在某一次运行中，两个中位数谁大谁小都有可能：计时只报告，不做断言。一个解码步的其余部分由什么构成，要靠性能分析器来看。

# %% tags=["prose-values"]
{"step": STEP_SUMMARY}

# %% [markdown] lang="en"
# **What a decode step costs.** `torch.profiler` records every operator a step calls. We profile the same
# decode step at $P = {{run:step.prefix}}$ with each store ({{run:profile.steps}} steps each, the two stores
# taking turns every five steps so that both meet the same load of the machine) and list, per step, how many
# times each operator was called and its self time. Self time is the time in the operator itself, not in
# the operators it calls; we take the median time of one call times the calls per step, so that a call
# stalled by another process on the machine does not count. The table lists the operators that took longest
# in the `torch.cat` step, and the line under it the total over all operators. The profiler adds a
# little bookkeeping to every call, so read the times as shares of a step rather than as exact durations.
#
# In this run a `torch.cat` step called {{run:profile.cat_calls:.0f}} operators and a static step
# {{run:profile.static_calls:.0f}}. The {{run:profile.cat_ops:.0f}} concatenations of the `torch.cat` step
# (`aten::cat`: K and V in each layer, and the padding mask) took {{run:profile.cat_us:.0f}} µs of the
# {{run:profile.cat_total_us:.0f}} µs that all its operators took together. The rest of both steps is the same
# few hundred small operators: the linear layers, the LayerNorms, the attention's products, softmax and
# masking, and many views and reshapes, each costing microseconds of dispatch for very little arithmetic
# on a model this small. Per-call overhead, not arithmetic, is where such a step spends its time. On a GPU
# with a large model the picture changes: a decode step reads every weight and the whole cache for little
# arithmetic, so it is bound by memory bandwidth, and the copies of a `torch.cat` cache become extra memory
# traffic on the critical path.

# %% [markdown] lang="zh"
# **一个解码步的开销在哪里**：`torch.profiler` 会记录一个解码步调用的每个算子。我们在 $P = {{run:step.prefix}}$ 上分别对两种存储对象的同一个解码步做性能分析（各 {{run:profile.steps}} 步；两种存储对象每五步轮换一次，让两者遇到同样的机器负载），按每步列出各算子的调用次数和自身耗时。自身耗时是算子本身花的时间，不含它再调用的算子；我们取单次调用耗时的中位数乘以每步的调用次数，这样偶尔被其他进程拖慢的调用不会计入。表中列出在 `torch.cat` 解码步中耗时最多的几个算子，表下的一行是全部算子的合计。性能分析器会给每次调用加上一点记录开销，所以这些时间应当看作在解码步中所占的比例，而不是精确的耗时。
#
# 本次运行中，一个 `torch.cat` 解码步调用了 {{run:profile.cat_calls:.0f}} 次算子，一个静态缓存的解码步调用了 {{run:profile.static_calls:.0f}} 次。`torch.cat` 解码步中的 {{run:profile.cat_ops:.0f}} 次拼接（`aten::cat`：每一层的 K 和 V，再加填充掩码）耗时 {{run:profile.cat_us:.0f}} 微秒，而这一步的全部算子合计耗时 {{run:profile.cat_total_us:.0f}} 微秒。两种解码步的其余部分完全相同，都是几百个小算子：各个线性层、LayerNorm、注意力中的矩阵乘法、softmax 和掩码，以及许多视图和变形操作。对这么小的模型来说，每个算子只做很少的运算，却要花几微秒的分派开销。这样的解码步，时间主要花在每次调用的固定开销上，而不是运算上。换成 GPU 上的大模型，情形就不同了：一个解码步要读取全部权重和整个缓存，运算却很少，因此受限于内存带宽；这时 `torch.cat` 缓存的复制就成了关键路径上额外的访存。

# %%
# [en] Kineto, the profiler's engine, prints a line at every start and stop below this log level.
# [zh] Kineto（性能分析器的底层引擎）在日志级别低于这个值时，每次启动和停止都会打印一行。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
PROFILE_STEPS = 10 if QUICK else 50


def profile_step(prefix_len) -> dict:
    # [en] Per store and per operator, in one step: the calls, and the self time (µs) as the median time of one
    # [en] call times the calls per step (a median, so that one call stalled by another process does not count).
    # [en] The stores take turns, five steps at a time, so that both see the same load of the machine.
    # [zh] 每种存储对象、每个算子在一个解码步中的调用次数，以及自身耗时（微秒）：单次调用耗时的中位数乘以
    # [zh] 每步的调用次数（取中位数，是为了不让某一次被其他进程拖慢的调用计入结果）。
    # [zh] 两种存储对象轮流进行，每次五步，这样两者遇到的机器负载相同。
    cat_store, static_store, restore = prepared_stores(prefix_len)
    token, one = STEP_STREAM[:, prefix_len:prefix_len + 1], torch.ones(1, 1, dtype=torch.bool)
    stores, calls = {"cat": cat_store, "static": static_store}, {"cat": {}, "static": {}}
    for turn in range(PROFILE_STEPS // 5):
        for name, store in stores.items():
            restore()
            store_forward(model, token, one, store)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    restore()
                    store_forward(model, token, one, store)
            for event in prof.events():
                calls[name].setdefault(event.key, []).append(event.self_cpu_time_total)
    steps = PROFILE_STEPS // 5 * 5
    return {name: {op: (len(times) / steps, float(np.median(times)) * len(times) / steps) for op, times in ops.items()}
            for name, ops in calls.items()}


PROFILE = profile_step(STEP_PREFIXES[-1])
top = sorted(PROFILE["cat"], key=lambda op: -PROFILE["cat"][op][1])[:8]
top += ["aten::cat"] if "aten::cat" not in top else []
totals = {name: (sum(c for c, _ in ops.values()), sum(t for _, t in ops.values())) for name, ops in PROFILE.items()}
profile_rows = [[f"`{op}`", *(f"{PROFILE[name].get(op, (0, 0))[i]:{fmt}}" for name in ("cat", "static") for i, fmt in ((0, ".0f"), (1, ".1f")))]
                for op in top]
say_table(profile_rows,
          en=["operator", "`torch.cat` step: calls", "self time (µs)", "static step: calls", "self time (µs)"],
          zh=["算子", "`torch.cat` 解码步：调用次数", "自身耗时（微秒）", "静态缓存解码步：调用次数", "自身耗时（微秒）"])
say(en=f"All operators together: {totals['cat'][0]:.0f} calls and {totals['cat'][1]:.1f} µs in a `torch.cat` step, "
       f"{totals['static'][0]:.0f} calls and {totals['static'][1]:.1f} µs in a static step.",
    zh=f"全部算子合计：`torch.cat` 解码步调用 {totals['cat'][0]:.0f} 次，耗时 {totals['cat'][1]:.1f} 微秒；"
       f"静态缓存解码步调用 {totals['static'][0]:.0f} 次，耗时 {totals['static'][1]:.1f} 微秒。")

# %% tags=["prose-values"]
{"profile": {"steps": PROFILE_STEPS, "cat_calls": totals["cat"][0], "static_calls": totals["static"][0],
             "cat_ops": PROFILE["cat"]["aten::cat"][0], "cat_us": PROFILE["cat"]["aten::cat"][1], "cat_total_us": totals["cat"][1]}}
