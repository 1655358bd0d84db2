# %% [markdown] lang="en"
# ### 9.2 Why the cache wins by less than the work ratio
#
# The figure divides each continuation window's CPU time by its 16 steps. Left: CPU milliseconds per step (marker:
# fastest round; vertical line: from the fastest to the slowest round; short dash: median (p50); orange circles:
# full recomputation, green triangles: cached continuation).
# Right: how each path's time per step grows with $P$ relative to the shortest prompt, measured
# from the fastest rounds (solid), and predicted by the multiply-add count of 8.1 (dashed, same colour). Only the vertical axes are
# logarithmic. The folded cell below makes the divisions; the next one draws the figure and prints its
# numbers.

# %% [markdown] lang="zh"
# ### 9.2 缓存的优势为什么远小于工作量之比
#
# 图中把每个续写窗口的 CPU 时间除以 16 步。图中文字是英文：两幅图的横轴 prompt length P (tokens) 是提示长度 $P$（token 数），总标题 CPU, 1 thread, fp32 意为“CPU、单线程、FP32”。左图（CPU time per step, {{run:takeaways.repeats}} rounds，“每步的 CPU 时间，{{run:takeaways.repeats}} 轮测量”）的纵轴 CPU ms (marker min, line min to max, dash p50) 意为“CPU 毫秒（标记点为最快的一轮，竖线从最快的一轮延伸到最慢的一轮，短横线为中位数）”；橙色圆点 full recomputation, per step 是完整重算，绿色三角 cached continuation, per step 是缓存续写。右图（measured time vs counted multiply-adds，“实测时间与乘加计数的对照”）的纵轴 per step, relative to P = 16 意为“每步的量，以 $P = 16$ 时为 1”：带标记的实线（measured CPU time, fastest round）是按最快一轮实测的增长倍数，同色虚线（multiply-adds）是按 8.1 的乘加计数预测的增长倍数。两幅图都只有纵轴是对数刻度。下面折叠的单元格做除法，再下一个单元格画图并列出图中的数字。

# %% tags=["hide-input"]
def per_step_ms(row: dict, path: str) -> dict:
    divisor = row["prompt_tokens"] if path == "prefill" else CONTINUATION
    return {q: row[f"{path}_cpu_ms"][q] / divisor for q in ("min", "p50", "p95", "max")}


PER_STEP = [{
    "prompt_tokens": r["prompt_tokens"],
    "prefill_ms_per_token": per_step_ms(r, "prefill"),
    "full_ms_per_step": per_step_ms(r, "full"),
    "cached_ms_per_step": per_step_ms(r, "cached"),
    "model_full_macs_per_step": window_macs(r["prompt_tokens"], "full"),
    "model_cached_macs_per_step": window_macs(r["prompt_tokens"], "cached"),
} for r in TIMING_ROWS]

# %% [markdown] lang="en"
# The figure and its numbers; the plotting code is folded.

# %% [markdown] lang="zh"
# 下面画图并列出图中的数字；绘图代码已折叠。

# %% tags=["hide-input"]
from matplotlib.ticker import FormatStrFormatter, FuncFormatter, NullFormatter, ScalarFormatter

fig, (ax_time, ax_growth) = plt.subplots(1, 2, figsize=(11, 4))
lengths = [r["prompt_tokens"] for r in PER_STEP]
COLORS = {"prefill": "tab:blue", "full": "tab:orange", "cached": "tab:green"}
series = {"full": ("full_ms_per_step", "full recomputation, per step", "o"),
          "cached": ("cached_ms_per_step", "cached continuation, per step", "^")}
for path, (key, label, marker) in series.items():
    best, p50, worst = (np.array([r[key][q] for r in PER_STEP]) for q in ("min", "p50", "max"))
    ax_time.plot(lengths, best, marker=marker, color=COLORS[path], label=label)
    ax_time.vlines(lengths, best, worst, color=COLORS[path], alpha=0.6)
    ax_time.plot(lengths, p50, linestyle="none", marker="_", markersize=10, color=COLORS[path])
ax_time.set_xlabel("prompt length P (tokens)")
ax_time.set_ylabel("CPU ms (marker min, line min to max, dash p50)")
ax_time.set_title(f"CPU time per step, {REPEATS} rounds", fontsize=10)
for path, marker in (("full", "o"), ("cached", "^")):
    measured = np.array([r[f"{path}_ms_per_step"]["min"] for r in PER_STEP])
    modeled = np.array([r[f"model_{path}_macs_per_step"] for r in PER_STEP])
    ax_growth.plot(lengths, measured / measured[0], marker=marker, color=COLORS[path], label=f"{path}: measured CPU time, fastest round")
    ax_growth.plot(lengths, modeled / modeled[0], linestyle="--", color=COLORS[path], label=f"{path}: multiply-adds")
ax_growth.set_xlabel("prompt length P (tokens)")
ax_growth.set_ylabel(f"per step, relative to P = {lengths[0]}")
ax_growth.set_title("measured time vs counted multiply-adds", fontsize=10)
for ax in (ax_time, ax_growth):
    ax.set_xticks(lengths)
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
# [en] Plain numbers on the log axes ("0.2", not "2x10^-1"); between powers of ten only 2 and 5 are labelled.
# [zh] 对数坐标轴上用普通数字标注（写作“0.2”，而不是“2x10^-1”）；相邻的 10 的幂之间只标 2 和 5。
ax_time.yaxis.set_major_formatter(FormatStrFormatter("%g"))
ax_time.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}".lstrip("0.")[:1] in "25" else ""))
ax_growth.yaxis.set_major_formatter(ScalarFormatter())
ax_growth.yaxis.set_minor_formatter(NullFormatter())
fig.suptitle("CPU, 1 thread, fp32", fontsize=10)
fig.tight_layout()
TIMING_PNG = OUT / "timing.png"
fig.savefig(TIMING_PNG, dpi=120)
plt.show()

say_table(
    [[str(r["prompt_tokens"]), f"{r['model_full_macs_per_step']:,.0f}",
      f"{r['full_ms_per_step']['min']:.3f} / {r['full_ms_per_step']['p50']:.3f}",
      f"{r['model_cached_macs_per_step']:,.0f}", f"{r['cached_ms_per_step']['min']:.3f} / {r['cached_ms_per_step']['p50']:.3f}",
      f"{r['prefill_ms_per_token']['min']:.4f} / {r['prefill_ms_per_token']['p50']:.4f}"] for r in PER_STEP],
    en=["prompt $P$", "full: multiply-adds per step", "full: CPU ms per step (min / p50)", "cached: multiply-adds per step",
        "cached: CPU ms per step (min / p50)", "prefill: CPU ms per prompt token (min / p50)"],
    zh=["提示长度 $P$", "完整重算：每步乘加次数", "完整重算：每步 CPU 时间（毫秒，最快 / 中位数）", "缓存续写：每步乘加次数",
        "缓存续写：每步 CPU 时间（毫秒，最快 / 中位数）", "预填充：每个提示 token 的 CPU 时间（毫秒，最快 / 中位数）"],
)


# %% [markdown] lang="en"
# The right panel in numbers, row by row (folded cell).

# %% [markdown] lang="zh"
# 用数字逐行读右图（单元格已折叠）。

# %% tags=["hide-input"]
first = PER_STEP[0]
say_table(
    [[str(r["prompt_tokens"]),
      f"{r['model_full_macs_per_step'] / first['model_full_macs_per_step']:.2f}",
      f"{r['full_ms_per_step']['min'] / first['full_ms_per_step']['min']:.2f} / "
      f"{r['full_ms_per_step']['p50'] / first['full_ms_per_step']['p50']:.2f}",
      f"{r['model_cached_macs_per_step'] / first['model_cached_macs_per_step']:.2f}",
      f"{r['cached_ms_per_step']['min'] / first['cached_ms_per_step']['min']:.2f} / "
      f"{r['cached_ms_per_step']['p50'] / first['cached_ms_per_step']['p50']:.2f}"]
     for r in PER_STEP],
    en=["prompt $P$", "full: count growth", "full: CPU-time growth (min / p50)", "cached: count growth",
        "cached: CPU-time growth (min / p50)"],
    zh=["提示长度 $P$", "完整重算：计数增长倍数", "完整重算：CPU 时间增长倍数（最快 / 中位数）", "缓存续写：计数增长倍数",
        "缓存续写：CPU 时间增长倍数（最快 / 中位数）"],
)

# %% tags=["prose-values"]
last = PER_STEP[-1]
row16 = next(r for r in TIMING_ROWS if r["prompt_tokens"] == 16)
# [en] The highest prefill throughput of the table (fastest rounds), in multiply-adds per millisecond, and its P.
# [zh] 表中预填充的最高吞吐量（取最快的一轮），单位是每毫秒的乘加次数，以及它所在的 P。
prefill_rate, prefill_rate_at = max((sum(full_step_macs(cfg, r["prompt_tokens"]).values()) / r["prefill_cpu_ms"]["min"],
                                     r["prompt_tokens"]) for r in TIMING_ROWS)
arithmetic_shares = [r["model_cached_macs_per_step"] / prefill_rate / r["cached_ms_per_step"]["min"] for r in PER_STEP]
prefill_macs_per_token = [sum(full_step_macs(cfg, r["prompt_tokens"]).values()) / r["prompt_tokens"] for r in PER_STEP]
TIMING_SUMMARY = {
    "p_min": int(first["prompt_tokens"]),
    "p_max": int(last["prompt_tokens"]),
    "full_ms_per_step_min": float(first["full_ms_per_step"]["min"]),
    "full_ms_per_step_max": float(last["full_ms_per_step"]["min"]),
    "cached_ms_per_step_min": float(first["cached_ms_per_step"]["min"]),
    "cached_ms_per_step_max": float(last["cached_ms_per_step"]["min"]),
    "model_full_growth": float(last["model_full_macs_per_step"] / first["model_full_macs_per_step"]),
    "measured_full_growth": float(last["full_ms_per_step"]["min"] / first["full_ms_per_step"]["min"]),
    "measured_full_growth_p50": float(last["full_ms_per_step"]["p50"] / first["full_ms_per_step"]["p50"]),
    "model_cached_growth": float(last["model_cached_macs_per_step"] / first["model_cached_macs_per_step"]),
    "measured_cached_growth": float(last["cached_ms_per_step"]["min"] / first["cached_ms_per_step"]["min"]),
    "measured_cached_growth_p50": float(last["cached_ms_per_step"]["p50"] / first["cached_ms_per_step"]["p50"]),
    "prefill16_ms": float(row16["prefill_cpu_ms"]["min"]),
    "prefill_ms_max": float(TIMING_ROWS[-1]["prefill_cpu_ms"]["min"]),
    "cached16_ms": float(row16["cached_cpu_ms"]["min"]),
    "cached16_over_prefill16": float(row16["cached_cpu_ms"]["min"] / row16["prefill_cpu_ms"]["min"]),
    "cached16_extra_macs": CONTINUATION * window_macs(16, "cached") / sum(full_step_macs(cfg, 16).values()) - 1,
    "prefill_macs_per_ms": float(prefill_rate),
    "cached_step_arithmetic_share_lo": float(min(arithmetic_shares)),
    "cached_step_arithmetic_share_hi": float(max(arithmetic_shares)),
    "prefill_macs_per_token_min": float(prefill_macs_per_token[0]),
    "prefill_macs_per_token_max": float(prefill_macs_per_token[-1]),
    "prefill_macs_per_token_growth": float(prefill_macs_per_token[-1] / prefill_macs_per_token[0]),
}
{"clock": {**TIMING_SUMMARY, "prefill_rate_at": prefill_rate_at, "prefill_mmacs_per_ms": prefill_rate / 1e6, "prefill_wan_macs_per_ms": prefill_rate / 1e4,
           # [en] The same rate in units of 10^4 (wan), rounded to whole millions like the English prose.
           # [zh] 同一速度，以“万”为单位，像英文正文一样取整到百万。
           "prefill_wan_macs_per_ms_rounded": round(prefill_rate / 1e6) * 100}}


# %% [markdown] lang="en"
# **What this run says.** Compare two ways of pushing 16 positions through the network. Sixteen cached
# one-token calls took {{run:clock.cached16_ms:.3f}} ms of CPU time (fastest rounds here and below),
# {{run:clock.cached16_over_prefill16:.1f}} times the {{run:clock.prefill16_ms:.3f}} ms of one 16-token prefill
# call, although their multiply-add counts differ by only {{run:clock.cached16_extra_macs:.1%}}. That gap is
# not arithmetic but **per-call overhead**: every call pays for the Python code of its modules, the dispatch
# of each operator and small allocations whatever the size of its inputs, and 16 calls pay it 16 times (the
# cached path's `torch.cat` copy is the exception: it grows with the cache, a memory cost; 9.5 shows its share). At 9.1's highest prefill throughput
# ($P = {{run:clock.prefill_rate_at}}$, fastest round: about {{run:clock.prefill_mmacs_per_ms:.0f}} million multiply-adds per
# millisecond), a cached step's multiply-adds
# would fill only {{run:clock.cached_step_arithmetic_share_lo:.1%}} to
# {{run:clock.cached_step_arithmetic_share_hi:.1%}} of its measured time (a rough estimate: that rate includes
# the prefill's own overhead). Both continuation windows pay the same 16 calls' overhead and only the full
# one also does the large work, so the measured factor is far below the work ratio.
#
# In the right panel the same overhead pulls the growth with $P$ toward 1×, while costs the count leaves out,
# such as page faults when large score matrices are allocated (9.4 counts them per length), push it up:
# from $P = {{run:clock.p_min}}$ to
# $P = {{run:clock.p_max}}$ the count of a full step is multiplied by {{run:clock.model_full_growth:.1f}} and its CPU
# time was multiplied by {{run:clock.measured_full_growth:.1f}}; a cached step's count by
# {{run:clock.model_cached_growth:.2f}}, its CPU time by {{run:clock.measured_cached_growth:.2f}}. A cached step
# does more work at every longer prompt, so wherever its time falls below the one at $P = {{run:clock.p_min}}$, the
# run is the cause, not the work (9.4 says what can bend these growths on one run).
# With a real model's width and context (8.3) the overhead shrinks next to the work, and at small batch a
# decode step becomes **memory-bandwidth-bound**, its time set by how fast the weights and the K/V cache can
# be read; that is a general remark, not measured here.

# %% [markdown] lang="zh"
# **这次运行说明了什么**：比较让 16 个位置经过网络的两种做法。16 次单 token 的缓存调用共用了 {{run:clock.cached16_ms:.3f}} 毫秒 CPU 时间（这里和下文都取最快的一轮），是一次 16 个 token 的预填充调用（{{run:clock.prefill16_ms:.3f}} 毫秒）的 {{run:clock.cached16_over_prefill16:.1f}} 倍，可两者的乘加次数只差 {{run:clock.cached16_extra_macs:.1%}}。这个差距不来自计算，而来自**每次调用的固定开销**：不论输入多大，每次调用都要执行各个模块的 Python 代码、分派每一个算子、做一些零碎的内存分配，调用 16 次就要付 16 次（缓存路径上 `torch.cat` 的复制是例外：它随缓存变长而增长，属于内存开销，它占多少见 9.5）。按 9.1 中预填充的最高吞吐量（$P = {{run:clock.prefill_rate_at}}$，取最快的一轮：每毫秒约 {{run:clock.prefill_wan_macs_per_ms_rounded:,.0f}} 万次乘加），缓存路径一步的乘加只需要实测每步时间的 {{run:clock.cached_step_arithmetic_share_lo:.1%}} 到 {{run:clock.cached_step_arithmetic_share_hi:.1%}}（粗略估计：这个速度里含有预填充自己的调用开销）。两个续写窗口付出同样 16 次调用的开销，只有完整重算还要做大量计算，所以实测的倍数远低于工作量之比。
#
# 在右图中，同样的开销会把耗时随 $P$ 的增长拉向 1 倍，而计数没有包括的代价（例如分配很大的分数矩阵时发生的缺页，9.4 按长度给出了次数）会把它推高：从 $P = {{run:clock.p_min}}$ 到 $P = {{run:clock.p_max}}$，完整重算一步的计数变为原来的 {{run:clock.model_full_growth:.1f}} 倍，实测 CPU 时间变为 {{run:clock.measured_full_growth:.1f}} 倍；缓存路径一步的计数变为 {{run:clock.model_cached_growth:.2f}} 倍，CPU 时间变为 {{run:clock.measured_cached_growth:.2f}} 倍。提示越长，缓存路径一步的工作量越大，所以只要它在某个更长的提示上的耗时低于 $P = {{run:clock.p_min}}$ 时的耗时，原因就在这次运行本身，而不在工作量（一次运行中有哪些因素会改变这些增长，见 9.4）。换成真实模型的宽度和上下文长度（见 8.3），固定开销相对于工作量就微不足道了；batch 较小时，解码一步会**受限于内存带宽**（memory-bandwidth-bound），耗时取决于读完权重和 K/V 缓存要多快。这是一般性的说明，并不是这里测出来的。
