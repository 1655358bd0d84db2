# %% [markdown] lang="en"
# ### 9.4 Optional appendix: measurement notes
#
# *Optional. This subsection and 9.5 show how the timings of 9.1 were taken and what can disturb them;
# nothing after them depends on them. On a first read, skip to section 10.*
#
# The three tables (prefill, full recomputation, cached continuation) give one row per window of 9.1:
# its CPU time (fastest round, p50, slowest round), its clock time (p50, p95), its minor page faults per round (fewest, p50, most) and its CPU share (p50 of the
# rounds). A spread between the fastest and the slowest round shows a disturbance that a median or a
# count of rounds far above the median can hide, for instance when most rounds are slowed alike.
#
# * **Page faults.** Every call allocates its temporary tensors and frees them on return; the largest grow
#   with the sequence (one layer's $[H, T, T]$ score matrix is 1 MiB at $T = 256$ in FP32). When the C
#   library's allocator (glibc on Linux) hands a large freed block back to the operating system, the next
#   call that needs it gets fresh pages, and the first write to each 4 KiB page is a *minor page fault*:
#   the system stops the program and maps in a zeroed page. Whether that happens depends on the
#   allocator's thresholds, not on the model, so it can hit one prompt length or one path and change from
#   run to run. Read with `resource.getrusage` around each window ("–" where the `resource` module does
#   not exist, as on Windows).
# * **CPU share.** `time.process_time_ns` over `perf_counter_ns` for the window. The CPU time counts every
#   thread of the process: PyTorch computes on one thread here, but other threads of the process, such as
#   the Jupyter kernel's, count too, so a share can slightly exceed 100 %. Near 100 % the process had the core for the whole
#   window; well below, it waited while the core ran another program, and the clock time counts that wait.
# * **p95.** Over 15 samples (3 with `QUICK = True`), NumPy's linear interpolation puts the p95 between
#   the second-largest and the largest sample, so one or two slow rounds decide it: far too few samples to
#   estimate a service's tail latency. The median shrugs such rounds off, but not a slowdown that holds
#   most rounds; the fastest round shrugs off both.
# * **Growth with $P$ (9.2).** The fixed cost per call pulls the measured growth from the count toward 1×
#   (the same time at every length), never below; work the count leaves out (scaling, mask and softmax over
#   the full step's $[H, T, T]$ scores) and page faults push it above. The two can balance, so agreement at
#   one length does not prove that the count predicts the time. A growth below 1× comes from the run:
#   warm-up, the CPU's clock frequency, the memory allocator (the lengths are timed in order, shortest first,
#   after one untimed pass over all of them).
#
# What this run's tables say is printed below them.

# %% [markdown] lang="zh"
# ### 9.4 可选附录：测量说明
#
# *可选内容。本小节和 9.5 说明 9.1 的时间是怎样测出来的，以及哪些因素会干扰它；后面的内容都不依赖它们。初读时可以直接跳到第 10 节。*
#
# 下面三张表（预填充、完整重算、缓存续写）每行对应 9.1 的一个窗口，给出：CPU 时间（最快的一轮、中位数、最慢的一轮）；挂钟时间（中位数、p95）；每轮的次缺页次数（最少、中位数、最多）；CPU 时间占比（各轮的中位数）。最快与最慢一轮之间的差距能显示出干扰，而中位数或“远慢于中位数的轮数”可能把它掩盖掉，例如大多数轮次都同样变慢的时候。
#
# * **缺页**：每次调用都为临时张量分配内存，返回时再释放；其中最大的张量随序列变长（一层的 $[H, T, T]$ 分数矩阵在 $T = 256$、FP32 时就有 1 MiB）。C 库的内存分配器（Linux 上是 glibc）把释放的一大块内存交还给操作系统后，下一次需要这么多内存的调用就会拿到新的内存页，而对每个 4 KiB 内存页的第一次写入都会引发一次*次缺页*（minor page fault）：操作系统暂停程序，映射进一个清零的内存页。这种情况是否发生取决于分配器的阈值，与模型无关，所以它可能只落在某个提示长度或某条路径上，每次运行也可能不同。缺页次数在每个窗口前后用 `resource.getrusage` 读取（没有 `resource` 模块的系统上显示“–”，例如 Windows）。
# * **CPU 时间占比**：窗口期间的 `time.process_time_ns` 除以 `perf_counter_ns`。CPU 时间计入进程的所有线程：这里 PyTorch 只用一个线程计算，但进程的其他线程（例如 Jupyter 内核的线程）也计算在内，所以占比可能略高于 100%。接近 100% 时，进程在整个窗口内都占着核心；明显低于 100% 时，进程有一段时间在等核心运行别的程序，挂钟时间把这段等待也算了进去。
# * **p95**：对 15 个样本（`QUICK = True` 时为 3 个），NumPy 的线性插值让 p95 落在第二大和最大的样本之间，所以由一两轮慢的测量决定；这么少的样本远不足以估计一个服务的尾延迟。中位数几乎不受这些轮次影响，但挡不住波及大多数轮次的变慢；最快的一轮则两者都不受影响。
# * **随 $P$ 的增长（9.2）**：每次调用的固定开销把实测的增长倍数从计数预测的值拉向 1 倍（即各个长度耗时相同），但不会拉到 1 倍以下；计数漏掉的工作（完整重算一步对 $[H, T, T]$ 分数矩阵的缩放、掩码和 softmax）和缺页又把它推到计数之上。两者可能互相抵消，所以在某个长度上吻合并不能说明计数能预测耗时。增长倍数若低于 1，原因在这一次运行本身：预热、CPU 的时钟频率、内存分配器（各个提示长度按顺序计时，最短的最先，之前先不计时地把所有长度跑一遍）。
#
# 这次运行的表格说明了什么，打印在表格下方。

# %% tags=["hide-input"]
def faults_range(row: dict, path: str) -> str:
    rounds = row[f"{path}_faults_rounds"]
    return "–" if rounds is None else f"{min(rounds):,} / {int(np.median(rounds)):,} / {max(rounds):,}"


def notes_rows(path: str) -> list[list[str]]:
    return [[str(r["prompt_tokens"]),
             f"{r[f'{path}_cpu_ms']['min']:.3f} / {r[f'{path}_cpu_ms']['p50']:.3f} / {r[f'{path}_cpu_ms']['max']:.3f}",
             f"{r[f'{path}_ms']['p50']:.3f} / {r[f'{path}_ms']['p95']:.3f}", faults_range(r, path),
             f"{r[f'{path}_cpu_share']:.0%}"] for r in TIMING_ROWS]


for path in PATHS:
    say_table(
        notes_rows(path),
        en=[f"{ {'prefill': 'prefill', 'full': 'full recomputation', 'cached': 'cached continuation'}[path]}: prompt $P$",
            "CPU ms (min / p50 / max)", "clock ms (p50 / p95)", "minor page faults per round (min / p50 / max)",
            "CPU time / clock time"],
        zh=[f"{ {'prefill': '预填充', 'full': '完整重算', 'cached': '缓存续写'}[path]}：提示长度 $P$",
            "CPU 毫秒（最快 / 中位数 / 最慢）", "挂钟毫秒（中位数 / p95）", "每轮的次缺页次数（最少 / 中位数 / 最多）",
            "CPU 时间 / 挂钟时间"],
    )

# [en] What the tables say. Page faults are "–" where the `resource` module does not exist.
# [zh] 这些表格说明了什么。没有 `resource` 模块的系统上，缺页次数显示为“–”。
window_faults = [r[f"{path}_faults"] for r in TIMING_ROWS for path in PATHS if r[f"{path}_faults"] is not None]
full_faults = longest["full_faults_rounds"] or []
shares = [r[f"{path}_cpu_share"] for r in TIMING_ROWS for path in PATHS]
spread, spread_at, spread_path = max((r[f"{path}_cpu_ms"]["max"] / r[f"{path}_cpu_ms"]["min"], r["prompt_tokens"], path)
                                     for r in TIMING_ROWS for path in PATHS)
p95_ratio, p95_at = max((r["cached_ms"]["p95"] / r["cached_ms"]["p50"], r["prompt_tokens"]) for r in TIMING_ROWS)
faults = f"{min(window_faults):,} / {max(window_faults):,}" if window_faults else "–"
full_range = f"{min(full_faults):,} / {max(full_faults):,}" if full_faults else "–"
full_p50_over_min = longest["full_cpu_ms"]["p50"] / longest["full_cpu_ms"]["min"]
busy = sum(share < 0.9 for share in shares)
say(en=f"On this run: minor page faults per window, median of its rounds (fewest / most window): {faults}; "
       f"per round of the full window at $P = {P_MAX}$ (fewest / most): {full_range}. "
       f"The median round of that window took {full_p50_over_min:.2f} times the CPU time of its fastest. "
       f"CPU share per window: {min(shares):.0%} to {max(shares):.0%}; {busy} of the {len(shares)} windows below 90 %. "
       f"Largest slowest-over-fastest ratio of a window's rounds: {spread:.2f} "
       f"({ {'prefill': 'prefill', 'full': 'full recomputation', 'cached': 'cached continuation'}[spread_path]}, $P = {spread_at}$). "
       f"The cached window's p95 over its p50: at most {p95_ratio:.2f} ($P = {p95_at}$).",
    zh=f"这次运行中：每个窗口的次缺页次数，取各轮的中位数（最少 / 最多的窗口）：{faults}；"
       f"$P = {P_MAX}$ 时完整重算窗口每轮的次缺页次数（最少 / 最多）：{full_range}。"
       f"该窗口中位数那一轮的 CPU 时间是最快一轮的 {full_p50_over_min:.2f} 倍。"
       f"每个窗口的 CPU 时间占比：{min(shares):.0%} 到 {max(shares):.0%}；"
       + (f"{len(shares)} 个窗口中有 {busy} 个低于 90%。" if busy else f"{len(shares)} 个窗口都不低于 90%。")
       + f"一个窗口内最慢一轮与最快一轮之比，最大为 {spread:.2f}"
       f"（{ {'prefill': '预填充', 'full': '完整重算', 'cached': '缓存续写'}[spread_path]}，$P = {spread_at}$）。"
       f"缓存续写窗口的 p95 与中位数之比：最大 {p95_ratio:.2f}（$P = {p95_at}$）。")
