# %% [markdown] lang="en"
# ### 9.4 Optional appendix: measurement notes
#
# *Optional. This subsection and 9.5 show how the timings of 9.1 were taken and what can disturb them;
# nothing after them depends on them. On a first read, skip to section 10.*
#
# The table gives, for each window of 9.1, its p95 next to its p50, how many measured rounds took more
# than 1.5 times the p50 ("slow rounds"), its minor page faults and its CPU share (p50 of the rounds).
#
# * **Page faults.** Every call allocates its temporary tensors and frees them on return; the largest grow
#   with the sequence (one layer's $[H, T, T]$ score matrix is 1 MiB at $T = 256$ in FP32). When the C
#   library's allocator (glibc on Linux) hands a large freed block back to the operating system, the next
#   call that needs it gets fresh pages, and the first write to each 4 KiB page is a *minor page fault*:
#   the system stops the program and maps in a zeroed page. Whether that happens depends on the
#   allocator's thresholds, not on the model, so it can hit one prompt length or one path and change from
#   run to run. Read with `resource.getrusage` around each window ("–" where the `resource` module does
#   not exist, as on Windows).
# * **CPU share.** `time.process_time_ns` over `perf_counter_ns` for the window. Near 100 % the process had
#   the core for the whole window; well below, it waited while the core ran another program, and the
#   window measured that wait too.
# * **p95.** Over 15 samples (3 with `QUICK = True`), NumPy's linear interpolation puts the p95 between
#   the second-largest and the largest sample, so one or two slow rounds decide it: far too few samples to
#   estimate a service's tail latency. The median shrugs such rounds off.
#
# On this run the windows took {{run:notes.faults_min:,}} to {{run:notes.faults_max:,}} minor page faults
# and received {{run:notes.cpu_share_min:.0%}} to {{run:notes.cpu_share_max:.0%}} of their clock time as CPU
# time; the cached window's p95 reached {{run:notes.cached_p95_over_p50:.2f}} times its p50 (at
# $P = {{run:notes.cached_p95_over_p50_at}}$).

# %% [markdown] lang="zh"
# ### 9.4 可选附录：测量说明
#
# *可选内容。本小节和 9.5 说明 9.1 的时间是怎样测出来的，以及哪些因素会干扰它；后面的内容都不依赖它们。初读时可以直接跳到第 10 节。*
#
# 下表对 9.1 的每个窗口给出：p50 旁边的 p95；正式测量中耗时超过 p50 的 1.5 倍的轮数（“慢轮次”）；次缺页次数和 CPU 时间占比（各轮的中位数）。
#
# * **缺页**：每次调用都为临时张量分配内存，返回时再释放；其中最大的张量随序列变长（一层的 $[H, T, T]$ 分数矩阵在 $T = 256$、FP32 时就有 1 MiB）。C 库的内存分配器（Linux 上是 glibc）把释放的一大块内存交还给操作系统后，下一次需要这么多内存的调用就会拿到新的内存页，而对每个 4 KiB 内存页的第一次写入都会引发一次*次缺页*（minor page fault）：操作系统暂停程序，映射进一个清零的内存页。这种情况是否发生取决于分配器的阈值，与模型无关，所以它可能只落在某个提示长度或某条路径上，每次运行也可能不同。缺页次数在每个窗口前后用 `resource.getrusage` 读取（没有 `resource` 模块的系统上显示“–”，例如 Windows）。
# * **CPU 时间占比**：窗口期间的 `time.process_time_ns` 除以 `perf_counter_ns`。接近 100% 时，进程在整个窗口内都占着核心；明显低于 100% 时，进程有一段时间在等核心运行别的程序，窗口的耗时也把这段等待算了进去。
# * **p95**：对 15 个样本（`QUICK = True` 时为 3 个），NumPy 的线性插值让 p95 落在第二大和最大的样本之间，所以由一两轮慢的测量决定；这么少的样本远不足以估计一个服务的尾延迟。中位数则几乎不受这些轮次影响。
#
# 这次运行中，各窗口的次缺页次数在 {{run:notes.faults_min:,}} 到 {{run:notes.faults_max:,}} 之间，得到的 CPU 时间占挂钟时间的 {{run:notes.cpu_share_min:.0%}} 到 {{run:notes.cpu_share_max:.0%}}；缓存续写窗口的 p95 最高达到其 p50 的 {{run:notes.cached_p95_over_p50:.2f}} 倍（$P = {{run:notes.cached_p95_over_p50_at}}$ 时）。

# %% tags=["hide-input"]
say_table(
    [[str(r["prompt_tokens"])] + [f"{r[f'{path}_ms']['p50']:.3f} / {r[f'{path}_ms']['p95']:.3f}" for path in PATHS]
     + [" / ".join(str(slow_rounds(r[f"{path}_ms"])) for path in PATHS),
        " / ".join("–" if r[f"{path}_faults"] is None else f"{r[f'{path}_faults']:,}" for path in PATHS),
        " / ".join(f"{r[f'{path}_cpu_share']:.0%}" for path in PATHS)]
     for r in TIMING_ROWS],
    en=["prompt $P$", "prefill, ms p50 / p95", "full, ms p50 / p95", "cached, ms p50 / p95",
        f"slow rounds of {REPEATS} (prefill / full / cached)", "minor page faults (prefill / full / cached)",
        "CPU time / clock time (prefill / full / cached)"],
    zh=["提示长度 $P$", "预填充（毫秒，p50 / p95）", "完整重算（毫秒，p50 / p95）", "缓存续写（毫秒，p50 / p95）",
        f"{REPEATS} 轮中的慢轮次（预填充 / 完整重算 / 缓存续写）", "次缺页次数（预填充 / 完整重算 / 缓存续写）",
        "CPU 时间 / 挂钟时间（预填充 / 完整重算 / 缓存续写）"],
)

# %% tags=["prose-values"]
p95_ratios = [(r["cached_ms"]["p95"] / r["cached_ms"]["p50"], r["prompt_tokens"]) for r in TIMING_ROWS]
window_faults = [r[f"{path}_faults"] for r in TIMING_ROWS for path in PATHS if r[f"{path}_faults"] is not None] or [0]
{"notes": {"cached_p95_over_p50": max(p95_ratios)[0], "cached_p95_over_p50_at": max(p95_ratios)[1],
           "faults_min": min(window_faults), "faults_max": max(window_faults),
           "cpu_share_min": min(r[f"{path}_cpu_share"] for r in TIMING_ROWS for path in PATHS),
           "cpu_share_max": max(r[f"{path}_cpu_share"] for r in TIMING_ROWS for path in PATHS)}}
