# %% [markdown] lang="en"
# ## 9. The roofline of one core of this machine
#
# A processor can read memory at some bandwidth $\beta$ (bytes per second) and compute at some peak $\pi$
# (FLOP per second). An operation of intensity $I$ can therefore run at most at $\min(\pi, \beta I)$ FLOP/s:
# the **roofline**. Below the **ridge point** $I^* = \pi / \beta$ the memory is the bottleneck (the operation is
# **memory-bound**); above it, the arithmetic is (**compute-bound**). We measure each side of the roof on this
# machine with a benchmark of its own, one thread, FP32. One thread runs on one core, so this is the roofline
# of **one core**: the bandwidth one core can pull from memory, and one core's arithmetic. With all cores
# the peak grows about with their number, but the bandwidth much less (the cores share the memory
# controllers), so the whole processor's ridge lies further right than the one measured here:
#
# * **the sloped side, the bandwidth $\beta$**: the copy (`a = b`) and triad (`a = b + 3 c`) kernels of STREAM,
#   the standard memory benchmark, on arrays of 256 MiB each. As STREAM does, we credit copy with 8 bytes per
#   element and triad with 12, each array element read or written once, and take the faster of the two as $\beta$;
# * **the flat side, the peak $\pi$**: a square matrix product `[1024, 1024] @ [1024, 1024]`, whose
#   {{run:roofline.matmul_intensity:.0f}} FLOP per byte lie far to the right of this core's ridge. A 1024 product
#   need not be this core's fastest, and the weight products at large batches can run faster, so $\pi$ is the
#   **largest FLOP rate this run measured**: the square product's or any weight product's, whichever is higher.
#   A point can then touch the flat side but never lie above it.
#
# Then two sweeps stand for the two parts of a decode step, each over several batch sizes $B$:
#
# * **weights**: $B$ token vectors times one `[6144, 6144]` weight matrix (144 MiB, read once per call, as a
#   layer's weights are);
# * **cache**: $B$ sequences, each with its own cache of {{run:roofline.cache_keys:,}} keys in 8 heads of 128
#   dimensions (128 MiB of K and V per sequence), attended by one query per head.
#
# Each call must read its bytes from memory, not from a cache of the processor, so every working set here
# (at least 128 MiB) is larger than the last-level cache one core can use on AMD's EPYC processors, which give
# each core complex its own L3 of at most 32 MiB, or 96 MiB with 3D V-Cache. Some server processors share a
# larger L3 among all their cores (a few recent Intel Xeons have several hundred MiB); there part of a
# repeated call's bytes can come from L3, and the rates below would then overstate what memory delivers.
#
# The roof is a **ceiling, not a prediction**: it says how fast a call can run at best (a lower bound on its
# time), not how fast it does run. A routine that falls short of the roof at some shape is simply slower than the
# roof allows. By the roofline's count both parts are memory-bound at batch 1, but a count is not a
# measurement: the batch-1 weight product must also pass a measured test (below). The cache reads, as
# PyTorch's CPU attention computes them, can stay well below the bandwidth (the tables below show how far on
# this machine), so the cache is measured twice: as attention computes it, and its two matrix products alone.

# %% [markdown] lang="zh"
# ## 9. 本机单个核心的 Roofline 模型
#
# 处理器读取内存有一定的带宽 $\beta$（字节/秒），做运算有一定的峰值 $\pi$（FLOP/秒）。因此，算术强度为 $I$ 的运算最快只能达到 $\min(\pi, \beta I)$ FLOP/秒：这就是 **Roofline 模型**（屋顶线模型）。在**拐点** $I^* = \pi / \beta$ 左侧，瓶颈在内存（运算**受限于内存带宽**）；在拐点右侧，瓶颈在运算（**受限于计算**）。屋顶线的两条边各用一个独立的基准测试在本机上测出，单线程，FP32。单个线程运行在一个核心上，所以这是**单个核心**的 Roofline 模型：一个核心能从内存读取的带宽，以及一个核心的运算能力。用上全部核心时，峰值算力大致随核心数增长，带宽却增长得少得多（各核心共用内存控制器），所以整个处理器的拐点比这里测出的更靠右：
#
# * **斜边，即带宽 $\beta$**：标准内存基准测试 STREAM 中的 copy（`a = b`）和 triad（`a = b + 3 c`）两个内核，每个数组 256 MiB。与 STREAM 的做法相同，copy 每个元素记 8 字节，triad 记 12 字节，即每个数组元素读或写一次；$\beta$ 取两者中较快的那个；
# * **水平边，即峰值 $\pi$**：一个方阵乘法 `[1024, 1024] @ [1024, 1024]`，其算术强度为 {{run:roofline.matmul_intensity:.0f}} FLOP/字节，远在这个核心的拐点右侧。1024 阶的方阵乘法未必是这个核心最快的运算，batch 较大的权重乘法可能跑得更快，所以 $\pi$ 取**本次运行测得的最大 FLOP 速率**：方阵乘法与各次权重乘法中最快的那个。这样，测量点可以碰到水平边，但绝不会高于它。
#
# 接着用两组扫描分别代表解码步的两个部分，每组都扫过几种 batch 大小 $B$：
#
# * **权重**：$B$ 个 token 向量乘以一个 `[6144, 6144]` 的权重矩阵（144 MiB，每次调用读一遍，就像一层的权重那样）；
# * **缓存**：$B$ 条序列，每条都有自己的缓存，含 {{run:roofline.cache_keys:,}} 个键，分 8 个头、每头 128 维（每条序列 128 MiB 的 K 和 V），每个头用一个查询去做注意力。
#
# 每次调用都必须从内存读取它的字节，而不是从处理器的缓存中读取，所以这里每份工作集（至少 128 MiB）都大于 AMD EPYC 处理器上单个核心能用到的末级缓存：EPYC 的每个核心复合体（core complex）各有自己的 L3 缓存，最多 32 MiB，采用 3D V-Cache 时为 96 MiB。有些服务器处理器让全部核心共用更大的 L3（近年的几款 Intel Xeon 有几百 MiB）；在这样的处理器上，重复调用的一部分字节可能来自 L3，下面的速率就会高估内存实际提供的带宽。
#
# 屋顶线是一个**上限，而不是预测**：它给出一次调用最快能跑多快（即耗时的下界），而不是实际跑多快。某个例程在某种形状下达不到屋顶线，只说明它比屋顶线允许的慢。按 Roofline 模型的计数，batch 为 1 时两个部分都受限于内存带宽，但计数不等于测量：batch 为 1 的权重乘法还必须通过一项实测判断（见下文）。按 PyTorch 在 CPU 上的注意力写法，缓存读取的速度可能远低于带宽（下面的表格给出本机上的情况），所以缓存要测两次：一次按注意力的写法，另一次单独测其中的两次矩阵乘法。

# %% [markdown] lang="en"
# **Timing on a shared machine.** The machine that builds this notebook may be running other programs, so a
# single timing can vary. Two things keep the results from depending on that. First, we time with this
# process's CPU time (`time.process_time`), not the wall-clock time: the operating system now and then pauses
# our thread to run other programs, and the wall clock would count those pauses too. Second, each case is
# timed for {{run:roofline.rounds}} rounds, and each round times every case of a cell once, in turn, so that
# another program using the memory slows all of them alike; every number below is the median over the rounds,
# and the tables also give the spread (the slowest round divided by the fastest). Our toy decoder is of no use
# here: its 0.6 MB of weights all stay in the CPU's caches, and its decode step is bound by the fixed cost of
# each call, as the first notebook found.

# %% [markdown] lang="zh"
# **在共用的机器上计时**：构建本笔记本的机器可能同时运行着其他程序，单次计时会有波动。我们用两个办法让结果不受它左右。第一，计时用的是本进程的 CPU 时间（`time.process_time`），而不是挂钟时间：操作系统会不时暂停我们的线程，去运行别的程序，挂钟时间会把这些暂停也算进去。第二，每种情形都测 {{run:roofline.rounds}} 轮，每一轮依次给同一个单元格中的每种情形计时一次，这样别的程序占用内存时，所有情形受到同样的影响；下面每个数都是各轮的中位数，表格还给出波动范围（最慢一轮除以最快一轮）。我们的玩具解码器在这里派不上用场：它只有 0.6 MB 权重，全部待在 CPU 缓存里，它的解码步受限于每次调用的固定开销，第一份笔记本已经发现了这一点。

# %%
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
# **The roof.** STREAM's two kernels give the bandwidth $\beta$, the square matrix product a first value of the
# peak $\pi$ (the weight products below may raise it), and their ratio the ridge point. Copy can come out slower than triad: an ordinary store first reads the cache line
# it overwrites, a transfer STREAM does not credit, and it weighs more in copy (one read per write) than in
# triad (two reads per write).

# %% [markdown] lang="zh"
# **屋顶线**：STREAM 的两个内核给出带宽 $\beta$，方阵乘法给出峰值 $\pi$ 的初值（下面的权重乘法可能把它调高），两者之比就是拐点。copy 测出的带宽可能低于 triad：普通的写操作会先把要覆盖的缓存行读进来，这部分传输 STREAM 不计；copy 每写一次只读一次，triad 读两次，所以这部分不计的传输在 copy 中占的比重更大。

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
# call's FLOP/s by the roof at its intensity, $\min(\pi, \beta I)$: 100% would mean the call ran as fast as the
# roof allows.

# %% [markdown] lang="zh"
# **权重**：一次处理 $B$ 个 token 向量的调用做 $2 B W^2$ 次浮点运算（$W = 6{,}144$），把 $W^2$ 个权重读一遍，另外还有 $B$ 个输入和 $B$ 个输出，各含 $W$ 个数：算术强度 $2BW^2 / (4(W^2 + 2BW))$ 随 $B$ 增大。“每个 token 的毫秒数”一列是一次调用的耗时除以 $B$；“达到屋顶线的比例”一列是这次调用的 FLOP/s 除以它所在算术强度处的屋顶线 $\min(\pi, \beta I)$：100% 表示这次调用跑到了屋顶线允许的最快速度。

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
RIDGE = PEAK / BANDWIDTH
for r in WEIGHT_SWEEP:
    r["roof_share"] = r["gflops"] * 1e9 / min(PEAK, BANDWIDTH * r["intensity"])
# [en] No point lies above the flat side: it is the largest of these rates.
# [zh] 没有哪个点高于水平边：它就是这些速率中最大的那个。
assert all(r["gflops"] * 1e9 <= PEAK for r in WEIGHT_SWEEP) and MATMUL_RATE <= PEAK
say(en=f"Flat side of the roof: π = {PEAK / 1e9:.1f} GFLOP/s, the largest FLOP rate measured so far; ridge point: {RIDGE:.2f} FLOP/byte.",
    zh=f"屋顶线的水平边：π = {PEAK / 1e9:.1f} GFLOP/s，即目前测得的最大 FLOP 速率；拐点：{RIDGE:.2f} FLOP/字节。")
say_table([[str(r["batch"]), f"{r['intensity']:.2f}", f"{r['gbs']:.2f}", f"{r['gflops']:.1f}", f"{r['roof_share']:.0%}",
            f"{r['ms_per_token']:.3f}", f"{r['spread']:.2f}"] for r in WEIGHT_SWEEP],
          en=["weights: batch B", "intensity (FLOP/byte)", "GB/s", "GFLOP/s", "share of the roof", "ms per token", "spread"],
          zh=["权重：batch $B$", "算术强度（FLOP/字节）", "GB/s", "GFLOP/s", "达到屋顶线的比例", "每个 token 的毫秒数", "波动范围"])

# %% [markdown] lang="en"
# **Below the roof.** In this run the call over one row reached {{run:roofline.b1_roof_share:.0%}} of its roof
# (the column "share of the roof"). The calls over {{run:roofline.small_batch_lo}} to
# {{run:roofline.small_batch_hi}} rows reached only {{run:roofline.small_roof_share_min:.0%}} to
# {{run:roofline.small_roof_share_max:.0%}} of theirs, and they sag well below the roof in the figure at the end
# of this section. Their intensities lie left of the ridge or just past it, where the roof is what the memory
# allows (just past the ridge, the arithmetic peak). Neither limit set their time on this core: the matrix
# routine ran slower than both at these few rows. To be memory-bound by the count says where the ceiling is,
# not that a call reaches it.

# %% [markdown] lang="zh"
# **屋顶线之下**：本次运行中，单行调用达到了它所在位置屋顶线的 {{run:roofline.b1_roof_share:.0%}}（见表中“达到屋顶线的比例”一列）。处理 {{run:roofline.small_batch_lo}} 到 {{run:roofline.small_batch_hi}} 行的调用只达到 {{run:roofline.small_roof_share_min:.0%}} 到 {{run:roofline.small_roof_share_max:.0%}}，在本节末尾的图中明显低于屋顶线。它们的算术强度在拐点左侧或刚过拐点，在那里屋顶线是内存允许的速度（刚过拐点处则是运算峰值）。在这个核心上，决定它们耗时的不是这两个上限中的任何一个：矩阵乘法例程处理这么少几行时，比这两个上限都慢。按计数受限于内存带宽，说的只是上限在哪里，并不是说调用一定能达到这个上限。

# %% [markdown] lang="en"
# **The cache.** Attention for one query per head reads each sequence's K and V once and does 2 FLOPs per
# number read (a multiply and an add) in each of its two products: 0.5 FLOP per 4-byte number, whatever the
# batch, since every sequence has its own cache. The first table times `masked_attention` as our decoder calls
# it. The second times its two products alone, at batch {{run:roofline.cache_batch_max}}. The score product is
# written two ways that read the same keys and do the same multiply-adds: as attention writes it, a row times a
# transposed matrix (`q @ k^T`), and as a matrix times a column (`k @ q^T`). Both read the same contiguous buffer
# of keys; what differs is the shape in which PyTorch hands it to the math library: the keys are the wide
# second operand of a one-row product in the first form, the tall first operand of a one-column product in the
# second. On the machine that built this notebook both go to the same routine, oneMKL's `SGEMM_BATCH`
# (`MKL_VERBOSE=1` prints each call), whose speed differs between the two shapes. The value product is timed
# as attention writes it, the softmax weights times the values (`w @ v`).

# %% [markdown] lang="zh"
# **缓存**：每个头一个查询的注意力把每条序列的 K 和 V 各读一遍，它的两次乘法中，每读一个数做 2 次浮点运算（一次乘、一次加）：每个 4 字节的数 0.5 次浮点运算，与 batch 无关，因为每条序列都有自己的缓存。第一张表给我们的解码器所调用的 `masked_attention` 计时。第二张表在 batch 为 {{run:roofline.cache_batch_max}} 时单独给其中的两次乘法计时。分数乘法用两种写法，读取的键相同，乘加次数也相同：一种是注意力里的写法，行向量乘以转置的矩阵（`q @ k^T`）；另一种是矩阵乘以列向量（`k @ q^T`）。两种写法读的是同一块连续存放的键；不同的是 PyTorch 把它交给数学库时的形状：第一种写法中，键是单行乘法里宽的第二个操作数；第二种写法中，键是单列乘法里高的第一个操作数。在构建本笔记本的机器上，两者调用的是同一个例程，即 oneMKL 的 `SGEMM_BATCH`（设置 `MKL_VERBOSE=1` 就会打印每次调用），它在这两种形状下的速度不同。值乘法按注意力里的写法计时，即 softmax 权重乘以值（`w @ v`）。

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

# %% [markdown] lang="en"
# The two products alone, at batch {{run:roofline.cache_batch_max}}. Each reads half of the cache's bytes (the keys,
# or the values) at the same 0.5 FLOP/byte; the last column divides the product's time by the time of the
# attention call at the same batch, which also computes the softmax.

# %% [markdown] lang="zh"
# 单独的两次乘法，batch 为 {{run:roofline.cache_batch_max}}。每次乘法读取缓存字节数的一半（键或值），算术强度同样是 0.5 FLOP/字节；最后一列是这次乘法的耗时除以同一 batch 下注意力调用的耗时（注意力调用还要算 softmax）。

# %%
# [en] Bytes of the keys (or of the values) of the largest batch; the attention call's seconds at that batch.
# [zh] 最大 batch 的键（或值）的字节数；该 batch 下注意力调用的秒数。
SCORE_BYTES = FP32 * CACHE_BATCHES[-1] * CACHE_HEADS * CACHE_KEYS * CACHE_DIM
attention_seconds = median(SECONDS[("cache", CACHE_BATCHES[-1])])
PRODUCTS = {form: {"gbs": SCORE_BYTES / median(SECONDS[form]) / 1e9, "gflops": 0.5 * SCORE_BYTES / median(SECONDS[form]) / 1e9,
                   "ms": 1e3 * median(SECONDS[form]), "attention_share": median(SECONDS[form]) / attention_seconds,
                   "spread": spread(SECONDS[form])}
            for form in ("q @ k^T", "k @ q^T", "w @ v")}
SCORES = {form: PRODUCTS[form] for form in ("q @ k^T", "k @ q^T")}
assert all(r["gflops"] * 1e9 <= PEAK for r in PRODUCTS.values())
say_table([[f"`{form}`", f"{r['ms']:.2f}", f"{r['gbs']:.1f}", f"{r['gbs'] * 1e9 / BANDWIDTH:.0%}", f"{r['attention_share']:.0%}", f"{r['spread']:.2f}"]
           for form, r in PRODUCTS.items()],
          en=[f"product, batch {CACHE_BATCHES[-1]}", "ms", "GB/s (keys or values read)", "share of STREAM", "share of the attention call's time", "spread"],
          zh=[f"乘法，batch 为 {CACHE_BATCHES[-1]}", "毫秒", "GB/s（读取键或值）", "占 STREAM 的比例", "占注意力调用耗时的比例", "波动范围"])
