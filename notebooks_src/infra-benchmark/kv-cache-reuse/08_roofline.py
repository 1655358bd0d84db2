# %% [markdown] lang="en"
# ## 9. The roofline of one core of this machine
#
# This section measures how close real calls come to the roofline's limit; the metric is a call's **share of
# the roof**.
#
# A processor reads memory at some bandwidth $\beta$ (bytes per second) and computes at some rate $\pi$
# (FLOP per second). An operation of intensity $I$ can therefore run at most at $\min(\pi, \beta I)$ FLOP/s:
# the **roofline**. Below the **ridge point** $I^* = \pi / \beta$ the memory is the bottleneck (the operation is
# **memory-bound**); above it, the arithmetic is (**compute-bound**). We measure both sides on one core of this
# machine (one thread, FP32):
#
# * **the sloped side, the bandwidth $\beta$**: the copy (`a = b`) and triad (`a = b + 3 c`) kernels of STREAM,
#   the standard memory benchmark, on arrays of 256 MiB each, credited with 2 and 3 array accesses per element,
#   as STREAM counts them, here of 4-byte floats; $\beta$ is the faster of the two;
# * **the flat side, $\pi$**: the fastest FLOP rate this run measures, either a square matrix product
#   `[1024, 1024] @ [1024, 1024]` ({{run:roofline.matmul_intensity:.0f}} FLOP per byte, far right of the ridge) or
#   one of the weight products below, whichever is faster. So $\pi$ is **the fastest rate measured here, not the
#   core's arithmetic peak** (which is higher), and no measured point can lie above the flat side.
#
# Two sweeps stand for the two parts of a decode step, each over several batch sizes $B$:
#
# * **weights**: $B$ token vectors times one `[6144, 6144]` weight matrix (144 MiB, read once per call, as a
#   layer's weights are);
# * **cache**: $B$ sequences, each with its own cache of {{run:roofline.cache_keys:,}} keys in 8 heads of 128
#   dimensions (128 MiB of K and V per sequence), attended by one query per head.
#
# Both parts are memory-bound at batch 1 by the count. We measure how fast the batch-1 weight product streams its
# weights, and check that batching amortizes the weights but not the cache. The folded cell below times each call in rounds.
#
# <details><summary>How the timings are made, and why one core (optional)</summary>
#
# One core: with all cores the arithmetic grows about with their number but the bandwidth much less (they
# share the memory controllers), so the whole processor's ridge lies further right. The machine that builds
# this notebook may run other programs, so we time with this process's CPU time (`time.process_time`), which
# does not count the pauses in which the operating system runs something else, and each case is timed for
# {{run:roofline.rounds}} rounds, every round timing every case of a cell once, in turn, so that another program
# slows all of them alike; each number below is the median over the rounds, and the tables give the spread
# (slowest round over fastest). Every working set (at least 128 MiB) is meant to exceed the L3 cache; where
# the L3 is larger (some Intel Xeons have several hundred MiB), the rates would overstate the memory. Copy can come out slower than triad: an ordinary store first
# reads the cache line it overwrites, a transfer STREAM does not credit, which weighs more in copy. So the
# memory moves more bytes per second than $\beta$ credits, and a kernel that only reads can beat $\beta$. Our toy
# decoder is of no use here: its 0.6 MB of weights stay in the CPU's caches.
#
# </details>

# %% [markdown] lang="zh"
# ## 9. 本机单个核心的 Roofline 模型
#
# 本节测量在一个核心上，实际的调用离 Roofline 模型给出的界限有多近；衡量的指标是调用**达到屋顶线的比例**。
#
# 处理器读取内存有一定的带宽 $\beta$（字节/秒），做运算有一定的速率 $\pi$（FLOP/秒）。因此，算术强度为 $I$ 的运算最快只能达到 $\min(\pi, \beta I)$ FLOP/秒：这就是 **Roofline 模型**（屋顶线模型）。在**拐点** $I^* = \pi / \beta$ 左侧，瓶颈在内存（运算**受限于内存带宽**）；在拐点右侧，瓶颈在运算（**受限于计算**）。屋顶线的两条边都在本机的一个核心上测出（单线程，FP32）：
#
# * **斜边，即带宽 $\beta$**：标准内存基准测试 STREAM 中的 copy（`a = b`）和 triad（`a = b + 3 c`）两个内核，每个数组 256 MiB，按 STREAM 的计法每个元素分别记 2 次和 3 次数组访问（这里是 4 字节的浮点数）；$\beta$ 取两者中较快的那个；
# * **水平边，即 $\pi$**：本次运行测得的最快 FLOP 速率，取方阵乘法 `[1024, 1024] @ [1024, 1024]`（算术强度 {{run:roofline.matmul_intensity:.0f}} FLOP/字节，远在拐点右侧）与下面各次权重乘法中最快的那个。所以 $\pi$ 是**这里测得的最快速率，而不是这个核心的运算峰值**（峰值更高），任何测量点都不会高于水平边。
#
# 两组扫描分别代表解码步的两个部分，每组都扫过几种 batch 大小 $B$：
#
# * **权重**：$B$ 个 token 向量乘以一个 `[6144, 6144]` 的权重矩阵（144 MiB，每次调用读一遍，就像一层的权重那样）；
# * **缓存**：$B$ 条序列，每条都有自己的缓存，含 {{run:roofline.cache_keys:,}} 个键，分 8 个头、每头 128 维（每条序列 128 MiB 的 K 和 V），每个头用一个查询去做注意力。
#
# 按计数，batch 为 1 时两个部分都受限于内存带宽。我们测量 batch 为 1 的权重乘法读取权重有多快，并检验 batch 分摊了权重的开销，却分摊不了缓存的开销。下面已折叠的单元格按轮次给每个调用计时。
#
# <details><summary>如何计时，以及为什么只用一个核心（可选）</summary>
#
# 只用一个核心：用上全部核心时，运算能力大致随核心数增长，带宽却增长得少得多（各核心共用内存控制器），所以整个处理器的拐点更靠右。构建本笔记本的机器可能同时运行着其他程序，所以计时用本进程的 CPU 时间（`time.process_time`），它不计操作系统去运行别的程序时的暂停；每种情形测 {{run:roofline.rounds}} 轮，每一轮依次给同一个单元格中的每种情形计时一次，这样别的程序对所有情形的影响相同；下面每个数都是各轮的中位数，表格还给出波动范围（最慢一轮除以最快一轮）。每份工作集（至少 128 MiB）都有意大于 L3 高速缓存；在 L3 更大的处理器上（有些 Intel Xeon 有几百 MiB），测到的其实是 L3 高速缓存而非内存的速率，会高估内存带宽。copy 测出的带宽可能低于 triad：普通的写操作会先把要覆盖的高速缓存行读进来，这部分传输 STREAM 不计，它在 copy 中占的比重更大。所以内存每秒实际搬运的字节比按计数规则算出的 $\beta$ 多，只读不写的内核可以超过 $\beta$。我们的玩具解码器在这里派不上用场：它只有 0.6 MB 权重，全部待在 CPU 高速缓存里。
#
# </details>

# %% tags=["hide-input"]
def timed_rounds(calls: dict, rounds: int) -> dict:
    # [en] CPU seconds of each call in each round: one warm-up each, then `rounds` rounds that time every call once, in turn.
    # [zh] 每个调用在每一轮所用的 CPU 秒数：各预热一次，然后进行 `rounds` 轮，每轮依次给每个调用计时一次。
    times = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    for _ in range(rounds):
        for name, fn in calls.items():
            start = time.process_time()
            fn()
            times[name].append(time.process_time() - start)
    return times


def median(seconds: list) -> float:
    return float(np.median(seconds))


def spread(seconds: list) -> float:
    return max(seconds) / min(seconds)


# %%
ROUNDS = 3 if QUICK else 7
WEIGHT_BATCHES = (1, 16, 256) if QUICK else (1, 2, 4, 8, 16, 32, 64, 128, 256)
CACHE_BATCHES = (1, 4) if QUICK else (1, 2, 4, 8)
CACHE_HEADS, CACHE_DIM, CACHE_KEYS = 8, 128, 16384
STREAM_ELEMENTS, MATMUL_SIZE, WIDTH, FP32 = 64 * 2**20, 1024, 6144, 4
# [en] Every call's seconds, filled by the three cells below.
# [zh] 每个调用的秒数，由下面三个单元格填入。
SECONDS = {}
bench_gen = torch.Generator().manual_seed(SEED + 50)

# %% [markdown] lang="en"
# **The roof.** STREAM's two kernels give the bandwidth $\beta$, and the square matrix product a first value of
# $\pi$ (the weight products below may raise it).

# %% [markdown] lang="zh"
# **屋顶线**：STREAM 的两个内核给出带宽 $\beta$，方阵乘法给出 $\pi$ 的初值（下面的权重乘法可能把它调高）。

# %%
# [en] Bytes STREAM credits per element: copy reads b and writes a; triad reads b and c and writes a.
# [zh] STREAM 为每个元素记的字节数：copy 读 b、写 a；triad 读 b 和 c、写 a。
STREAM_BYTES = {"copy": 2 * FP32, "triad": 3 * FP32}
with torch.inference_mode():
    # [en] Three arrays of 256 MiB each, and two square matrices.
    # [zh] 三个数组，每个 256 MiB；两个方阵。
    a, b, c = torch.zeros(STREAM_ELEMENTS), torch.rand(STREAM_ELEMENTS, generator=bench_gen), torch.rand(STREAM_ELEMENTS, generator=bench_gen)
    square_a, square_b = torch.randn(2, MATMUL_SIZE, MATMUL_SIZE, generator=bench_gen)
    SECONDS.update(timed_rounds({"copy": lambda: a.copy_(b), "triad": lambda: torch.add(b, c, alpha=3.0, out=a),
                                 "matmul": lambda: square_a @ square_b}, ROUNDS))
    del a, b, c, square_a, square_b

STREAM_RATES = {name: STREAM_ELEMENTS * STREAM_BYTES[name] / median(SECONDS[name]) for name in STREAM_BYTES}
BANDWIDTH = max(STREAM_RATES.values())
MATMUL_RATE = 2 * MATMUL_SIZE**3 / median(SECONDS["matmul"])
say(en=f"One core of this machine (one thread), FP32: STREAM copy {STREAM_RATES['copy'] / 1e9:.1f} GB/s and triad {STREAM_RATES['triad'] / 1e9:.1f} GB/s "
       f"(spreads {spread(SECONDS['copy']):.2f} and {spread(SECONDS['triad']):.2f}), so the bandwidth is {BANDWIDTH / 1e9:.1f} GB/s; "
       f"the square matrix product reaches {MATMUL_RATE / 1e9:.1f} GFLOP/s (spread {spread(SECONDS['matmul']):.2f}).",
    zh=f"本机的一个核心（单线程），FP32：STREAM copy 为 {STREAM_RATES['copy'] / 1e9:.1f} GB/s，triad 为 {STREAM_RATES['triad'] / 1e9:.1f} GB/s"
       f"（波动范围分别为 {spread(SECONDS['copy']):.2f} 和 {spread(SECONDS['triad']):.2f}），所以带宽取 {BANDWIDTH / 1e9:.1f} GB/s；"
       f"方阵乘法达到 {MATMUL_RATE / 1e9:.1f} GFLOP/s（波动范围 {spread(SECONDS['matmul']):.2f}）。")

# %% [markdown] lang="en"
# **The weights.** A call over $B$ token vectors does $2 B W^2$ FLOPs ($W = 6{,}144$) and reads the $W^2$ weights
# once, plus $B$ inputs and $B$ outputs of $W$ numbers each: the intensity $2BW^2 / (4(W^2 + 2BW))$ grows with
# $B$. The column "ms per token" is the call's time divided by $B$; the column "share of the roof" divides the
# call's FLOP/s by the roof at its intensity, $\min(\pi, \beta I)$; the call that sets $\pi$ shows 100% by
# definition.

# %% [markdown] lang="zh"
# **权重**：一次处理 $B$ 个 token 向量的调用做 $2 B W^2$ 次浮点运算（$W = 6{,}144$），把 $W^2$ 个权重读一遍，另外还有 $B$ 个输入和 $B$ 个输出，各含 $W$ 个数：算术强度 $2BW^2 / (4(W^2 + 2BW))$ 随 $B$ 增大。“每个 token 的毫秒数”一列是一次调用的耗时除以 $B$；“达到屋顶线的比例”一列是这次调用的 FLOP/s 除以它所在算术强度处的屋顶线 $\min(\pi, \beta I)$；决定 $\pi$ 的那次调用按定义就是 100%。

# %%
with torch.inference_mode():
    weight = torch.randn(WIDTH, WIDTH, generator=bench_gen)                                                       # 144 MiB
    inputs = {batch: torch.randn(batch, WIDTH, generator=bench_gen) for batch in WEIGHT_BATCHES}
    SECONDS.update(timed_rounds({("weights", batch): (lambda x=x: F.linear(x, weight)) for batch, x in inputs.items()}, ROUNDS))
    del weight, inputs

WEIGHT_SWEEP = []
for batch in WEIGHT_BATCHES:
    seconds = SECONDS[("weights", batch)]
    flops, bytes_read = 2 * batch * WIDTH * WIDTH, FP32 * (WIDTH * WIDTH + 2 * batch * WIDTH)
    WEIGHT_SWEEP.append({"batch": batch, "intensity": flops / bytes_read, "gflops": flops / median(seconds) / 1e9,
                         "gbs": bytes_read / median(seconds) / 1e9, "ms_per_token": 1e3 * median(seconds) / batch, "spread": spread(seconds)})
# [en] The flat side of the roof: the largest FLOP rate this run measured, the square product's or a weight product's.
# [zh] 屋顶线的水平边：本次运行测得的最大 FLOP 速率，取方阵乘法与各次权重乘法中最快的那个。
PEAK = max(MATMUL_RATE, max(r["gflops"] * 1e9 for r in WEIGHT_SWEEP))
PEAK_BATCH = next((r["batch"] for r in WEIGHT_SWEEP if r["gflops"] * 1e9 == PEAK), None)
RIDGE = PEAK / BANDWIDTH
for r in WEIGHT_SWEEP:
    r["roof_share"] = r["gflops"] * 1e9 / min(PEAK, BANDWIDTH * r["intensity"])
# [en] No point lies above the flat side: it is the largest of these rates.
# [zh] 没有哪个点高于水平边：它就是这些速率中最大的那个。
assert all(r["gflops"] * 1e9 <= PEAK for r in WEIGHT_SWEEP) and MATMUL_RATE <= PEAK
say(en=f"Flat side of the roof: $\\pi = {PEAK / 1e9:.1f}$ GFLOP/s, the largest FLOP rate measured so far, that of "
       + (f"the batch-{PEAK_BATCH} weight product" if PEAK_BATCH else "the square matrix product") + f"; ridge point: {RIDGE:.2f} FLOP/byte.",
    zh=f"屋顶线的水平边：$\\pi = {PEAK / 1e9:.1f}$ GFLOP/s，即目前测得的最大 FLOP 速率，来自"
       + (f" batch 为 {PEAK_BATCH} 的权重乘法" if PEAK_BATCH else "方阵乘法") + f"；拐点：{RIDGE:.2f} FLOP/字节。")
say_table([[str(r["batch"]), f"{r['intensity']:.2f}", f"{r['gbs']:.2f}", f"{r['gflops']:.1f}", f"{r['roof_share']:.0%}",
            f"{r['ms_per_token']:.3f}", f"{r['spread']:.2f}"] for r in WEIGHT_SWEEP],
          en=["weights: batch B", "intensity (FLOP/byte)", "GB/s", "GFLOP/s", "share of the roof", "ms per token", "spread"],
          zh=["权重：batch $B$", "算术强度（FLOP/字节）", "GB/s", "GFLOP/s", "达到屋顶线的比例", "每个 token 的毫秒数", "波动范围"])

# %% [markdown] lang="en"
# **What the table shows.** The call over one row reached {{run:roofline.b1_roof_share:.0%}} of its roof; the calls over {{run:roofline.small_batch_lo}} to
# {{run:roofline.small_batch_hi}} rows, {{run:roofline.small_roof_share_min:.0%}} to
# {{run:roofline.small_roof_share_max:.0%}}. **The roof is a limit, not a prediction**: the flat side is a ceiling by
# construction, the sloped side is STREAM's credited rate (a kernel that only reads may exceed it without breaking the roof; the optional part at the end of this section says why), and a call
# can run far below both: how far below is set by the math library's routine for that shape, which the roof does not
# model (the same optional part compares calls over a few rows with one over one row). To be
# memory-bound by the count says where the limit is, not that a call reaches it.

# %% [markdown] lang="zh"
# **表中可以看出什么。** 单行调用达到了它所在位置屋顶线的 {{run:roofline.b1_roof_share:.0%}}；处理 {{run:roofline.small_batch_lo}} 到 {{run:roofline.small_batch_hi}} 行的调用达到 {{run:roofline.small_roof_share_min:.0%}} 到 {{run:roofline.small_roof_share_max:.0%}}。**屋顶线是界限，而不是预测**：水平边取的就是测得的最大速率，自然是上限；斜边是按 STREAM 的计数规则算出的速率（只读不写的内核可能超过它而并不违背屋顶线，原因见本节末尾的可选部分）；调用也可能远远达不到这两条边，差多少取决于数学库为这种形状选用的例程，而屋顶线并不刻画这一点（同一个可选部分还把处理几行的调用与单行调用作了比较）。按计数受限于内存带宽，说的只是上限在哪里，并不是说调用一定能达到它。

# %% [markdown] lang="en"
# **The cache.** Attention for one query per head reads each sequence's K and V once and does 2 FLOPs per
# number read (a multiply and an add) in each of its two products: 2 FLOP per 4-byte number, 0.5 FLOP per byte,
# whatever the batch, since every sequence has its own cache. The table times `masked_attention` as our decoder calls it.
# It also times the two products alone, for the optional part at the end of this section.

# %% [markdown] lang="zh"
# **缓存**：每个头一个查询的注意力把每条序列的 K 和 V 各读一遍，它的两次乘法中，每读一个数做 2 次浮点运算（一次乘、一次加）：每个 4 字节的数 2 次浮点运算，即每字节 0.5 次，与 batch 无关，因为每条序列都有自己的缓存。下表给我们的解码器所调用的 `masked_attention` 计时。它还单独给其中的两次乘法计时，供本节末尾的可选部分使用。

# %%
with torch.inference_mode():
    # [en] One cache per sequence: K and V of [B, 8, CACHE_KEYS, 128] each, one query per head (the values do not matter here).
    # [zh] 每条序列一份缓存：K 和 V 各为 [B, 8, CACHE_KEYS, 128]，每个头一个查询（这里数值是多少无关紧要）。
    caches = {batch: (torch.full((batch, CACHE_HEADS, 1, CACHE_DIM), 0.1), *torch.full((2, batch, CACHE_HEADS, CACHE_KEYS, CACHE_DIM), 0.1))
              for batch in CACHE_BATCHES}
    everything = torch.ones(1, 1, 1, CACHE_KEYS, dtype=torch.bool)
    # [en] The largest batch's query, keys and values, and softmax weights of the same shape as its scores: [B, 8, 1, CACHE_KEYS].
    # [zh] 最大 batch 的查询、键和值，以及与其分数形状相同的 softmax 权重：[B, 8, 1, CACHE_KEYS]。
    q_big, k_big, v_big = caches[CACHE_BATCHES[-1]]
    w_big = torch.full((CACHE_BATCHES[-1], CACHE_HEADS, 1, CACHE_KEYS), 1 / CACHE_KEYS)
    SECONDS.update(timed_rounds({**{("cache", batch): (lambda kv=kv: masked_attention(*kv, everything)) for batch, kv in caches.items()},
                                 "q @ k^T": lambda: q_big @ k_big.transpose(-2, -1), "k @ q^T": lambda: k_big @ q_big.transpose(-2, -1),
                                 "w @ v": lambda: w_big @ v_big},
                                ROUNDS))
    del caches, q_big, k_big, v_big, w_big

CACHE_SWEEP = []
for batch in CACHE_BATCHES:
    seconds = SECONDS[("cache", batch)]
    flops, bytes_read = 2 * batch * CACHE_HEADS * 2 * CACHE_DIM * CACHE_KEYS, FP32 * 2 * batch * CACHE_HEADS * CACHE_KEYS * CACHE_DIM
    CACHE_SWEEP.append({"batch": batch, "intensity": flops / bytes_read, "gflops": flops / median(seconds) / 1e9,
                        "gbs": bytes_read / median(seconds) / 1e9, "ms_per_sequence": 1e3 * median(seconds) / batch,
                        "spread": spread(seconds)})
assert all(r["gflops"] * 1e9 <= PEAK for r in CACHE_SWEEP)
say_table([[str(r["batch"]), f"{r['intensity']:.2f}", f"{r['gbs']:.2f}", f"{r['gflops']:.1f}", f"{r['ms_per_sequence']:.2f}", f"{r['spread']:.2f}"]
           for r in CACHE_SWEEP],
          en=["cache: batch B", "intensity (FLOP/byte)", "GB/s", "GFLOP/s", "ms per sequence", "spread"],
          zh=["缓存：batch $B$", "算术强度（FLOP/字节）", "GB/s", "GFLOP/s", "每条序列的毫秒数", "波动范围"])
