# %% [markdown] lang="en"
# ## 11. Optional: timing the static and the `torch.cat` step in eager mode
#
# This section can be skipped: nothing later depends on it. What to expect: with a model this small on a
# CPU, the gap between the two steps is small next to the timing noise: at some prefix lengths the run
# may not tell them apart, and at short ones either step may come out ahead. This run's verdict, up front:
# the 95% interval of the difference between the two steps excludes zero at {{run:step.resolved}} of the
# {{run:step.prefixes}} prefix lengths timed (the static step faster at {{run:step.static_faster}} of them,
# slower at {{run:step.static_slower}}); wherever it contains zero, this run cannot tell the two steps apart. Section 5 showed that the two stores compute
# the same thing; here we time them. For prefix lengths $P$ from 16 to 480 tokens (batch 1) we time one
# decode step with each store, and a third call that makes only the copies of a `torch.cat` step. Before
# every timed call the store is put back to length $P$; every round times every call once, in an order
# that rotates from round to round, so that the machine's load drifts over all of them alike; we compare
# **medians**, which a few slowed calls barely move. Before timing, the two steps must give the same logits
# at every $P$ within the FP32 tolerance. The harness is folded below.

# %% [markdown] lang="zh"
# ## 11. 可选：在 eager 模式下为静态缓存和 `torch.cat` 的解码步计时
#
# 本节可以跳过，后面的内容都不依赖它。预期的结果是：模型这样小、又在 CPU 上，两种解码步耗时之差与计时噪声相比很小，在有些前缀长度上，这次运行可能分辨不出两者；在较短的前缀上，哪一种更快都有可能。先给出本次运行的结论：在计时的 {{run:step.prefixes}} 个前缀长度中，两种解码步之差的 95% 区间不包含 0 的有 {{run:step.resolved}} 个（其中静态缓存的解码步更快的 {{run:step.static_faster}} 个，更慢的 {{run:step.static_slower}} 个）；区间包含 0 的前缀长度上，本次运行分辨不出两者的快慢。第 5 节表明两种存储对象算出的结果相同；这里为它们计时。对 $P$ 从 16 到 480 个 token 的前缀（batch 大小为 1），分别用两种存储对象给一个解码步计时，第三项调用只做 `torch.cat` 解码步中的那些复制。每次计时之前都把存储对象恢复到长度 $P$；每一轮把每项调用各计时一次，先后顺序逐轮轮换，这样机器负载的起伏会同样地落到每一项上；我们比较的是**中位数**，几次被拖慢的调用几乎不会改变它。计时之前，两种解码步在每个 $P$ 上给出的 logits 必须在 FP32 容差内一致。计时代码折叠在下面。

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


def median_gap_interval(row, resamples=2000) -> tuple:
    # [en] 95% bootstrap interval of median(cat) - median(static): resample each step's samples with replacement,
    # [en] take the difference of the two medians each time, keep the middle 95%.
    # [zh] median(cat) - median(static) 的 95% 自助法区间：对两种解码步的样本各自有放回地重抽样，
    # [zh] 每次取两个中位数之差，保留中间的 95%。
    rng = np.random.default_rng(SEED)
    cat, static = (np.array(row[f"{name}_ms"]["samples"]) for name in ("cat", "static"))
    gaps = (np.median(rng.choice(cat, (resamples, cat.size)), axis=1)
            - np.median(rng.choice(static, (resamples, static.size)), axis=1))
    low, high = np.percentile(gaps, [2.5, 97.5])
    return float(low), float(high)


def show_step_table(rows):
    say_table([[str(r["prefix"]), *(f"{r[f'{n}_ms']['p50']:.3f}" for n in ("cat", "static")),
                "{:+.3f} [{:+.3f}, {:+.3f}]".format(r["cat_ms"]["p50"] - r["static_ms"]["p50"], *median_gap_interval(r)),
                f"{r['copies_ms']['p50']:.3f}", f"{100 * r['copies_ms']['p50'] / r['cat_ms']['p50']:.0f}%",
                f"{r['cat_bytes_written'] / 1024:g}", f"{r['static_bytes_written'] / 1024:g}"] for r in rows],
              en=["prefix length $P$", "`torch.cat` step (ms)", "static step (ms)", "difference [95% interval] (ms)",
                  "its copies alone (ms)", "copies' share of the `torch.cat` step", "K/V written, `cat` (KiB)", "K/V written, static (KiB)"],
              zh=["前缀长度 $P$", "`torch.cat` 解码步（毫秒）", "静态缓存解码步（毫秒）", "差值 [95% 区间]（毫秒）",
                  "仅其中的复制（毫秒）", "复制占 `torch.cat` 解码步的比例", "`cat` 写入的 K/V（KiB）", "静态缓存写入的 K/V（KiB）"])
    # [en] Per prefix length, where the difference's 95% interval lies: above zero, below zero, or across it.
    # [zh] 每个前缀长度上，差值的 95% 区间落在哪里：0 以上、0 以下，还是跨过 0。
    sides = [(r["prefix"], (low > 0) - (high < 0)) for r in rows for low, high in [median_gap_interval(r)]]
    say(en="This run, per prefix length: " + "; ".join(
            f"$P = {p}$: " + {1: "the static step was faster", -1: "the static step was slower",
                              0: "cannot tell (the interval contains zero)"}[side] for p, side in sides) + ".",
        zh="本次运行，各前缀长度上：" + "；".join(
            f"$P = {p}$ 时" + {1: "静态缓存的解码步更快", -1: "静态缓存的解码步更慢",
                              0: "分辨不出快慢（区间包含 0）"}[side] for p, side in sides) + "。")

# %% [markdown] lang="en"
# The table gives medians. "Difference" is the `torch.cat` step's median minus the static step's, with its
# 95% bootstrap interval: how precisely this run pins that difference (a loaded machine widens it).

# %% [markdown] lang="zh"
# 表中都是中位数。“差值”是 `torch.cat` 解码步的中位数减去静态缓存解码步的中位数，方括号里是它的 95% 自助法区间，表示本次运行能把这个差值确定到多精确（机器负载重时区间会变宽）。

# %%
STEP_TIMING = time_steps(STEP_PREFIXES)
show_step_table(STEP_TIMING)
assert all(r["logits_agree"] for r in STEP_TIMING)

# %% [markdown] lang="en"
# The figure draws the table. Left: each store's median step time, with a bar over the middle half of its
# samples (25th to 75th percentile). Right, on a finer scale: the difference of the two medians with its
# 95% interval, and the copies of a `torch.cat` step timed alone.

# %% [markdown] lang="zh"
# 下图画的是表中的数。左图：每种存储对象一个解码步耗时的中位数，竖线覆盖中间一半的样本（第 25 到第 75 百分位数）。右图放大了纵轴（刻度更细）：两个中位数之差及其 95% 区间，以及单独计时的 `torch.cat` 解码步中的复制。图中的英文标注：横轴 prefix length P (tokens) 是前缀长度（token 数）；左图纵轴 step time (ms): median, bar 25th-75th percentile 是解码步耗时（毫秒），标记为中位数，竖线为第 25 到第 75 百分位数；右图纵轴 time (ms) 是时间（毫秒）。图例中，torch.cat cache 是 `torch.cat` 缓存，static cache 是静态缓存，median difference, 95% interval 是中位数之差及其 95% 区间，the copies of a torch.cat step, alone 是单独计时的复制。两图标题 one decode step 和 the difference, magnified 分别是“一个解码步”和“放大后的差值”；总标题写明计时条件：CPU，单线程，FP32，batch 为 1，以及计时的轮数（rounds）。

# %% tags=["hide-input"]
cat_p50, static_p50, copies_p50 = (np.array([r[f"{name}_ms"]["p50"] for r in STEP_TIMING]) for name in ("cat", "static", "copies"))
gap_intervals = np.array([median_gap_interval(r) for r in STEP_TIMING])
fig, (ax_step, ax_diff) = plt.subplots(1, 2, figsize=(9, 3.6))
for name, marker in (("cat", "o"), ("static", "s")):
    p50 = np.array([r[f"{name}_ms"]["p50"] for r in STEP_TIMING])
    p25, p75 = (np.array([np.percentile(r[f"{name}_ms"]["samples"], q) for r in STEP_TIMING]) for q in (25, 75))
    ax_step.errorbar(STEP_PREFIXES, p50, yerr=[p50 - p25, p75 - p50], marker=marker, capsize=3,
                     label={"cat": "torch.cat cache", "static": "static cache"}[name])
ax_step.set_ylim(bottom=0)
ax_step.set_xlabel("prefix length P (tokens)")
ax_step.set_ylabel("step time (ms): median, bar 25th-75th percentile", fontsize=8)
ax_step.set_title("one decode step", fontsize=10)
ax_step.legend(fontsize=8, loc="lower right")
ax_diff.axhline(0, color="black", linewidth=0.8)
gap = cat_p50 - static_p50
ax_diff.errorbar(STEP_PREFIXES, gap, yerr=[gap - gap_intervals[:, 0], gap_intervals[:, 1] - gap], marker="o", capsize=3,
                 label="median difference, 95% interval")
ax_diff.plot(STEP_PREFIXES, copies_p50, marker="^", label="the copies of a torch.cat step, alone")
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
# [en] At the longest P: the step difference (what the static step saves), next to what the copies it avoids cost alone.
# [zh] 最长前缀上：两种解码步的差值（静态缓存省下的时间），并与它省去的那些复制单独计时的结果对照。
saving_low, saving_high = gap_intervals[-1]
say(en=f"At $P = {STEP_PREFIXES[-1]}$ the difference (`torch.cat` minus static) is {gap[-1]:+.3f} ms (95% interval "
       f"[{saving_low:+.3f}, {saving_high:+.3f}]); the copies the static step avoids cost {copies_p50[-1]:.3f} ms alone"
       + (", inside that interval." if saving_low <= copies_p50[-1] <= saving_high else
          ", outside that interval: the two steps differ in more than the copies (the profile below lists how)."),
    zh=f"在 $P = {STEP_PREFIXES[-1]}$ 时，差值（`torch.cat` 减静态缓存）为 {gap[-1]:+.3f} 毫秒（95% 区间为 [{saving_low:+.3f}, {saving_high:+.3f}]）；"
       f"静态缓存的解码步省去的那些复制，单独计时为 {copies_p50[-1]:.3f} 毫秒"
       + ("，落在这个区间之内。" if saving_low <= copies_p50[-1] <= saving_high else
          "，落在这个区间之外：两种解码步的区别不只是复制（下面的性能分析列出了区别在哪里）。"))

# %% [markdown] lang="en"
# **What the table shows.** A `torch.cat` step copies the whole history, $P + 1$ positions of K/V
# ({{run:step.cat_kib_written}} KiB at the longest prefix), into two new tensors per layer; those copies,
# timed alone, took {{run:step.short_copies_p50_ms:.3f}} ms at $P = {{run:step.short_prefix}}$ and
# {{run:step.copies_p50_ms:.3f}} ms at $P = {{run:step.prefix}}$ (a fixed cost per call included); as a share
# of the `torch.cat` step's median, lowest {{run:step.share_min_pct:.0f}}%, highest {{run:step.share_max_pct:.0f}}%.
# A static step writes one slot per layer instead. Yet the copies are not the only difference between the
# two steps. It is not the memory layout: here the static buffer holds exactly $P + 1$ slots, so the views it
# hands attention cover the whole buffer and are contiguous, like the `torch.cat` result. It is in the calls:
# the static step makes its writes with extra in-place `copy_` calls through slices, and the two steps make different
# view calls (`alias`, `slice`, ...; the profile below lists every operator whose count differs). So the
# copies' time need not equal the step difference, and where the copies are cheap the static step can even
# be the slower one. The line under the table gives this run's verdict at each
# prefix length: which step was faster where the 95% interval of the difference excludes zero, and "cannot
# tell" where it contains zero; timing is therefore reported, not asserted. The line under the figure compares,
# at $P = {{run:step.prefix}}$, what the static step saves with what the copies alone cost. On a GPU with a large
# model the picture changes: a decode step is bound by memory bandwidth, and the copies of a `torch.cat`
# cache become extra memory traffic on the critical path.

# %% [markdown] lang="zh"
# **表中可以看出什么**：`torch.cat` 解码步要把全部历史（$P + 1$ 个位置的 K/V，在最长的前缀上是 {{run:step.cat_kib_written}} KiB）复制到每层两个新张量中；单独计时，这些复制在 $P = {{run:step.short_prefix}}$ 时耗时 {{run:step.short_copies_p50_ms:.3f}} 毫秒，$P = {{run:step.prefix}}$ 时耗时 {{run:step.copies_p50_ms:.3f}} 毫秒（含每次调用的固定开销）；按占 `torch.cat` 解码步中位数耗时的比例计，最低 {{run:step.share_min_pct:.0f}}%，最高 {{run:step.share_max_pct:.0f}}%。静态缓存的解码步则每层只写一个槽位。但复制并不是两种解码步唯一的区别。区别不在内存布局：这里静态缓冲区恰好有 $P + 1$ 个槽位，它交给注意力的视图覆盖整个缓冲区，和 `torch.cat` 的结果一样是连续的。区别在调用上：静态缓存的解码步通过切片做写入，多出若干次原地 `copy_` 调用，两种解码步所做的视图调用也不一样（`alias`、`slice` 等；下面的性能分析列出调用次数不同的每一个算子）。所以复制的耗时不一定等于两种解码步的耗时之差；在复制开销很小的前缀长度上，静态缓存的解码步甚至可能更慢。表下方的一行给出本次运行在每个前缀长度上的结论：差值的 95% 区间不包含 0 时，说明哪一种解码步更快；包含 0 时，则是“分辨不出快慢”。因此计时只报告，不做断言。图下方的一行在 $P = {{run:step.prefix}}$ 上比较静态缓存的解码步省下的时间与单独的复制耗时。换成 GPU 上的大模型，情形就不同了：解码步受限于内存带宽，`torch.cat` 缓存的复制就成了关键路径上额外的访存。

# %% tags=["prose-values"]
shortest, longest = STEP_TIMING[0], STEP_TIMING[-1]
STEP_SUMMARY = {"prefix": longest["prefix"], "copies_p50_ms": longest["copies_ms"]["p50"],
                "cat_kib_written": longest["cat_bytes_written"] // 1024,
                "short_prefix": shortest["prefix"], "short_copies_p50_ms": shortest["copies_ms"]["p50"],
                "share_min_pct": float(min(100 * copies_p50 / cat_p50)), "share_max_pct": float(max(100 * copies_p50 / cat_p50)),
                "prefixes": len(STEP_TIMING), "static_faster": int(sum(gap_intervals[:, 0] > 0)),
                "static_slower": int(sum(gap_intervals[:, 1] < 0))}
STEP_SUMMARY["resolved"] = STEP_SUMMARY["static_faster"] + STEP_SUMMARY["static_slower"]
{"step": STEP_SUMMARY}

# %% [markdown] lang="en"
# **The two steps' operators.** The folded cell below profiles the decode step at $P = {{run:step.prefix}}$ with
# each store ({{run:profile.steps}} steps each), lists every operator whose calls per step differ, and asserts
# the two counts the code fixes: the {{run:profile.cat_ops:.0f}} `aten::cat` calls of a `torch.cat` step (K and V
# in each layer, and the padding mask) become {{run:profile.copy_extra:.0f}} more `aten::copy_` calls in the
# static step (its in-place writes).

# %% [markdown] lang="zh"
# **两种解码步调用的算子**：下面折叠起来的单元格在 $P = {{run:step.prefix}}$ 上分别对两种存储对象的解码步做性能分析（各 {{run:profile.steps}} 步），列出每步调用次数不同的每一个算子，并断言由代码决定的两个次数：`torch.cat` 解码步中的 {{run:profile.cat_ops:.0f}} 次 `aten::cat`（每一层的 K 和 V，再加填充掩码）在静态缓存的解码步里换成了多出的 {{run:profile.copy_extra:.0f}} 次 `aten::copy_`（即原地写入）。

# %% tags=["hide-input"]
# [en] Kineto, the profiler's engine, prints a line at every start and stop below this log level.
# [zh] Kineto（性能分析器的底层引擎）在日志级别低于这个值时，每次启动和停止都会打印一行。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
PROFILE_STEPS = 10 if QUICK else 50


def profile_step(prefix_len) -> dict:
    # [en] Per store and per operator: the calls in one decode step (over PROFILE_STEPS steps, after one warm-up step).
    # [zh] 每种存储对象、每个算子在一个解码步中的调用次数（预热一步后，在 PROFILE_STEPS 个解码步上统计）。
    cat_store, static_store, restore = prepared_stores(prefix_len)
    token, one = STEP_STREAM[:, prefix_len:prefix_len + 1], torch.ones(1, 1, dtype=torch.bool)
    calls = {}
    for name, store in {"cat": cat_store, "static": static_store}.items():
        restore()
        store_forward(model, token, one, store)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(PROFILE_STEPS):
                restore()
                store_forward(model, token, one, store)
        counts = {}
        for event in prof.events():
            counts[event.key] = counts.get(event.key, 0) + 1
        calls[name] = {op: n / PROFILE_STEPS for op, n in counts.items()}
    return calls


PROFILE = profile_step(STEP_PREFIXES[-1])
differing = sorted(op for op in set(PROFILE["cat"]) | set(PROFILE["static"])
                   if PROFILE["cat"].get(op, 0) != PROFILE["static"].get(op, 0))
say_table([[f"`{op}`", *(f"{PROFILE[name].get(op, 0):.0f}" for name in ("cat", "static"))] for op in differing],
          en=["operator", "`torch.cat` step: calls", "static step: calls"],
          zh=["算子", "`torch.cat` 解码步：调用次数", "静态缓存解码步：调用次数"])
# [en] The counts the code predicts: no concatenation in a static step, one in-place copy in its place (K and V
# [en] in each layer, and the mask's new slot).
# [zh] 代码推算出的调用次数：静态缓存的解码步没有拼接，每次拼接都换成一次原地复制（每层的 K 和 V，以及掩码的新槽位）。
copies = {name: PROFILE[name].get("aten::copy_", 0) for name in PROFILE}
assert PROFILE["cat"]["aten::cat"] == 2 * cfg.layers + 1 and PROFILE["static"].get("aten::cat", 0) == 0
assert copies["static"] - copies["cat"] == 2 * cfg.layers + 1

# %% tags=["prose-values"]
{"profile": {"steps": PROFILE_STEPS, "cat_ops": PROFILE["cat"]["aten::cat"], "copy_extra": copies["static"] - copies["cat"]}}
