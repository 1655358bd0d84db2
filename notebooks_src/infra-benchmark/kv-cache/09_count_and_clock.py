# %% [markdown] lang="en"
# ### 9.2 The count next to the clock
#
# To compare paths with different numbers of calls, the figure divides: the two continuation windows
# by their 16 steps (milliseconds per step), the prefill by its $P$ tokens (milliseconds per prompt
# token). In the left panel, each marker is a p50 and the vertical line above it reaches the p95
# (blue squares: prefill per prompt token; orange circles: full recomputation per step; green triangles:
# cached continuation per step). The right panel shows how each continuation path's time per step grows
# with $P$ relative to the shortest prompt: measured (solid, with markers) and predicted by the
# multiply-add count of 8.1 averaged over the 16 steps of the window (dashed, same colour). In both
# panels only the vertical axis is logarithmic; the prompt-length axis is linear. The left panel shares
# one axis between two units, milliseconds per prompt token (prefill) and milliseconds per step (the
# continuations): read each curve along $P$, not one curve against another.
#
# The prefill curve divides one call's time by $P$. Two things move it, and the count says how much
# each can. The call's fixed overhead is shared by more tokens as $P$ grows, which pulls the time per
# token down. The work per token grows only slowly: from $P = {{run:clock.p_min}}$ to
# $P = {{run:clock.p_max}}$ the count of 8.1 goes from {{run:clock.prefill_macs_per_token_min:,.0f}} to
# {{run:clock.prefill_macs_per_token_max:,.0f}} multiply-adds per prompt token, a factor of
# {{run:clock.prefill_macs_per_token_growth:.2f}} (the attention term: in the dense score matrix of 8.1
# each prompt token scores all $P$ keys, the masked half included). A point that rises far more than that
# is not more arithmetic. The code names three other causes, and 9.1's last two columns test two of them
# row by row: page faults (the allocator at work in the window), a machine busy with other work during
# most of those rounds (a CPU share well below 100 %, which a median cannot filter out). The third is a
# size at which this CPU does the same arithmetic more slowly (larger tensors no longer fit in the core's
# caches): it is what remains when a row has neither faults nor waits.
# 9.4 times the prefill of a {{run:gen_time.prompt}}-token prompt once more, a second reading of that row:
# {{run:gen_time.cached_first_ms:.2f}} ms there against {{run:clock.prefill_ms_max:.2f}} ms in the table.

# %% [markdown] lang="zh"
# ### 9.2 把乘加次数与实测时间放在一起
#
# 为了比较调用次数不同的路径，图中做了换算：两个续写窗口的时间除以 16 步（得到每步毫秒数），预填充的时间除以 $P$ 个提示 token（得到每个提示 token 的毫秒数）。图中文字是英文，下面逐一说明。两幅图的横轴 prompt length P (tokens) 都是提示长度 $P$（token 数），总标题 CPU, 1 thread, fp32 意为“CPU、单线程、FP32”。
#
# 左图标题 time per step or per token, 15 rounds 意为“每步或每个 token 的耗时，15 轮测量”（`QUICK = True` 时为 3 轮）；纵轴 ms (marker p50, line up to p95) 意为“毫秒（标记点为 p50，竖线延伸到 p95）”。三条曲线的图例依次是：蓝色方块 prefill, per prompt token（预填充，按每个提示 token 计）；橙色圆点 full recomputation, per step（完整重算，按每步计）；绿色三角 cached continuation, per step（缓存续写，按每步计）。
#
# 右图标题 measured time vs counted multiply-adds 意为“实测时间与乘加计数的对照”，纵轴 per step, relative to P = 16 意为“每步的量，以 $P = 16$ 时为 1”。它画的是两条续写路径的每步耗时随 $P$ 的增长倍数（相对于最短提示）：图例 full: measured time 和 cached: measured time 是带标记的实线，即完整重算和缓存续写的实测时间；full: multiply-adds 和 cached: multiply-adds 是同色虚线，即按 8.1 的乘加次数在窗口 16 步上取平均得到的预测值。两幅图都只有纵轴是对数刻度，提示长度轴是线性的。左图的纵轴同时承载两种单位：预填充是每个提示 token 的毫秒数，两条续写路径是每步的毫秒数；所以每条曲线只沿 $P$ 方向读，不要拿两条曲线互相比较。
#
# 预填充那条曲线是一次调用的时间除以 $P$。有两个因素影响它，计数告诉我们各自能影响多少。随着 $P$ 增大，一次调用的固定开销由更多的 token 分摊，每个 token 的时间随之下降。每个 token 的工作量则增长得很慢：从 $P = {{run:clock.p_min}}$ 到 $P = {{run:clock.p_max}}$，按 8.1 的计数，每个提示 token 的乘加次数从 {{run:clock.prefill_macs_per_token_min:,.0f}} 变为 {{run:clock.prefill_macs_per_token_max:,.0f}}，只增长到原来的 {{run:clock.prefill_macs_per_token_growth:.2f}} 倍（这来自注意力项：在 8.1 的稠密分数矩阵中，每个提示 token 都要与全部 $P$ 个键计算分数，被遮住的一半也算在内）。如果某个点升高得远比这多，多出来的就不是计算量。按代码推算，还有三种可能，9.1 的最后两个计时列逐行检验了其中两种：缺页（窗口内分配器在工作）；在其中大多数轮次里机器正忙于别的工作（CPU 时间占比明显低于 100%，中位数滤不掉这种情况）。第三种是这颗 CPU 在这个规模上做同样的计算变慢了（更大的张量装不进核心的缓存）：一行既没有缺页也没有等待时，剩下的就是这种可能。9.4 会再对 {{run:gen_time.prompt}} 个 token 的提示做一次预填充计时，可以看作对表中那一行的第二次读数：那里是 {{run:gen_time.cached_first_ms:.2f}} 毫秒，表中是 {{run:clock.prefill_ms_max:.2f}} 毫秒。

# %% [markdown] lang="en"
# The next cell, folded, makes those divisions for every row of 9.1 and puts the count of 8.1 per step
# next to them; it shows nothing, the figure after it does.

# %% [markdown] lang="zh"
# 下一个单元格（已折叠）对 9.1 的每一行做上面的除法，并把 8.1 的每步计数放在旁边；它本身不输出内容，输出在它后面的图里。

# %% tags=["hide-input"]
def per_step_ms(row: dict, path: str) -> dict:
    divisor = row["prompt_tokens"] if path == "prefill" else CONTINUATION
    return {q: row[f"{path}_ms"][q] / divisor for q in ("p50", "p95")}


PER_STEP = [{
    "prompt_tokens": r["prompt_tokens"],
    "prefill_ms_per_token": per_step_ms(r, "prefill"),
    "full_ms_per_step": per_step_ms(r, "full"),
    "cached_ms_per_step": per_step_ms(r, "cached"),
    "model_full_macs_per_step": window_macs(r["prompt_tokens"], "full"),
    "model_cached_macs_per_step": window_macs(r["prompt_tokens"], "cached"),
} for r in TIMING_ROWS]

# %% [markdown] lang="en"
# The next cell draws the figure described above and prints its numbers as a table; its plotting code is
# folded.

# %% [markdown] lang="zh"
# 下一个单元格画出上面说明的图，并把图中的数字列成表格；绘图代码已折叠。

# %% tags=["hide-input"]
from matplotlib.ticker import NullFormatter, ScalarFormatter

fig, (ax_time, ax_growth) = plt.subplots(1, 2, figsize=(11, 4))
lengths = [r["prompt_tokens"] for r in PER_STEP]
COLORS = {"prefill": "tab:blue", "full": "tab:orange", "cached": "tab:green"}
series = {"prefill": ("prefill_ms_per_token", "prefill, per prompt token", "s"),
          "full": ("full_ms_per_step", "full recomputation, per step", "o"),
          "cached": ("cached_ms_per_step", "cached continuation, per step", "^")}
for path, (key, label, marker) in series.items():
    p50 = np.array([r[key]["p50"] for r in PER_STEP])
    p95 = np.array([r[key]["p95"] for r in PER_STEP])
    ax_time.plot(lengths, p50, marker=marker, color=COLORS[path], label=label)
    ax_time.vlines(lengths, p50, p95, color=COLORS[path], alpha=0.6)
ax_time.set_xlabel("prompt length P (tokens)")
ax_time.set_ylabel("ms (marker p50, line up to p95)")
ax_time.set_title(f"time per step or per token, {REPEATS} rounds", fontsize=10)
for path, marker in (("full", "o"), ("cached", "^")):
    measured = np.array([r[f"{path}_ms_per_step"]["p50"] for r in PER_STEP])
    modeled = np.array([r[f"model_{path}_macs_per_step"] for r in PER_STEP])
    ax_growth.plot(lengths, measured / measured[0], marker=marker, color=COLORS[path], label=f"{path}: measured time")
    ax_growth.plot(lengths, modeled / modeled[0], linestyle="--", color=COLORS[path], label=f"{path}: multiply-adds")
ax_growth.set_xlabel("prompt length P (tokens)")
ax_growth.set_ylabel(f"per step, relative to P = {lengths[0]}")
ax_growth.set_title("measured time vs counted multiply-adds", fontsize=10)
for ax in (ax_time, ax_growth):
    ax.set_xticks(lengths)
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
ax_growth.yaxis.set_major_formatter(ScalarFormatter())
ax_growth.yaxis.set_minor_formatter(NullFormatter())
fig.suptitle("CPU, 1 thread, fp32", fontsize=10)
fig.tight_layout()
TIMING_PNG = OUT / "timing.png"
fig.savefig(TIMING_PNG, dpi=120)
plt.show()

say_table(
    [[str(r["prompt_tokens"]), f"{r['model_full_macs_per_step']:,.0f}", f"{r['full_ms_per_step']['p50']:.3f}",
      f"{r['model_cached_macs_per_step']:,.0f}", f"{r['cached_ms_per_step']['p50']:.3f}",
      f"{r['prefill_ms_per_token']['p50']:.4f}"] for r in PER_STEP],
    en=["prompt $P$", "full: multiply-adds per step", "full: ms per step (p50)", "cached: multiply-adds per step",
        "cached: ms per step (p50)", "prefill: ms per prompt token (p50)"],
    zh=["提示长度 $P$", "完整重算：每步乘加次数", "完整重算：每步耗时（毫秒，p50）", "缓存续写：每步乘加次数",
        "缓存续写：每步耗时（毫秒，p50）", "预填充：每个提示 token 的耗时（毫秒，p50）"],
)

# %% [markdown] lang="en"
# The right panel in numbers. The next cell divides each row's time per step, and each row's count per
# step, by those of the shortest prompt, and prints both growths side by side for every prompt length,
# with the window's page faults and CPU share from 9.1. Reading every row, not only the two ends, shows the shape: where
# the measured growth keeps below the count (fixed per-call costs that do not grow with $P$) and where it
# jumps above it. The same cell, folded, gathers the other numbers the text below quotes.

# %% [markdown] lang="zh"
# 用数字读右图。下一个单元格把每一行的每步耗时和每步计数都除以最短提示的相应值，对每种提示长度把两种增长倍数并排列出，并附上 9.1 中该窗口的缺页次数和 CPU 时间占比。逐行去读，而不是只看两端，才能看出曲线的形状：实测增长在哪里低于计数（每次调用的固定开销不随 $P$ 增长），又在哪里跳到计数之上。这个单元格（已折叠）同时算出后文引用的其他数字。

# %% tags=["hide-input"]
first, last = PER_STEP[0], PER_STEP[-1]
row16 = next(r for r in TIMING_ROWS if r["prompt_tokens"] == 16)
# [en] The fastest prefill of the table, in multiply-adds per millisecond (a slow round can only lower a rate).
# [zh] 表中最快的预填充，单位是每毫秒的乘加次数（偏慢的轮次只会拉低速度）。
prefill_rate = max(sum(full_step_macs(cfg, r["prompt_tokens"]).values()) / r["prefill_ms"]["p50"] for r in TIMING_ROWS)
arithmetic_shares = [r["model_cached_macs_per_step"] / prefill_rate / r["cached_ms_per_step"]["p50"] for r in PER_STEP]
prefill_macs_per_token = [sum(full_step_macs(cfg, r["prompt_tokens"]).values()) / r["prompt_tokens"] for r in PER_STEP]
TIMING_SUMMARY = {
    "p_min": int(first["prompt_tokens"]),
    "p_max": int(last["prompt_tokens"]),
    "full_ms_per_step_min": float(first["full_ms_per_step"]["p50"]),
    "full_ms_per_step_max": float(last["full_ms_per_step"]["p50"]),
    "cached_ms_per_step_min": float(first["cached_ms_per_step"]["p50"]),
    "cached_ms_per_step_max": float(last["cached_ms_per_step"]["p50"]),
    "model_full_growth": float(last["model_full_macs_per_step"] / first["model_full_macs_per_step"]),
    "measured_full_growth": float(last["full_ms_per_step"]["p50"] / first["full_ms_per_step"]["p50"]),
    "model_cached_growth": float(last["model_cached_macs_per_step"] / first["model_cached_macs_per_step"]),
    "measured_cached_growth": float(last["cached_ms_per_step"]["p50"] / first["cached_ms_per_step"]["p50"]),
    "prefill16_ms": float(row16["prefill_ms"]["p50"]),
    "prefill_ms_max": float(TIMING_ROWS[-1]["prefill_ms"]["p50"]),
    "cached16_ms": float(row16["cached_ms"]["p50"]),
    "cached16_over_prefill16": float(row16["cached_ms"]["p50"] / row16["prefill_ms"]["p50"]),
    "cached16_extra_macs": CONTINUATION * window_macs(16, "cached") / sum(full_step_macs(cfg, 16).values()) - 1,
    "prefill_macs_per_ms": float(prefill_rate),
    "cached_step_arithmetic_share_lo": float(min(arithmetic_shares)),
    "cached_step_arithmetic_share_hi": float(max(arithmetic_shares)),
    "prefill_macs_per_token_min": float(prefill_macs_per_token[0]),
    "prefill_macs_per_token_max": float(prefill_macs_per_token[-1]),
    "prefill_macs_per_token_growth": float(prefill_macs_per_token[-1] / prefill_macs_per_token[0]),
}
say_table(
    [[str(r["prompt_tokens"]),
      f"{r['model_full_macs_per_step'] / first['model_full_macs_per_step']:.2f}",
      f"{r['full_ms_per_step']['p50'] / first['full_ms_per_step']['p50']:.2f}",
      f"{r['model_cached_macs_per_step'] / first['model_cached_macs_per_step']:.2f}",
      f"{r['cached_ms_per_step']['p50'] / first['cached_ms_per_step']['p50']:.2f}",
      " / ".join("–" if row[f"{path}_faults"] is None else f"{row[f'{path}_faults']:,}" for path in ("full", "cached")),
      " / ".join(f"{row[f'{path}_cpu_share']:.0%}" for path in ("full", "cached"))]
     for r, row in zip(PER_STEP, TIMING_ROWS)],
    en=["prompt $P$", "full: count growth", "full: measured growth", "cached: count growth",
        "cached: measured growth", "page faults per window, full / cached (9.1)",
        "CPU time / clock time, full / cached (9.1)"],
    zh=["提示长度 $P$", "完整重算：计数增长倍数", "完整重算：实测增长倍数", "缓存续写：计数增长倍数",
        "缓存续写：实测增长倍数", "每个窗口的缺页次数，完整重算 / 缓存续写（9.1）",
        "CPU 时间 / 挂钟时间，完整重算 / 缓存续写（9.1）"],
)

# %% tags=["prose-values"]
{"clock": TIMING_SUMMARY}

# %% [markdown] lang="en"
# **What this run says** (every number below is this run's). From $P = {{run:clock.p_min}}$ to $P = {{run:clock.p_max}}$, the count predicts
# the full path's work per step to grow {{run:clock.model_full_growth:.1f}}-fold; its measured time per
# step changed by a factor of {{run:clock.measured_full_growth:.1f}}, from {{run:clock.full_ms_per_step_min:.3f}}
# to {{run:clock.full_ms_per_step_max:.3f}} ms. For the cached step the count predicts growth by a factor of
# {{run:clock.model_cached_growth:.2f}}, the attention term of 8.1; the measured time per step changed
# by a factor of {{run:clock.measured_cached_growth:.2f}} ({{run:clock.cached_ms_per_step_min:.3f}} ms,
# then {{run:clock.cached_ms_per_step_max:.3f}} ms). The measured factors move from run to run, and are
# reported, not asserted. Two endpoints hide the shape, so read the growth table row by row. Where a
# path's measured growth stays below its count, fixed per-call costs that do not grow with $P$ make up
# much of the step (next paragraph). Where it jumps above the count from one row to the next, the count
# does not explain the jump. Two things the count leaves out can: that row's page faults (9.1), and the
# elementwise passes over the $[H, T, T]$ score matrix that the optional 9.3 times, which grow with $T^2$ and
# do no multiply-adds. This run does not separate the two. An endpoint factor taken at such a row inherits
# its extra time.
#
# On this run, 16 cached one-token calls took {{run:clock.cached16_ms:.3f}} ms,
# {{run:clock.cached16_over_prefill16:.1f}} times the {{run:clock.prefill16_ms:.3f}} ms of one 16-token
# prefill call, although both push 16 positions through the network and their counts differ by only
# {{run:clock.cached16_extra_macs:.1%}}. The count predicts no such gap, so it is not arithmetic; the code
# shows what it is, per-call overhead: every
# call of the model pays for the Python code of its modules, the dispatch of each operator and small
# allocations (and, on the cached path, the copy in `torch.cat`) whatever the size of its inputs, and
# the continuation pays it 16 times where the prefill pays it once (the optional 9.3 counts the operator
# calls). At the rate of the fastest prefill of the table, {{run:clock.prefill_macs_per_ms:,.0f}}
# multiply-adds per millisecond, a cached step's multiply-adds would take between
# {{run:clock.cached_step_arithmetic_share_lo:.0%}} and {{run:clock.cached_step_arithmetic_share_hi:.0%}}
# of the measured step, across the prompt lengths. That estimate is a lower bound, because a decode step's
# products are slower per multiply-add than a prefill's: they have a single row, matrix-vector products
# that read every weight and every cached key and value for a single multiply-add each, where a prefill
# reuses each weight it loads for all its rows. On real
# hardware, with a real model's width and context (8.3), the per-call overhead shrinks next to the work,
# and at small batch sizes the decode step becomes **memory-bandwidth-bound**: its time is set by how fast the weights and the
# whole K/V cache can be read, not by how many multiply-adds the processor can do. That is a general
# remark, not something this CPU run measures.

# %% [markdown] lang="zh"
# **这次运行说明了什么**（下面的数字都只属于这次运行）：从 $P = {{run:clock.p_min}}$ 到 $P = {{run:clock.p_max}}$，乘加计数预测完整路径每步的工作量增长到原来的 {{run:clock.model_full_growth:.1f}} 倍；实测每步时间则变为原来的 {{run:clock.measured_full_growth:.1f}} 倍，从 {{run:clock.full_ms_per_step_min:.3f}} 毫秒变为 {{run:clock.full_ms_per_step_max:.3f}} 毫秒。对缓存路径的一步，计数预测的增长倍数是 {{run:clock.model_cached_growth:.2f}}，来自 8.1 中的注意力项；实测每步时间则变为原来的 {{run:clock.measured_cached_growth:.2f}} 倍（从 {{run:clock.cached_ms_per_step_min:.3f}} 毫秒变为 {{run:clock.cached_ms_per_step_max:.3f}} 毫秒）。实测的倍数每次运行都会有所不同，所以只报告，不做断言。只看两端会掩盖曲线的形状，所以要逐行读增长倍数表。某条路径的实测增长低于计数时，说明这一步的时间有很大一部分是不随 $P$ 增长的每次调用固定开销（见下一段）。如果实测增长从某一行起跳到计数之上，这一跳就不是计数能解释的。计数漏掉的两样东西可以解释它：那一行的缺页（见 9.1），以及可选的 9.3 计时的、逐元素扫过 $[H, T, T]$ 分数矩阵的几遍运算，它们随 $T^2$ 增长，却不做乘加。这次运行没有把两者分开。在这样的行上取端点算出的倍数，也就带上了这部分额外的时间。
#
# 在这次运行中，16 次单 token 的缓存调用共用了 {{run:clock.cached16_ms:.3f}} 毫秒，是一次 16 个 token 的预填充调用（{{run:clock.prefill16_ms:.3f}} 毫秒）的 {{run:clock.cached16_over_prefill16:.1f}} 倍；可是两者都让 16 个位置经过了网络，乘加次数也只差 {{run:clock.cached16_extra_macs:.1%}}。计数预测不到这样的差距，所以它不来自计算；看代码就知道，它来自每次调用的固定开销。模型每被调用一次，不论输入多大，都要执行各个模块的 Python 代码、分派每一个算子、做一些零碎的内存分配（缓存路径还有 `torch.cat` 中的复制）。缓存续写要付 16 次这样的开销，预填充只付一次（可选的 9.3 会数一数算子调用的次数）。按表中最快的预填充的速度，即每毫秒 {{run:clock.prefill_macs_per_ms:,.0f}} 次乘加，缓存路径一步的乘加只占实测每步时间的 {{run:clock.cached_step_arithmetic_share_lo:.0%}} 到 {{run:clock.cached_step_arithmetic_share_hi:.0%}}（随提示长度而不同）。这个比例只是下限：解码一步的乘法，平均到每次乘加上比预填充慢。它做的是只有一行的矩阵向量乘法，每个权重、每个缓存的键和值读进来只用于一次乘加；预填充则把读进来的每个权重用于所有行。在真实硬件上，换成真实模型的宽度和上下文长度（见 8.3），每次调用的固定开销相对于工作量就微不足道了，批量较小时，解码一步就会**受限于内存带宽**（memory-bandwidth-bound）：它的耗时取决于读完全部权重和整个 K/V 缓存要多快，而不是处理器每秒能做多少次乘加。这是一般性的说明，并不是这次 CPU 运行测出来的。
