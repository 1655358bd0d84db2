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
# tolerance: during the prefill the static store hands attention the first $P$ positions of its
# $(P + 1)$-position buffer, a strided view, while the `torch.cat` store passes on the new K and V themselves,
# and a kernel may sum two layouts in different orders.
#
# The timing harness is folded below: `prepared_stores` builds both stores at length $P$ and a `restore()`
# that puts them back, `step_calls` the three calls, `time_steps` the rotating rounds. The cell after it
# runs the harness, checks that the two steps agree at every $P$ and prints the table; a figure of it follows.

# %% [markdown] lang="zh"
# **计时**：接下来看每一步的耗时。对 $P$ 从 16 到 480 个 token 的前缀（batch 大小为 1），分别用两种存储对象给一个解码步（一个新 token）计时。每次计时之前，都把存储对象恢复到长度 $P$（`torch.cat` 存储对象换回同一组 $P$ 个位置的张量；静态存储对象把长度设回 $P$，同一个槽位再写一次），这样每个样本测的都是同一个解码步。第三项计时只做 `torch.cat` 解码步中的那些复制，别的什么都不做。这样，每个 $P$ 要计时三项调用。每一轮把所有 $P$ 的所有调用各计时一次，先后顺序逐轮轮换：计时要持续好几秒，其间机器的负载会起伏；交错进行，负载的起伏就会同样地落到每个前缀长度上，而不是只拖慢恰好在繁忙时刻计时的那个 $P$。我们报告 p50 和 p95，并保留原始样本。计时之前，两种做法在每个 $P$ 上给出的 logits 都必须在 FP32 容差内一致：预填充时，静态存储对象交给注意力的是它那个 $P + 1$ 个位置的缓冲区中前 $P$ 个位置，是一个跨步视图，而 `torch.cat` 存储对象直接交出新算出的 K 和 V；内存布局不同，内核求和的顺序就可能不同。
#
# 计时代码默认折叠在下面：`prepared_stores` 构造长度为 $P$ 的两种存储对象，以及把它们恢复到长度 $P$ 的 `restore()`；`step_calls` 给出三项调用；`time_steps` 按逐轮轮换的顺序计时。再下一个单元格运行这些代码，检查两种解码步在每个 $P$ 上一致，并列出表格；之后再把表格画成图。

# %% tags=["hide-input"]
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

# %% [markdown] lang="en"
# The figure plots the table. Left: for each store, the median time of one decode step (marker) with a
# bar up to its 95th percentile, on a time axis that starts at zero; the two curves lie almost on top of
# each other. Right, on a finer scale: the difference of the two medians, and the copies of a `torch.cat`
# step timed on their own (triangles).

# %% [markdown] lang="zh"
# 下图画的是表中的数。左图：标记是每种存储对象一个解码步耗时的中位数，竖线一直画到第 95 百分位数，时间轴从 0 开始；两条曲线几乎重合。右图纵轴更细：画的是两个中位数之差，以及单独计时的 `torch.cat` 解码步中的复制（三角形）。图中的英文标注：横轴 prefix length P (tokens) 是前缀长度（token 数）；左图纵轴 step time (ms): p50, bar to p95 是解码步耗时（毫秒），标记为 p50，竖线画到 p95；右图纵轴 time (ms) 是时间（毫秒）。图例中，torch.cat cache 是 `torch.cat` 缓存，static cache 是静态缓存，torch.cat step - static step (p50) 是两种解码步中位数之差，the copies of a torch.cat step, alone (p50) 是单独计时的复制。左右两图的标题 one decode step 和 the difference, magnified 分别是“一个解码步”和“放大后的差值”；总标题写明计时条件：CPU，单线程，FP32，batch 为 1，以及计时的轮数（rounds）。

# %%
cat_p50, static_p50, copies_p50 = (np.array([r[f"{name}_ms"]["p50"] for r in STEP_TIMING]) for name in ("cat", "static", "copies"))
fig, (ax_step, ax_diff) = plt.subplots(1, 2, figsize=(9, 3.6))
for name, marker in (("cat", "o"), ("static", "s")):
    p50 = np.array([r[f"{name}_ms"]["p50"] for r in STEP_TIMING])
    p95 = np.array([r[f"{name}_ms"]["p95"] for r in STEP_TIMING])
    ax_step.errorbar(STEP_PREFIXES, p50, yerr=[np.zeros_like(p50), p95 - p50], marker=marker, capsize=3,
                     label={"cat": "torch.cat cache", "static": "static cache"}[name])
ax_step.set_ylim(bottom=0)
ax_step.set_xlabel("prefix length P (tokens)")
ax_step.set_ylabel("step time (ms): p50, bar to p95")
ax_step.set_title("one decode step", fontsize=10)
ax_step.legend(fontsize=8, loc="lower right")
# [en] Right: the difference of the medians, next to the copies timed alone, on a finer scale.
# [zh] 右图：两个中位数之差，与单独计时的复制并排，纵轴更细。
ax_diff.axhline(0, color="black", linewidth=0.8)
ax_diff.plot(STEP_PREFIXES, cat_p50 - static_p50, marker="o", label="torch.cat step - static step (p50)")
ax_diff.plot(STEP_PREFIXES, copies_p50, marker="^", label="the copies of a torch.cat step, alone (p50)")
ax_diff.set_xlabel("prefix length P (tokens)")
ax_diff.set_ylabel("time (ms)")
ax_diff.set_title("the difference, magnified", fontsize=10)
ax_diff.legend(fontsize=8, loc="upper left")
for ax in (ax_step, ax_diff):
    ax.grid(alpha=0.3)
fig.suptitle(f"CPU, 1 thread, fp32, batch 1, {STEP_REPEATS} rounds", fontsize=10)
fig.tight_layout()
STEP_PNG = OUT / "static_vs_cat_step.png"
fig.savefig(STEP_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# **The lesson first.** On this machine the saving is below the sample-to-sample noise of a step at
# {{run:step.below_noise_count}} of the {{run:step.prefix_count}} prefix lengths: there the copies a static cache
# saves (at most {{run:step.copies_max_ms:.3f}} ms) took less time than the p95 − p50 spread of either step at
# that length ({{run:step.spread_min_ms:.3f}} to {{run:step.spread_max_ms:.3f}} ms over the table, on this run). In eager mode
# on this CPU those copies are a small part of a decode step: over the prefix lengths from {{run:step.short_prefix}} to {{run:step.prefix}}, the copies of a
# `torch.cat` step took {{run:step.share_min_pct:.0f}}% to {{run:step.share_max_pct:.0f}}% of the step's
# median on this run. The static cache's value lies in its fixed addresses, not in eager speed.
#
# **What the code predicts.** A `torch.cat` step allocates two new tensors per layer and copies the whole
# history into them, $P + 1$ positions of K/V ({{run:step.cat_kib_written}} KiB at the longest prefix),
# so the bytes it copies grow in proportion to $P$ (the time also holds a fixed cost per call): on this run the copies took {{run:step.short_copies_p50_ms:.3f}} ms at
# $P = {{run:step.short_prefix}}$ and {{run:step.copies_p50_ms:.3f}} ms at $P = {{run:step.prefix}}$. A static
# step writes one slot per layer instead; otherwise the two steps run the same code on the same
# contiguous layout (in the timed setup the static buffer holds exactly $P + 1$ positions). The copies
# are the only difference, yet the gap between the two medians (at most
# {{run:step.median_gap_max_ms:.3f}} ms over the table on this run) need not equal their time: a gap no
# larger than the p95 − p50 spread above can change sign from one run to the next, so timing is
# reported, not asserted. On a GPU with a large model
# the picture changes: a decode step is bound by memory bandwidth, and the copies of a `torch.cat` cache
# become extra memory traffic on the critical path. What the rest of a step is made of on this CPU, the
# optional profile below shows.

# %% [markdown] lang="zh"
# **主要结论**：在这台机器上，本次运行的 {{run:step.prefix_count}} 个前缀长度中，有 {{run:step.below_noise_count}} 个长度上省下的时间低于解码步在样本之间的波动：在这些长度上，静态缓存省下的复制（最多 {{run:step.copies_max_ms:.3f}} 毫秒）比同一长度上两种解码步的 p95 与 p50 之差都小（整张表上这个差为 {{run:step.spread_min_ms:.3f}} 到 {{run:step.spread_max_ms:.3f}} 毫秒）。在这台 CPU 上以 eager 模式运行时，这些复制只占解码步的一小部分：本次运行中，前缀长度从 {{run:step.short_prefix}} 到 {{run:step.prefix}}，`torch.cat` 解码步中的复制占这一步中位数耗时的 {{run:step.share_min_pct:.0f}}% 到 {{run:step.share_max_pct:.0f}}%。静态缓存的价值在于固定的地址，而不在 eager 模式下的速度。
#
# **按代码推算**：`torch.cat` 每一步都要为每层分配两个新张量，并把全部历史（$P + 1$ 个位置的 K/V，在最长的前缀上是 {{run:step.cat_kib_written}} KiB）复制进去，所以复制的字节数与 $P$ 成正比增长（耗时中还有每次调用的固定开销）：本次运行中，复制的耗时在 $P = {{run:step.short_prefix}}$ 时为 {{run:step.short_copies_p50_ms:.3f}} 毫秒，$P = {{run:step.prefix}}$ 时为 {{run:step.copies_p50_ms:.3f}} 毫秒。静态缓存的解码步则每层只写一个槽位；除此之外，两种解码步在同样连续的内存布局上执行同样的代码（计时时静态缓冲区正好容纳 $P + 1$ 个位置）。复制是唯一的区别，但两个中位数之差（本次运行中整张表上最大为 {{run:step.median_gap_max_ms:.3f}} 毫秒）不一定等于复制的耗时：不超过上面 p95 与 p50 之差的差值，换一次运行就可能变号，所以计时只报告，不做断言。换成 GPU 上的大模型，情形就不同了：解码步受限于内存带宽，`torch.cat` 缓存的复制就成了关键路径上额外的访存。在这台 CPU 上，一个解码步的其余部分由什么构成，见下面的选读性能分析。

# %% tags=["prose-values"]
shortest, longest = STEP_TIMING[0], STEP_TIMING[-1]
STEP_SUMMARY = {"prefix": longest["prefix"], "cat_p50_ms": longest["cat_ms"]["p50"], "static_p50_ms": longest["static_ms"]["p50"],
                "copies_p50_ms": longest["copies_ms"]["p50"], "cat_kib_written": longest["cat_bytes_written"] // 1024,
                "copies_share_pct": 100 * longest["copies_ms"]["p50"] / longest["cat_ms"]["p50"],
                "short_prefix": shortest["prefix"], "short_cat_p50_ms": shortest["cat_ms"]["p50"],
                "short_static_p50_ms": shortest["static_ms"]["p50"], "short_copies_p50_ms": shortest["copies_ms"]["p50"],
                # [en] Over the whole table: the copies' share of a torch.cat step, the largest gap between the two
                # [en] medians, and the spread p95 - p50 of a step.
                # [zh] 针对整张表：复制在 torch.cat 解码步中所占的比例、两个中位数之差的最大值，以及解码步的 p95 - p50。
                "share_min_pct": float(min(100 * copies_p50 / cat_p50)), "share_max_pct": float(max(100 * copies_p50 / cat_p50)),
                "median_gap_max_ms": float(max(abs(cat_p50 - static_p50))), "copies_max_ms": float(max(copies_p50)),
                "spread_min_ms": min(r[f"{n}_ms"]["p95"] - r[f"{n}_ms"]["p50"] for r in STEP_TIMING for n in ("cat", "static")),
                "spread_max_ms": max(r[f"{n}_ms"]["p95"] - r[f"{n}_ms"]["p50"] for r in STEP_TIMING for n in ("cat", "static"))}
# [en] The headline's verdict: at how many prefix lengths did the copies take less than both steps' p95 - p50?
# [zh] 主要结论的判断：在几个前缀长度上，复制的耗时比两种解码步的 p95 - p50 都小？
below_noise = sum(r["copies_ms"]["p50"] < min(r[f"{n}_ms"]["p95"] - r[f"{n}_ms"]["p50"] for n in ("cat", "static"))
                  for r in STEP_TIMING)
STEP_SUMMARY |= {"below_noise_count": below_noise, "prefix_count": len(STEP_TIMING)}
{"step": STEP_SUMMARY}

# %% [markdown] lang="en"
# <details><summary>Optional: what a decode step is made of (a profile)</summary>
#
# `torch.profiler` records every operator a step calls. We profile the decode step at
# $P = {{run:step.prefix}}$ with each store ({{run:profile.steps}} steps each, the stores taking turns every
# five steps) and list, per step, each operator's calls and its self time (the median time of one call
# times the calls per step, so that a call stalled by another process does not count). The profiler adds
# a little bookkeeping to every call: read the times as shares of a step.
#
# In this run a `torch.cat` step called {{run:profile.cat_calls:.0f}} operators and a static step
# {{run:profile.static_calls:.0f}}. The cell checks the two differences the code predicts: the
# {{run:profile.cat_ops:.0f}} concatenations (`aten::cat`: K and V in each layer, and the padding mask) are
# missing from the static step, which calls `aten::copy_` {{run:profile.copy_extra:.0f}} more times instead
# (its in-place writes). The rest is a few hundred small operators
# ({{run:profile.us_per_op:.1f}} µs each on average in the `torch.cat` step): per-call overhead, not
# arithmetic, is where such a step spends its time. The profile cannot tell which step is faster:
# operators doing the same work in both steps differ by {{run:profile.same_op_diff_min_pct:+.0f}}% to
# {{run:profile.same_op_diff_max_pct:+.0f}}% between the two columns, which is measurement noise as large as the
# concatenations' {{run:profile.cat_us:.0f}} µs.
#
# </details>

# %% [markdown] lang="zh"
# <details><summary>选读：一个解码步由什么构成（性能分析）</summary>
#
# `torch.profiler` 会记录一个解码步调用的每个算子。我们在 $P = {{run:step.prefix}}$ 上分别对两种存储对象的解码步做性能分析（各 {{run:profile.steps}} 步，两种存储对象每五步轮换一次），按每步列出各算子的调用次数和自身耗时（单次调用耗时的中位数乘以每步的调用次数，这样被其他进程拖慢的调用不会计入）。性能分析器会给每次调用加上一点记录开销，所以这些时间应当看作在解码步中所占的比例。
#
# 本次运行中，一个 `torch.cat` 解码步调用了 {{run:profile.cat_calls:.0f}} 次算子，静态缓存的解码步调用了 {{run:profile.static_calls:.0f}} 次。单元格核对代码预言的两处差别：`torch.cat` 解码步中的 {{run:profile.cat_ops:.0f}} 次拼接（`aten::cat`：每一层的 K 和 V，再加填充掩码）在静态缓存的解码步里没有，取而代之的是多出的 {{run:profile.copy_extra:.0f}} 次 `aten::copy_`（即原地写入）。其余是几百个小算子（`torch.cat` 解码步中平均每个 {{run:profile.us_per_op:.1f}} 微秒）：这样的解码步，时间主要花在每次调用的固定开销上，而不是运算上。这份性能分析分辨不出哪种解码步更快：在两种解码步中做同样工作的算子，两栏耗时相差 {{run:profile.same_op_diff_min_pct:+.0f}}% 到 {{run:profile.same_op_diff_max_pct:+.0f}}%，这种测量波动与拼接本身的 {{run:profile.cat_us:.0f}} 微秒一样大。
#
# </details>

# %% tags=["hide-input"]
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
top += [op for op in ("aten::cat", "aten::copy_") if op not in top]
totals = {name: (sum(c for c, _ in ops.values()), sum(t for _, t in ops.values())) for name, ops in PROFILE.items()}
profile_rows = [[f"`{op}`", *(f"{PROFILE[name].get(op, (0, 0))[i]:{fmt}}" for name in ("cat", "static") for i, fmt in ((0, ".0f"), (1, ".1f")))]
                for op in top]
say_table(profile_rows,
          en=["operator", "`torch.cat` step: calls", "`torch.cat` step: self time (µs)", "static step: calls", "static step: self time (µs)"],
          zh=["算子", "`torch.cat` 解码步：调用次数", "`torch.cat` 解码步：自身耗时（微秒）", "静态缓存解码步：调用次数", "静态缓存解码步：自身耗时（微秒）"])
say(en=f"All operators together: {totals['cat'][0]:.0f} calls and {totals['cat'][1]:.1f} µs in a `torch.cat` step, "
       f"{totals['static'][0]:.0f} calls and {totals['static'][1]:.1f} µs in a static step.",
    zh=f"全部算子合计：`torch.cat` 解码步调用 {totals['cat'][0]:.0f} 次，耗时 {totals['cat'][1]:.1f} 微秒；"
       f"静态缓存解码步调用 {totals['static'][0]:.0f} 次，耗时 {totals['static'][1]:.1f} 微秒。")
# [en] The counts the code predicts: no concatenation in a static step, one in-place copy in its place (K and V
# [en] in each layer, and the mask's new slot).
# [zh] 代码推算出的调用次数：静态缓存的解码步没有拼接，每次拼接都换成一次原地复制（每层的 K 和 V，以及掩码的新槽位）。
copies = {name: PROFILE[name].get("aten::copy_", (0, 0))[0] for name in PROFILE}
assert PROFILE["cat"]["aten::cat"][0] == 2 * cfg.layers + 1 and PROFILE["static"].get("aten::cat", (0, 0))[0] == 0
assert copies["static"] - copies["cat"] == 2 * cfg.layers + 1
# [en] Operators in the table doing the same arithmetic in both steps, as often: how far apart their two times are.
# [zh] 表中在两种解码步里做同样运算、调用次数也相同的算子：两栏耗时相差多少。
same_ops = [op for op in top if op not in ("aten::cat", "aten::copy_") and PROFILE["cat"][op][0] == PROFILE["static"].get(op, (0, 0))[0]]
same_op_diff_pct = [100 * (PROFILE["static"][op][1] / PROFILE["cat"][op][1] - 1) for op in same_ops]
say(en=f"Operators of the table called as often in both steps ({', '.join(f'`{op}`' for op in same_ops)}): "
       f"the static column's time is {min(same_op_diff_pct):+.0f}% to {max(same_op_diff_pct):+.0f}% off the `torch.cat` column's.",
    zh=f"表中在两种解码步里调用次数相同的算子（{'、'.join(f'`{op}`' for op in same_ops)}）："
       f"静态缓存一栏的耗时与 `torch.cat` 一栏相差 {min(same_op_diff_pct):+.0f}% 到 {max(same_op_diff_pct):+.0f}%。")

# %% tags=["prose-values"]
{"profile": {"steps": PROFILE_STEPS, "cat_calls": totals["cat"][0], "static_calls": totals["static"][0],
             "cat_ops": PROFILE["cat"]["aten::cat"][0], "cat_us": PROFILE["cat"]["aten::cat"][1], "cat_total_us": totals["cat"][1],
             "static_total_us": totals["static"][1], "cat_copies": copies["cat"], "static_copies": copies["static"],
             "copy_extra": copies["static"] - copies["cat"], "us_per_op": totals["cat"][1] / totals["cat"][0],
             "same_op_diff_min_pct": min(same_op_diff_pct), "same_op_diff_max_pct": max(same_op_diff_pct)}}
