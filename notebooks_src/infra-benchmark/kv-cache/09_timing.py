# %% [markdown] lang="en"
# ## 9. Timing on this CPU
#
# Now the clock, in four steps: three windows timed separately and the headline they give (9.1), the
# count of section 8 next to the measured time (9.2), an optional profile of one decode step (9.3), and a whole
# generation, prefill then decode (9.4).
#
# ### 9.1 Three windows, and the headline
#
# For prompts of $P = 16$, 64, 128 and 256 tokens we time three windows separately:
#
# * **prefill:** one call over the $P$ prompt tokens, building the cache;
# * **full recomputation:** consume $G = 16$ predetermined tokens, each step running the whole current prefix through the model without a cache;
# * **cached continuation:** consume the same 16 tokens one at a time, starting from an existing prefix cache (so prefill is not inside this window).
#
# Both continuation paths return logits after every token. Tokenization, sampling, queues and
# networking are outside all windows. Our full path is the naive one of 8.1: it computes the masked
# scores too and projects every prefix position to vocabulary logits, keeping the last. The dynamic
# `torch.cat` of the cached path allocates new tensors and copies the history on every step, and that
# cost is inside its window.
#
# Protocol: one thread, FP32, `eval()`, `inference_mode()`; 3 warm-up rounds and 15 measured rounds per
# path; in each round the order of the three paths is rotated (prefill–full–cached, full–cached–prefill,
# cached–prefill–full, …) so that no path always runs first; `time.perf_counter_ns`; we report the
# median (p50) and the 95th percentile (p95) of the measured rounds. `QUICK = True` keeps only 16 and 256
# tokens, 1 warm-up and 3 rounds.

# %% [markdown] lang="zh"
# ## 9. 在这台 CPU 上计时
#
# 现在开始计时，分四步：分别测量三个窗口，得出主要结论（9.1）；把第 8 节的计数与实测时间放在一起（9.2）；可选：对一个解码步做性能分析（9.3）；计时一次完整的生成，先预填充，再解码（9.4）。
#
# ### 9.1 三个计时窗口与主要结论
#
# 对长度 $P = 16$、64、128、256 的提示，我们分别测量三个窗口的耗时：
#
# * **预填充**：对 $P$ 个提示 token 调用一次模型，建立缓存；
# * **完整重算**：依次处理 $G = 16$ 个预先确定的 token，每一步都把当前的整个前缀送入模型，不用缓存；
# * **缓存续写**：从已有的前缀缓存出发，逐个处理同样的 16 个 token（因此预填充不在这个窗口内）。
#
# 两条续写路径在每个 token 之后都返回 logits。分词、采样、排队和网络传输都不在任何窗口之内。我们的完整路径就是 8.1 中那种朴素的写法：被遮住的分数也照算，并把前缀每个位置都投影成词表 logits，再只取最后一个。缓存路径每一步都用 `torch.cat` 动态拼接，要分配新张量并复制历史数据，这部分开销也算在它的窗口里。
#
# 测量规程：单线程、FP32、`eval()`、`inference_mode()`；每条路径预热 3 轮、正式测量 15 轮；每一轮都轮换三条路径的执行顺序（预填充→完整重算→缓存续写、完整重算→缓存续写→预填充、缓存续写→预填充→完整重算……），免得某条路径总是第一个运行；计时用 `time.perf_counter_ns`；报告正式测量轮次的中位数（p50）和第 95 百分位数（p95）。`QUICK = True` 时只测 16 和 256 个 token，预热 1 轮、测量 3 轮。

# %%
# [en] `resource` exists on Unix only (Linux, macOS); 9.1 uses it to count page faults.
# [zh] `resource` 模块只在 Unix（Linux、macOS）上存在；9.1 用它统计缺页次数。
try:
    import resource
except ImportError:
    resource = None

PROMPTS = [16, 256] if QUICK else [16, 64, 128, 256]
WARMUPS, REPEATS = (1, 3) if QUICK else (3, 15)
CONTINUATION = 16
PATHS = ("prefill", "full", "cached")
gen = torch.Generator().manual_seed(SEED + 1)
TIMING_STREAM = torch.randint(0, cfg.vocab, (1, max(PROMPTS) + CONTINUATION), generator=gen)   # [1, 272]


# [en] The three windows.
# [zh] 三个计时窗口。
@torch.inference_mode()
def prefill(model, prompt):
    _, cache = model(prompt)
    return cache


@torch.inference_mode()
def full_continuation(model, prompt, continuation):
    ids, outputs = prompt, []
    for step in range(continuation.shape[1]):
        ids = torch.cat((ids, continuation[:, step:step + 1]), dim=1)
        logits, _ = model(ids)                                   # [B, P + step + 1, vocab]
        outputs.append(logits[:, -1])
    return torch.stack(outputs, dim=1)                           # [B, G, vocab]


@torch.inference_mode()
def cached_continuation(model, cache, continuation):
    outputs = []
    for step in range(continuation.shape[1]):
        logits, cache = model(continuation[:, step:step + 1], cache)   # [B, 1, vocab]
        outputs.append(logits[:, -1])
    return torch.stack(outputs, dim=1), cache                    # [B, G, vocab], cache

# %% [markdown] lang="en"
# Before timing anything, the two continuation paths must agree, and the work they do must match the
# formulas. After prefill, the full path feeds $P + j$ positions at step $j$, in total
# $\sum_{j=1}^{G} (P + j) = GP + G(G+1)/2$ positions per layer; the cached path feeds $G$. For
# $P = 256$, $G = 16$ that is {{run:timing.fed_full:,}} versus {{run:timing.fed_cached}}. The cell counts
# the positions that reached the model with a forward pre-hook, and a second hook on the vocabulary
# projection confirms that both paths project every position they feed. The ratio of these two counts is not a
# latency prediction: matrix efficiency, memory traffic, dispatch and Python overhead differ between the paths.
#
# The payload of the final cache, its logical size, is $B \cdot T$ times `kv_bytes_per_token`: with batch 1,
# final length 272, 2 layers, 4 K/V heads, head size 16 and 4-byte FP32, {{run:timing.payload:,}} bytes.
# The cell compares it with the sum of `numel() * element_size()` over the real cache. It counts neither
# the parameters, the attention scores, the temporary tensors of `torch.cat`, allocator overhead nor
# Python objects, so it is not the peak memory of the process.

# %% [markdown] lang="zh"
# 计时之前，两条续写路径的结果必须一致，它们的工作量也必须与公式相符。预填充之后，完整路径在第 $j$ 步送入 $P + j$ 个位置，每层合计 $\sum_{j=1}^{G} (P + j) = GP + G(G+1)/2$ 个位置；缓存路径只送入 $G$ 个。当 $P = 256$、$G = 16$ 时，两者分别是 {{run:timing.fed_full:,}} 和 {{run:timing.fed_cached}}。下面的单元格用一个前向预钩子（forward pre-hook）统计真正到达模型的位置数；词表投影上的第二个钩子则确认，两条路径都把送入的每个位置投影成了 logits。这两个位置数之比并不能预测延迟：两条路径在矩阵运算效率、访存、算子分派和 Python 开销上都不一样。
#
# 最终缓存的数据量（即它的逻辑大小）是 `kv_bytes_per_token` 的 $B \cdot T$ 倍：取 batch 为 1、最终长度 272、2 层、4 个 K/V 头、每头 16 维、FP32 每元素 4 字节，合计 {{run:timing.payload:,}} 字节。下面的单元格会把它与真实缓存上 `numel() * element_size()` 的总和比较。这个数不包括参数、注意力分数、`torch.cat` 产生的临时张量、内存分配器的额外开销和 Python 对象，因此并不是进程的峰值内存。

# %%
def projected_positions(prompt_len: int, generated: int) -> dict:
    return {"full": generated * prompt_len + generated * (generated + 1) // 2, "cached": generated}


P = max(PROMPTS)
prompt, continuation = TIMING_STREAM[:, :P], TIMING_STREAM[:, P:P + CONTINUATION]
fed, projected = [], []
hooks = [model.register_forward_pre_hook(lambda module, args: fed.append(args[0].shape[1])),
         model.lm_head.register_forward_pre_hook(lambda module, args: projected.append(args[0].shape[1]))]
try:
    ref_cache = prefill(model, prompt)
    fed.clear()
    projected.clear()
    full_out = full_continuation(model, prompt, continuation)
    WORK = {"full": sum(fed), "full_projected": sum(projected)}
    fed.clear()
    projected.clear()
    cached_out, ref_final_cache = cached_continuation(model, ref_cache, continuation)
    WORK |= {"cached": sum(fed), "cached_projected": sum(projected)}
finally:
    for hook in hooks:
        hook.remove()
PAYLOAD = (P + CONTINUATION) * kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, FP32_BYTES)

say_table([["`full_continuation`", f"{WORK['full']:,}", f"{projected_positions(P, CONTINUATION)['full']:,}",
            f"{WORK['full_projected']:,}"],
           ["`cached_continuation`", f"{WORK['cached']:,}", f"{projected_positions(P, CONTINUATION)['cached']:,}",
            f"{WORK['cached_projected']:,}"]],
          en=[f"$P = {P}$, $G = {CONTINUATION}$", "positions fed (hook)", "formula", "positions projected to the vocabulary"],
          zh=[f"$P = {P}$，$G = {CONTINUATION}$", "送入的位置数（钩子）", "公式", "投影到词表的位置数"])
say(en=f"Max abs error between the two paths over the {CONTINUATION} steps: {max_abs_err(cached_out, full_out):.3e}. "
       f"K/V payload at batch 1, $T = {P + CONTINUATION}$, fp32: {cache_bytes(ref_final_cache):,} bytes measured, "
       f"{PAYLOAD:,} from the formula.",
    zh=f"{CONTINUATION} 步中两条路径的最大绝对误差：{max_abs_err(cached_out, full_out):.3e}。batch 为 1、$T = {P + CONTINUATION}$、"
       f"FP32 时 K/V 的数据量：实测 {cache_bytes(ref_final_cache):,} 字节，按公式 {PAYLOAD:,} 字节。")
assert close(cached_out, full_out) and cache_bytes(ref_final_cache) == PAYLOAD
assert {"full": WORK["full"], "cached": WORK["cached"]} == projected_positions(P, CONTINUATION) == {
    "full": WORK["full_projected"], "cached": WORK["cached_projected"]}

# %% [markdown] lang="en"
# The measurement loop: each path is timed by one `perf_counter_ns` reading before it and one after it,
# and every round rotates the order of the three paths. The table gives, per prompt length, the p50 and p95 of each
# window, the ratio of the two continuation windows' p50, and how many of the measured rounds took
# more than 1.5 times their window's p50 ("slow rounds", prefill / full / cached).
#
# One more column counts what the memory allocator does inside each window. Every call allocates its
# temporary tensors and frees them when it returns, and the largest grow with the sequence: the
# $[H, T, T]$ score matrix of one layer is 1 MiB at $T = 256$ in FP32. When a large block is freed, the C
# library's allocator (glibc on Linux) may hand its pages back to the operating system. The next call that
# needs that memory then gets fresh pages, and the first write to each 4 KiB page is a *minor page fault*:
# the operating system stops the program, takes a zeroed page and maps it in. Whether this happens depends
# on the allocator's thresholds and on the order of earlier allocations, not on the model, so it can hit
# one prompt length or one path and spare the others, and change from run to run. The column gives the
# median number of minor page faults per window, read with `resource.getrusage` before and after it ("–"
# where the `resource` module does not exist, as on Windows). A window that faults thousands of times
# spends part of its time on the allocator, so it is slower than its multiply-add count predicts.
#
# The last timing column tells a busy machine apart. `time.process_time_ns` counts the CPU time our
# process received during the window (page faults included, since the operating system works for us
# then), `perf_counter_ns` the time on the wall clock. Near 100 %, the process had the core for the whole
# window; well below, it waited while the core ran something else, and the window measures that wait too.

# %% [markdown] lang="zh"
# 下面是测量循环：每条路径只在前后各读一次 `perf_counter_ns`，每一轮都轮换三条路径的顺序。表中按提示长度列出每个窗口的 p50 和 p95、两个续写窗口 p50 之比，以及正式测量的轮次中耗时超过该窗口 p50 的 1.5 倍的轮数（“慢轮次”，依次为预填充 / 完整重算 / 缓存续写）。
#
# 另有一列统计内存分配器在每个窗口内做的事。每次调用都要为临时张量分配内存，返回时再释放；其中最大的张量随序列变长：一层的 $[H, T, T]$ 分数矩阵在 $T = 256$、FP32 时就有 1 MiB。释放一大块内存时，C 库的内存分配器（Linux 上是 glibc）可能把这些内存页交还给操作系统。下一次需要这么多内存的调用就会拿到新的内存页，而对每个 4 KiB 内存页的第一次写入都会引发一次*次缺页*（minor page fault）：操作系统暂停程序，取一个清零的内存页映射进来。这种情况是否发生，取决于分配器的阈值和此前分配的先后顺序，与模型无关；所以它可能只落在某个提示长度或某条路径上，每次运行也可能不同。这一列给出每个窗口次缺页次数的中位数，在窗口前后用 `resource.getrusage` 读取（没有 `resource` 模块的系统上显示“–”，例如 Windows）。一个窗口如果发生成千上万次缺页，它就有一部分时间花在分配器上，因此会比乘加计数预测的更慢。
#
# 最后一个计时列用来识别机器是否繁忙。`time.process_time_ns` 统计窗口期间本进程得到的 CPU 时间（缺页也算在内，因为那时操作系统在为我们工作），`perf_counter_ns` 统计挂钟时间，即墙上时钟走过的时间。比值接近 100% 时，进程在整个窗口内都占着核心；明显低于 100% 时，进程有一段时间在等待核心运行别的程序，窗口的耗时也把这段等待算了进去。

# %%
def percentile_summary(samples_ns: list[int]) -> dict:
    ms = np.array(samples_ns) / 1e6
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "samples": [round(float(x), 6) for x in ms]}


def minor_faults() -> int | None:
    # [en] Minor page faults of this process so far (None where the `resource` module does not exist: Windows).
    # [zh] 本进程到目前为止的次缺页次数（没有 `resource` 模块的系统上为 None，例如 Windows）。
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else None


def time_prompt(model, prompt_len: int) -> dict:
    prompt = TIMING_STREAM[:, :prompt_len]
    continuation = TIMING_STREAM[:, prompt_len:prompt_len + CONTINUATION]
    # [en] The cached path starts from this prefix cache, built outside its window.
    # [zh] 缓存路径从这份前缀缓存出发，它在计时窗口之外建好。
    prefix_cache = prefill(model, prompt)
    runs = {
        "prefill": lambda: prefill(model, prompt),
        "full": lambda: full_continuation(model, prompt, continuation),
        "cached": lambda: cached_continuation(model, prefix_cache, continuation),
    }
    samples = {path: [] for path in PATHS}
    faults = {path: [] for path in PATHS}
    cpu_share = {path: [] for path in PATHS}
    for round_index in range(WARMUPS + REPEATS):
        # [en] Round r starts with path r mod 3: prefill-full-cached, full-cached-prefill, ...
        # [zh] 第 r 轮从第 r mod 3 条路径开始：预填充-完整重算-缓存续写，完整重算-缓存续写-预填充，……
        shift = round_index % len(PATHS)
        for path in PATHS[shift:] + PATHS[:shift]:
            faults_before = minor_faults()
            cpu_start, start = time.process_time_ns(), time.perf_counter_ns()
            runs[path]()
            elapsed = time.perf_counter_ns() - start
            cpu = time.process_time_ns() - cpu_start
            if round_index >= WARMUPS:
                samples[path].append(elapsed)
                cpu_share[path].append(cpu / elapsed)
                if faults_before is not None:
                    faults[path].append(minor_faults() - faults_before)
    return {
        "prompt_tokens": prompt_len,
        **{f"{path}_ms": percentile_summary(samples[path]) for path in PATHS},
        # [en] Minor page faults per window, median of the measured rounds (None without `resource`).
        # [zh] 每个窗口的次缺页次数，取正式测量轮次的中位数（没有 `resource` 时为 None）。
        **{f"{path}_faults": int(np.median(faults[path])) if faults[path] else None for path in PATHS},
        # [en] CPU time of the process over clock time, per window, median of the measured rounds.
        # [zh] 每个窗口中进程的 CPU 时间与挂钟时间之比，取正式测量轮次的中位数。
        **{f"{path}_cpu_share": float(np.median(cpu_share[path])) for path in PATHS},
        "kv_bytes": (prompt_len + CONTINUATION) * kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, FP32_BYTES),
        "projected_positions": projected_positions(prompt_len, CONTINUATION),
    }


def slow_rounds(ms: dict) -> int:
    return sum(x > 1.5 * ms["p50"] for x in ms["samples"])


TIMING_ROWS = [time_prompt(model, p) for p in PROMPTS]
say_table(
    [[str(r["prompt_tokens"])] + [f"{r[f'{path}_ms']['p50']:.3f} / {r[f'{path}_ms']['p95']:.3f}" for path in PATHS]
     + [f"{r['full_ms']['p50'] / r['cached_ms']['p50']:.1f}", " / ".join(str(slow_rounds(r[f"{path}_ms"])) for path in PATHS),
        " / ".join("–" if r[f"{path}_faults"] is None else f"{r[f'{path}_faults']:,}" for path in PATHS),
        " / ".join(f"{r[f'{path}_cpu_share']:.0%}" for path in PATHS),
        f"{r['projected_positions']['full']:,} / {r['projected_positions']['cached']}"]
     for r in TIMING_ROWS],
    en=["prompt $P$", "prefill, ms p50 / p95", "full recomputation, 16 steps, ms p50 / p95",
        "cached continuation, 16 steps, ms p50 / p95", "full / cached (p50)", f"slow rounds of {REPEATS}",
        "minor page faults per window (p50)", "CPU time / clock time (p50)", "positions fed, full / cached"],
    zh=["提示长度 $P$", "预填充（毫秒，p50 / p95）", "完整重算 16 步（毫秒，p50 / p95）",
        "缓存续写 16 步（毫秒，p50 / p95）", "完整 / 缓存（p50）", f"{REPEATS} 轮中的慢轮次",
        "每个窗口的次缺页次数（p50）", "CPU 时间 / 挂钟时间（p50）", "送入的位置数（完整重算 / 缓存续写）"],
)

# %% [markdown] lang="en"
# **The headline.** On this run the full window's p50 over the cached window's (the "full / cached"
# column) ranged from {{run:timing.speedup_lo:.1f}} (at $P = {{run:timing.speedup_lo_at}}$) to
# {{run:timing.speedup_hi:.1f}} (at $P = {{run:timing.speedup_hi_at}}$) over the prompt lengths of the
# table. These factors are this run's, and the whole column, not one row
# of it, is the result. The count leaves the cache a far larger margin: at $P = {{run:timing.p_max}}$
# the full window feeds {{run:timing.fed_full:,}} positions where the cached one feeds 16, and does
# {{run:timing.macs_ratio_max:.0f}} times its multiply-adds. Both windows make the same 16 calls through
# nearly the same operators (the cached one also copies its cache with `torch.cat`), the full ones on far
# larger inputs. So the cell below asserts only that the cached window is faster at all at the longest
# prompt: a factor above 1, far below the work ratio of {{run:timing.macs_ratio_max:.0f}}, a margin no CPU
# should erase. The measured factors move from machine to machine and from run to run (a machine busy with
# other work, or page faults, can slow any single row); they are reported, not asserted. Why they are so
# much smaller than the work ratio is the subject of 9.2.
#
# The top of that range rests on one row, $P = {{run:timing.speedup_hi_at}}$, whose full window took
# {{run:timing.speedup_hi_full_faults}} minor page faults (p50); on this run {{run:timing.faulted_rows}} of the
# {{run:timing.rows}} rows had a window that faulted (the fault columns of the table). The count of 8.1 does not see those faults, nor the elementwise
# passes over the score matrix that 9.3 times; either may be part of that row's factor. This run does
# not measure what a fault costs, so it cannot say how much of the factor each one explains.
#
# **Faults and waits on this run.** The windows of the table took between {{run:timing.faults_min:,}} and
# {{run:timing.faults_max:,}} minor page faults (p50), and received between
# {{run:timing.cpu_share_min:.0%}} and {{run:timing.cpu_share_max:.0%}} of their clock time as CPU time;
# the two columns show at which prompt lengths and in which paths. A row with thousands of faults per
# window, or with a CPU share well below the others, is not comparable with the rest: part of its time
# is the allocator's or another program's, and 9.2 reads the table with that in mind.
#
# **Reading p95.** A p95 over 15 samples (3 with `QUICK = True`) is an empirical quantile: with NumPy's
# linear interpolation it lies between the second-largest and the largest sample, so one or two slow
# rounds decide it. On this run the cached window's p95 reached {{run:timing.cached_p95_over_p50:.2f}}
# times its p50 (at $P = {{run:timing.cached_p95_over_p50_at}}$), while most of its rounds stayed close to
# the median (the "slow rounds" column). Every round runs the same code on the same inputs and does the
# same work, so an isolated slow round is time lost outside that work: the operating system handed the
# core to another process, an interrupt arrived, the allocator
# asked the system for memory. A pause of a few milliseconds is a large fraction of a window that takes a
# few milliseconds, as the cached one does, and a small fraction of the full window at long prompts. The
# median shrugs such rounds off; the p95 of 15 samples does not, and it is far too few samples to estimate
# a service's tail latency.
#
# What these numbers **do not** establish: speed-ups on a GPU, the latency of a serving system,
# client-side time to first token (TTFT) or inter-token latency (ITL), or how vLLM, SGLang or any
# production kernel, cache layout or scheduler would perform. Those need measurements on their own
# hardware and workloads.

# %% [markdown] lang="zh"
# **主要结论**：在这次运行中，对表中的各种提示长度，完整重算窗口与缓存续写窗口的 p50 之比（“完整 / 缓存”一列）在 {{run:timing.speedup_lo:.1f}}（$P = {{run:timing.speedup_lo_at}}$ 时）到 {{run:timing.speedup_hi:.1f}}（$P = {{run:timing.speedup_hi_at}}$ 时）之间。这些倍数只属于这次运行；结论是整列数字，而不是其中的某一行。按计数，缓存路径的优势本应大得多：在 $P = {{run:timing.p_max}}$ 时，完整重算窗口送入 {{run:timing.fed_full:,}} 个位置，缓存续写窗口只送入 16 个；前者的乘加次数是后者的 {{run:timing.macs_ratio_max:.0f}} 倍。两个窗口都调用模型 16 次，经过的算子几乎相同（缓存续写还要用 `torch.cat` 复制缓存），只是完整重算每次的输入大得多。因此下面的单元格只断言：在最长的提示下，缓存续写确实更快，即倍数大于 1。这个门槛比 {{run:timing.macs_ratio_max:.0f}} 的工作量之比低得多，余地之大，换哪颗 CPU 都不该跌破。实测的倍数因机器而异，每次运行也不同（机器同时忙于别的工作，或者发生缺页，都可能让任何一行变慢），所以只报告，不做断言。它们为什么比工作量之比小得多，是 9.2 要回答的问题。
#
# 这个范围的上端只取决于一行，即 $P = {{run:timing.speedup_hi_at}}$：这一行的完整重算窗口发生了 {{run:timing.speedup_hi_full_faults}} 次次缺页（p50）；这次运行的 {{run:timing.rows}} 行中，有 {{run:timing.faulted_rows}} 行的窗口发生了缺页（见表中的缺页列）。8.1 的计数既看不到这些缺页，也看不到 9.3 计时的、逐元素扫过分数矩阵的几遍运算，两者都可能是这一行倍数的一部分。这次运行没有测量一次缺页要花多少时间，所以说不清这个倍数中各有多少来自哪一个。
#
# **这次运行中的缺页与等待**：表中各窗口的次缺页次数（p50）在 {{run:timing.faults_min:,}} 到 {{run:timing.faults_max:,}} 之间，得到的 CPU 时间占挂钟时间的 {{run:timing.cpu_share_min:.0%}} 到 {{run:timing.cpu_share_max:.0%}}；它们分别落在哪些提示长度、哪些路径上，见这两列。每个窗口缺页数千次的行，或者 CPU 时间占比明显低于其他行的行，不能直接与其余各行比较：它的时间有一部分属于分配器或别的程序。9.2 读这张表时会考虑这一点。
#
# **如何解读 p95**：15 个样本（`QUICK = True` 时只有 3 个）的 p95 是经验分位数。NumPy 默认用线性插值，它落在第二大和最大的样本之间，所以由一两轮慢的测量决定。这次运行中，缓存续写窗口的 p95 最高达到其 p50 的 {{run:timing.cached_p95_over_p50:.2f}} 倍（在 $P = {{run:timing.cached_p95_over_p50_at}}$ 时），而它的大多数轮次都接近中位数（见“慢轮次”一列）。每一轮都在同样的输入上运行同样的代码，工作量完全相同；因此个别轮次变慢，多花的时间都耗在这些工作之外：操作系统把 CPU 核心让给了别的进程，来了一个中断，或者内存分配器向系统申请了内存。几毫秒的停顿，对于只需几毫秒的窗口（缓存续写正是如此）占比很大，对于长提示下的完整重算窗口则占比很小。中位数几乎不受这些轮次影响，15 个样本的 p95 却会受影响，而且样本远远不够，无法估计一个服务的尾延迟。
#
# 这些数字**不能**说明：GPU 上的加速效果、推理服务系统的延迟、客户端的首 token 延迟（TTFT）或 token 间延迟（ITL），也不能说明 vLLM、SGLang 或任何生产级的内核、缓存布局或调度器的表现。这些都需要在各自的硬件和负载上实际测量。

# %%
longest = TIMING_ROWS[-1]
SPEEDUP = longest["full_ms"]["p50"] / longest["cached_ms"]["p50"]
# [en] The headline's claim: at the longest prompt the cached window is faster at all (work ratio in the
# [en] hundreds, see above).
# [zh] 主要结论断言的内容：在最长的提示下，缓存续写窗口确实更快（工作量之比达数百倍，见上文）。
assert SPEEDUP > 1

# %% [markdown] lang="en"
# The work ratio the headline quotes comes from the count of 8.1: the next cell averages it over the 16
# steps of each window and divides the full window's by the cached one's at the longest prompt.

# %% [markdown] lang="zh"
# 主要结论引用的工作量之比来自 8.1 的计数：下一个单元格在每个窗口的 16 步上取平均，再在最长的提示下用完整重算窗口的值除以缓存续写窗口的值。

# %%
def window_macs(prompt_len: int, path: str) -> float:
    # [en] Model multiply-adds per step of a 16-step window after a prompt of prompt_len tokens.
    # [zh] 提示长度为 prompt_len 时，16 步窗口中平均每步的模型乘加次数。
    step = full_step_macs if path == "full" else cached_step_macs
    return sum(sum(step(cfg, prompt_len + j).values()) for j in range(1, CONTINUATION + 1)) / CONTINUATION


WORK_RATIO = window_macs(longest["prompt_tokens"], "full") / window_macs(longest["prompt_tokens"], "cached")
say(en=f"Multiply-adds per step at $P = {longest['prompt_tokens']}$, full / cached: {WORK_RATIO:.0f}.",
    zh=f"$P = {longest['prompt_tokens']}$ 时每步的乘加次数之比（完整重算 / 缓存续写）：{WORK_RATIO:.0f}。")

# %% tags=["prose-values"]
speedups = [(r["full_ms"]["p50"] / r["cached_ms"]["p50"], r["prompt_tokens"]) for r in TIMING_ROWS]
p95_ratios = [(r["cached_ms"]["p95"] / r["cached_ms"]["p50"], r["prompt_tokens"]) for r in TIMING_ROWS]
hi_row = next(r for r in TIMING_ROWS if r["prompt_tokens"] == max(speedups)[1])
faulted = [str(r["prompt_tokens"]) for r in TIMING_ROWS if any(r[f"{path}_faults"] for path in PATHS)]
window_faults = [r[f"{path}_faults"] for r in TIMING_ROWS for path in PATHS if r[f"{path}_faults"] is not None] or [0]
{"timing": {"p_max": longest["prompt_tokens"], "p_min": TIMING_ROWS[0]["prompt_tokens"],
            "speedup_lo": min(speedups)[0], "speedup_lo_at": min(speedups)[1],
            "speedup_hi": max(speedups)[0], "speedup_hi_at": max(speedups)[1],
            "speedup_hi_full_faults": "–" if hi_row["full_faults"] is None else f"{hi_row['full_faults']:,}",
            "faulted_rows": len(faulted), "rows": len(TIMING_ROWS), "fed_full": WORK["full"], "fed_cached": WORK["cached"], "payload": PAYLOAD,
            "macs_ratio_max": WORK_RATIO,
            "cached_p95_over_p50": max(p95_ratios)[0], "cached_p95_over_p50_at": max(p95_ratios)[1],
            "faults_min": min(window_faults), "faults_max": max(window_faults),
            "cpu_share_min": min(r[f"{path}_cpu_share"] for r in TIMING_ROWS for path in PATHS),
            "cpu_share_max": max(r[f"{path}_cpu_share"] for r in TIMING_ROWS for path in PATHS)}}
