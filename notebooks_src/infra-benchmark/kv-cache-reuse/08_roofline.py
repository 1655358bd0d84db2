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

# %% [markdown] lang="en"
# **The criteria**, two, each with its control:
#
# * **the batch-1 weight product is memory-bound, as measured.** The roofline *classifies* the batch-1 product as
#   memory-bound and the largest batch as compute-bound: their intensities, {{run:roofline.intensity_b1:.2f}} and
#   {{run:roofline.intensity_bmax:.0f}} FLOP/byte, lie on either side of the ridge. For batch 1 the measurement must
#   agree, by two measured numbers, neither of which any formula of ours computes: the product moves its bytes at
#   **at least a third** of the STREAM bandwidth, and does **at most a third** of the peak $\pi$.
#   Its time is set by the bytes it reads, not by its arithmetic. The control applies the same measured
#   test to the largest batch, which must fail it;
# * **batching amortizes the weights, not the cache**: from the smallest to the largest batch, the time per
#   token of the weight product falls below half, while the time per sequence of the cache reads does not.
#   The control is the cache's test applied to the weight product, where it must fail.
#
# Only these coarse properties are asserted, each with about a factor of two to spare in this run (the table
# after the check gives the shares); the numbers themselves are this run's.

# %% [markdown] lang="zh"
# **判据**共两条，各有一个负对照：
#
# * **实测表明，batch 为 1 的权重乘法受限于内存带宽**。Roofline 模型把 batch 为 1 的矩阵乘法**归类**为受限于内存带宽，把最大的 batch 归类为受限于计算：它们的算术强度分别为 {{run:roofline.intensity_b1:.2f}} 和 {{run:roofline.intensity_bmax:.0f}} FLOP/字节，分处拐点两侧。对 batch 为 1 的情形，实测必须与之相符，依据的是两个实测值，它们都不由我们的任何公式算出：这次乘法搬运字节的速度**至少达到** STREAM 带宽的三分之一，而它的 FLOP/s **至多为**峰值 $\pi$ 的三分之一。它的耗时取决于要读取的字节，而不是它的运算。负对照把同样的实测判断用在最大的 batch 上，结果必须不成立；
# * **batch 分摊了权重的开销，却分摊不了缓存的开销**：从最小的 batch 到最大的 batch，权重乘法每个 token 的时间降到一半以下，缓存读取每条序列的时间却没有。负对照把缓存的这项判断用在权重乘法上，结果必须不成立。
#
# 这里只断言这些粗略的性质，在本次运行中每条都留有大约两倍的余地（检查之后的表格给出了各项比例）；具体数值是本次运行的结果。

# %%
def memory_bound(row) -> bool:
    return row["gbs"] * 1e9 >= BANDWIDTH / 3 and row["gflops"] * 1e9 <= PEAK / 3


def amortized(times) -> bool:
    return times[-1] < times[0] / 2


weight_ms = [r["ms_per_token"] for r in WEIGHT_SWEEP]
cache_ms = [r["ms_per_sequence"] for r in CACHE_SWEEP]
first, last = WEIGHT_SWEEP[0], WEIGHT_SWEEP[-1]
ROOFLINE_CHECKS = {"classified": first["intensity"] < RIDGE < last["intensity"], "batch_1_memory_bound": memory_bound(first),
                   "weights_amortized": amortized(weight_ms), "cache_not_amortized": not amortized(cache_ms)}
ROOFLINE_CONTROLS = {"largest_batch_memory_bound": {"batch": last["batch"], "bandwidth_share": last["gbs"] * 1e9 / BANDWIDTH,
                                                    "peak_share": last["gflops"] * 1e9 / PEAK, "caught": not memory_bound(last)},
                     "weights_not_amortized": {"caught": amortized(weight_ms)}}
assert all(ROOFLINE_CHECKS.values()) and all(c["caught"] for c in ROOFLINE_CONTROLS.values())
say(en=f"Both criteria hold, and both controls are caught. Weights: from {weight_ms[0]:.3f} ms to {weight_ms[-1]:.3f} ms per token; "
       f"cache: from {cache_ms[0]:.2f} ms to {cache_ms[-1]:.2f} ms per sequence.",
    zh=f"两条判据都成立，两个负对照都被查出。权重：每个 token 从 {weight_ms[0]:.3f} 毫秒降到 {weight_ms[-1]:.3f} 毫秒；"
       f"缓存：每条序列从 {cache_ms[0]:.2f} 毫秒变为 {cache_ms[-1]:.2f} 毫秒。")

# %% [markdown] lang="en"
# **The shares behind the test.** For each call, the two measured shares the test compares with a third. The
# table also applies the test to the cache, as attention reads it at batch 1 and as the score product
# `k @ q^T` reads the keys at batch {{run:roofline.cache_batch_max}}: these two rows are reported, not asserted,
# since how fast a library reads a cache depends on its routines (the note after the table).

# %% [markdown] lang="zh"
# **判断所依据的比例**：下表给出每个调用的两个实测比例，判断就是把它们与三分之一比较。表中还把同样的判断用在缓存上：一行是 batch 为 1 时按注意力的写法读取缓存，一行是 batch 为 {{run:roofline.cache_batch_max}} 时分数乘法 `k @ q^T` 读取键。这两行只报告，不做断言，因为数学库读取缓存有多快取决于它的例程（见表后的说明）。

# %%
# [en] Each row names the call that was timed; the last two rows (the cache) are reported, not asserted.
# [zh] 每一行写明被计时的调用；最后两行（缓存）只报告，不做断言。
say_table([[f"`{call}`", str(batch), f"{r['gbs'] * 1e9 / BANDWIDTH:.0%}", f"{r['gflops'] * 1e9 / PEAK:.0%}", f"`{memory_bound(r)}`"]
           for call, batch, r in (("F.linear(x, weight)", first["batch"], first), ("F.linear(x, weight)", last["batch"], last),
                                  ("masked_attention(q, k, v, ...)", CACHE_SWEEP[0]["batch"], CACHE_SWEEP[0]),
                                  ("k @ q^T", CACHE_BATCHES[-1], SCORES["k @ q^T"]))],
          en=["call", "batch B", "bytes per second, share of STREAM", "FLOP/s, share of π",
              "memory-bound (bytes share >= 1/3, FLOP/s share <= 1/3)"],
          zh=["调用", "batch $B$", "每秒字节数占 STREAM 的比例", "FLOP/s 占 π 的比例",
              "受限于内存带宽（带宽占比 ≥ 1/3 且算力占比 ≤ 1/3）"])

# %% [markdown] lang="en"
# **A note on the cache reads.** The roofline classifies the cache reads as memory-bound: at 0.5 FLOP/byte
# they lie far left of the ridge. As attention computes them, at batch 1, they moved their bytes at
# {{run:roofline.cache_bandwidth_share:.0%}} of the STREAM bandwidth while using {{run:roofline.cache_peak_share:.0%}} of
# the arithmetic peak; the score product alone, written `k @ q^T`, read its keys at
# {{run:roofline.scores_kq_share:.0%}} of the STREAM bandwidth, and written `q @ k^T`, as attention writes it, at
# {{run:roofline.scores_qk_share:.0%}}. The value product `w @ v` read the values at
# {{run:roofline.values_share:.0%}} of the STREAM bandwidth; at batch {{run:roofline.cache_batch_max}} the score
# product as attention writes it took {{run:roofline.scores_qk_attention_share:.0%}} of the attention call's time and
# the value product {{run:roofline.values_attention_share:.0%}}, so both halves count. (Each product was timed as a
# call of its own, outside the attention call, so the two shares need not add up to 100%.) Where `k @ q^T` is far faster
# than `q @ k^T`, what holds the score half back is neither side of the roof nor the data's layout (the same
# buffer), but how fast the library's routine runs for the shape it is handed; we found no such faster form for
# the value half here. Nor is the fixed cost of a call the reason: each product, timed alone, takes milliseconds
# (the table's column "ms"). How much the
# shape matters depends on the math library and the processor, so these numbers are reported, not asserted. A decode kernel on a GPU (Flash-Decoding, vLLM's paged attention) is written
# for exactly this job: to stream the whole cache through at the memory bandwidth. (A kernel that only reads
# can even pass the STREAM figure: STREAM credits each kernel with the bytes its loop names, but an ordinary
# store first reads the cache line it overwrites, a transfer STREAM does not count.)

# %% [markdown] lang="zh"
# **关于缓存读取的说明**：Roofline 模型把缓存读取归类为受限于内存带宽：它的算术强度只有 0.5 FLOP/字节，远在拐点左侧。按注意力的写法，batch 为 1 时，它搬运字节的速度是 STREAM 带宽的 {{run:roofline.cache_bandwidth_share:.0%}}，同时用了运算峰值的 {{run:roofline.cache_peak_share:.0%}}；单独的分数乘法写成 `k @ q^T` 时，读取键的速度是 STREAM 带宽的 {{run:roofline.scores_kq_share:.0%}}，按注意力里的写法 `q @ k^T` 则是 {{run:roofline.scores_qk_share:.0%}}。值乘法 `w @ v` 读取值的速度是 STREAM 带宽的 {{run:roofline.values_share:.0%}}；batch 为 {{run:roofline.cache_batch_max}} 时，按注意力写法的分数乘法占注意力调用耗时的 {{run:roofline.scores_qk_attention_share:.0%}}，值乘法占 {{run:roofline.values_attention_share:.0%}}，两半都不可忽略。（每次乘法都是在注意力调用之外单独计时的，所以这两个比例相加不必等于 100%。）如果 `k @ q^T` 远快于 `q @ k^T`，那么拖慢分数这一半的既不是屋顶线的斜边或水平边，也不是数据的布局（两者读的是同一块内存），而是数学库的例程在拿到的那种形状下跑得多快；对值这一半，我们在这里没有找到更快的写法。每次调用的固定开销也不是原因：单独计时的每次乘法都要几毫秒（见表中“毫秒”一列）。形状的影响有多大取决于数学库和处理器，所以这些数只报告，不做断言。GPU 上的解码内核（Flash-Decoding、vLLM 的分页注意力）正是为这件事而写的：以内存带宽把整个缓存一路读完。（只读不写的内核甚至可以超过 STREAM 的数字：STREAM 只给每个内核记它的循环中写明的字节，而普通的写操作会先把要覆盖的缓存行读进来，这部分传输 STREAM 不计。）

# %% [markdown] lang="en"
# **What a call over a few rows costs.** A call over $B$ rows reads the same weight bytes as a call over one,
# which is what speculative decoding's verifying call over $k + 1$ tokens saves on the weights (it also reads the
# sequence's cache once for its $k + 1$ queries, section 6). It would also take about the
# same time only if both calls ran at the memory roof; the roof is a ceiling, so the counts alone do not predict
# the time of a given row. On the machine that built this notebook every
# batch size calls the same routine, oneMKL's `SGEMM` (setting the environment variable `MKL_VERBOSE=1` prints
# each call), but how fast it reads the matrix depends on the number of rows, not only on the bytes: the calls
# over a few rows sat below the roof (above). In this run
# a call over {{run:roofline.small_batch_lo}} to {{run:roofline.small_batch_hi}} rows took
# {{run:roofline.call_ratio_min:.1f}} to {{run:roofline.call_ratio_max:.1f}} times as long as a call over one (the table
# below). A ratio below $B$ means each token's share of the time fell; a ratio near 1 would mean the call cost
# about the time of one. These are one run's numbers, on a machine that may have been running other work;
# another library or processor gives other ratios.

# %% [markdown] lang="zh"
# **处理几行的一次调用要花多少时间**：处理 $B$ 行的一次调用读取的权重字节与只处理一行的调用相同，投机解码中验证 $k + 1$ 个 token 的那次调用在权重上省下的正是这些字节（它还只读一遍这条序列的缓存，供 $k + 1$ 个查询使用，见第 6 节）。只有两次调用都跑到内存那一侧的屋顶线时，它们的耗时才会差不多相同；屋顶线只是上限，所以单凭计数预测不了表中某一行的耗时。在构建本笔记本的机器上，每种 batch 大小调用的都是同一个例程，即 oneMKL 的 `SGEMM`（设置环境变量 `MKL_VERBOSE=1` 就会打印每次调用），但这个例程读取矩阵的速度不只取决于字节数，也取决于行数：处理几行的调用都低于屋顶线（见上文）。本次运行中，一次处理 {{run:roofline.small_batch_lo}} 到 {{run:roofline.small_batch_hi}} 行的调用，耗时是只处理一行的调用的 {{run:roofline.call_ratio_min:.1f}} 到 {{run:roofline.call_ratio_max:.1f}} 倍（见下表）。比值小于 $B$，说明每个 token 分到的耗时下降了；比值接近 1，才说明这次调用只花了一次单行调用的时间。这些是一次运行的结果，运行时机器上可能还有别的任务；换一个数学库或处理器，比值也会不同。

# %%
# [en] What a call over a few rows costs next to a call over one (section 6's verifying call): reported, not asserted.
# [zh] 处理几行的一次调用与只处理一行的调用相比耗时多少（第 6 节的验证调用）：只报告，不做断言。
SMALL_BATCHES = [b for b in WEIGHT_BATCHES if 1 < b <= 8] or [WEIGHT_BATCHES[1]]
CALL_RATIOS = {b: median(SECONDS[("weights", b)]) / median(SECONDS[("weights", 1)]) for b in SMALL_BATCHES}
say_table([[str(b), f"{ratio:.2f}"] for b, ratio in CALL_RATIOS.items()],
          en=["rows per call B", "time of one call, in one-row calls"],
          zh=["每次调用的行数 $B$", "一次调用的耗时（以单行调用为单位）"])

# %% [markdown] lang="en"
# **The picture.** The roof of this core has a sloped side set by STREAM, $\beta = {{run:roofline.bandwidth_gbs:.1f}}$ GB/s,
# and a flat side set by the largest FLOP rate this run measured, $\pi = {{run:roofline.peak_gflops:.0f}}$ GFLOP/s; the ridge lies at
# {{run:roofline.ridge:.1f}} FLOP/byte. The batch-1 product, at {{run:roofline.intensity_b1:.2f}} FLOP/byte, streamed its
# weights at {{run:roofline.weight_gbs_b1:.1f}} GB/s, {{run:roofline.b1_bandwidth_share:.0%}} of the STREAM bandwidth, and did
# {{run:roofline.gflops_b1:.1f}} GFLOP/s, {{run:roofline.b1_peak_share:.0%}} of the peak. At batch
# {{run:roofline.weight_batch_max}} the same weights serve {{run:roofline.weight_batch_max}} tokens at
# {{run:roofline.gflops_bmax:.0f}} GFLOP/s, and a token's share of the call's time is 1/{{run:roofline.amortization:.1f}} of
# the batch-1 time. The cache reads stay at 0.5 FLOP/byte whatever the batch, and their time per sequence does
# not fall the way the weights' time per token does ({{run:roofline.cache_ms_first:.1f}} ms at batch 1,
# {{run:roofline.cache_ms_last:.1f}} ms at batch {{run:roofline.cache_batch_max}}).
#
# The published models' decode steps at batch 1 (between {{run:cost.min_intensity_b1:.2f}} and
# {{run:cost.max_intensity_b1:.2f}} FLOP/byte with 16-bit numbers) lie more than a hundred times below a data-centre
# GPU's ridge: an NVIDIA H100 SXM offers {{run:roofline.gpu_peak_tflops:.0f}} TFLOP/s in dense BF16 and
# {{run:roofline.gpu_bandwidth_tbs:.2f}} TB/s (its datasheet), a ridge at {{run:roofline.gpu_ridge:.0f}} FLOP/byte. There a
# call over $k + 1$ rows instead of one still lies far below the ridge, so by the roofline's count both calls
# have the same floor on their time, the time of reading their bytes; they take about that time only where
# the kernel streams its bytes at the memory bandwidth, which is what GPU decode kernels are written to do,
# and which this core's matrix routine did at one row but not at a few. This is why a decode step can be at
# best as fast as memory lets it be, and why the mechanisms of this series pay off: batching shares the
# weights' bytes, GQA, MLA and quantization shrink the cache's bytes, and speculative decoding verifies $k + 1$
# tokens for the weight bytes of one and one read of the sequence's cache.
#
# *Figure: left, measurements only, on one core of this machine (`measured on one core`): the roof (black:
# $\min(\pi, \beta I)$, with $\beta$ from STREAM and $\pi$ the largest FLOP rate measured, `peak` in the legend,
# both in FP32), the weight product at each batch size (blue circles, batch size written beside each; the
# points for {{run:roofline.small_batch_lo}} to {{run:roofline.small_batch_hi}} rows sag below the roof, at
# {{run:roofline.small_roof_share_min:.0%}} to {{run:roofline.small_roof_share_max:.0%}} of it in this run, because the
# matrix routine, not the memory, set their time), the cache
# reads as attention computes them (orange triangles), and the score product alone written `k @ q^T` at batch
# {{run:roofline.cache_batch_max}} (hollow orange triangle): the same keys, handed to the library in the other shape.
# Right, predictions, not measurements (`predicted from the published configurations (bf16)`): the decode step's
# intensity against the batch size for the published models, counted from their configurations with 16-bit
# weights and cache at a context of 4,096 tokens, with the ridge points of this core (black, dashed,
# `ridge of one core (fp32)`, measured in FP32, so only a rough mark for 16-bit numbers) and of an H100 (grey,
# dotted, from its datasheet).*

# %% [markdown] lang="zh"
# **图示**：这个核心的屋顶线斜边由 STREAM 决定，$\beta = {{run:roofline.bandwidth_gbs:.1f}}$ GB/s；水平边由本次运行测得的最大 FLOP 速率决定，$\pi = {{run:roofline.peak_gflops:.0f}}$ GFLOP/s；拐点位于 {{run:roofline.ridge:.1f}} FLOP/字节。batch 为 1 的矩阵乘法算术强度为 {{run:roofline.intensity_b1:.2f}} FLOP/字节，读取权重的速度为 {{run:roofline.weight_gbs_b1:.1f}} GB/s，达到 STREAM 带宽的 {{run:roofline.b1_bandwidth_share:.0%}}；它的速度为 {{run:roofline.gflops_b1:.1f}} GFLOP/s，只有峰值的 {{run:roofline.b1_peak_share:.0%}}。batch 为 {{run:roofline.weight_batch_max}} 时，同样的权重服务 {{run:roofline.weight_batch_max}} 个 token，速度达到 {{run:roofline.gflops_bmax:.0f}} GFLOP/s，每个 token 的耗时只有 batch 为 1 时的 1/{{run:roofline.amortization:.1f}}。缓存读取无论 batch 多大，算术强度都停留在 0.5 FLOP/字节；每条序列所花的时间也不像权重那样随 batch 下降（batch 为 1 时 {{run:roofline.cache_ms_first:.1f}} 毫秒，batch 为 {{run:roofline.cache_batch_max}} 时 {{run:roofline.cache_ms_last:.1f}} 毫秒）。
#
# 各公开模型在 batch 为 1 时的解码步（16 位数值下为 {{run:cost.min_intensity_b1:.2f}} 到 {{run:cost.max_intensity_b1:.2f}} FLOP/字节）不到数据中心 GPU 拐点的百分之一：NVIDIA H100 SXM 的稠密 BF16 算力为 {{run:roofline.gpu_peak_tflops:.0f}} TFLOP/s，带宽为 {{run:roofline.gpu_bandwidth_tbs:.2f}} TB/s（见其数据手册），拐点位于 {{run:roofline.gpu_ridge:.0f}} FLOP/字节。在那里，把一行换成 $k + 1$ 行的调用仍远在拐点左侧，所以按 Roofline 模型的计数，两次调用耗时的下界相同，都是读取各自字节的时间；只有内核以内存带宽读取字节时，耗时才接近这个下界。GPU 上的解码内核正是为此而写的；而这个核心的矩阵乘法例程处理一行时做到了，处理几行时没有做到。这就是为什么解码步最快也只能达到内存允许的速度，也是本系列各种机制能带来收益的原因：batch 让许多 token 分摊权重的字节；GQA、MLA 和量化减少缓存的字节；投机解码则只花一个 token 的权重字节和一遍这条序列的缓存读取，验证 $k + 1$ 个 token。
#
# *图：左图只有测量值，都是在本机的一个核心上测得的（标题 measured on one core）。黑线是屋顶线 $\min(\pi, \beta I)$，$\beta$ 取自 STREAM，$\pi$ 是本次运行测得的最大 FLOP 速率，都是 FP32；图例中的 roof 给出这两个数（peak 即峰值 $\pi$）。weights x B tokens（蓝色圆点，旁边标注 batch 大小）是各种 batch 大小下的权重乘法，其中 {{run:roofline.small_batch_lo}} 到 {{run:roofline.small_batch_hi}} 行的点明显低于屋顶线，本次运行中只达到屋顶线的 {{run:roofline.small_roof_share_min:.0%}} 到 {{run:roofline.small_roof_share_max:.0%}}，因为决定它们耗时的是矩阵乘法例程，而不是内存；cache reads, B sequences（橙色三角形）是按注意力的写法读取缓存；scores alone as k @ q^T, B = {{run:roofline.cache_batch_max}}（空心橙色三角形）是 batch 为 {{run:roofline.cache_batch_max}} 时单独的分数乘法写成 `k @ q^T` 的结果：同样的键，以另一种形状交给数学库。横轴 arithmetic intensity (FLOP/byte) 是算术强度（FLOP/字节），纵轴 GFLOP/s (1 thread, fp32) 是单线程 FP32 下每秒的十亿次浮点运算数。右图是预测值，不是测量值（标题 predicted from the published configurations (bf16) 的意思是“由公开模型的配置算出，16 位”）：按各公开模型的配置、16 位权重和缓存、4,096 个 token 的上下文，算出解码步的算术强度（纵轴 decode step intensity (FLOP/byte)）随 batch 大小（横轴 batch size B）的变化，并画出这个核心的拐点（黑色虚线，ridge of one core (fp32)，它是用 FP32 测出的，对 16 位数值只是粗略的参照）和 H100 的拐点（灰色点线，ridge of an H100 (bf16)，取自其数据手册）。*

# %%
# [en] NVIDIA H100 SXM datasheet: 1,979 TFLOP/s BF16 with sparsity (989 dense), 3.35 TB/s HBM3.
# [zh] NVIDIA H100 SXM 数据手册：BF16 稀疏算力 1,979 TFLOP/s（稠密 989），HBM3 带宽 3.35 TB/s。
GPU_PEAK, GPU_BANDWIDTH = 989e12, 3.35e12
GPU_RIDGE = GPU_PEAK / GPU_BANDWIDTH
PLOT_BATCHES = [2 ** i for i in range(10)]
colors = plt.rcParams["axes.prop_cycle"].by_key()["color"][2:]

fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4))
xs = np.logspace(-1.3, 3, 200)
left.loglog(xs, np.minimum(PEAK, BANDWIDTH * xs) / 1e9, color="black",
            label=f"roof: STREAM {BANDWIDTH / 1e9:.1f} GB/s, peak {PEAK / 1e9:.0f} GFLOP/s")
left.plot([r["intensity"] for r in WEIGHT_SWEEP], [r["gflops"] for r in WEIGHT_SWEEP], "o", color="tab:blue", label="weights x B tokens")
for r in WEIGHT_SWEEP:
    left.annotate(str(r["batch"]), (r["intensity"], r["gflops"]), textcoords="offset points", xytext=(4, -10), fontsize=7)
left.plot([r["intensity"] for r in CACHE_SWEEP], [r["gflops"] for r in CACHE_SWEEP], "^", color="tab:orange", label="cache reads, B sequences")
# [en] The score product alone, written k @ q^T: 2 FLOPs per 4-byte key element, 0.5 FLOP/byte like the cache reads.
# [zh] 单独的分数乘法，写成 k @ q^T：每个 4 字节的键元素 2 次浮点运算，和缓存读取一样是 0.5 FLOP/字节。
left.plot([0.5], [SCORES["k @ q^T"]["gbs"] * 0.5], "^", markerfacecolor="none", color="tab:orange",
          label=f"scores alone as k @ q^T, B = {CACHE_BATCHES[-1]}")
left.set_xlabel("arithmetic intensity (FLOP/byte)")
left.set_ylabel("GFLOP/s (1 thread, fp32)")
left.set_title("measured on one core", fontsize=9)
left.legend(fontsize=7, loc="lower right")
for shape, color in zip(SHAPES, colors):
    right.loglog(PLOT_BATCHES, [decode_step_cost(shape, b, COST_CONTEXT, BF16)["intensity"] for b in PLOT_BATCHES], "-", color=color, label=shape.name)
right.axhline(RIDGE, color="black", linestyle="--", label="ridge of one core (fp32)")
right.axhline(GPU_RIDGE, color="gray", linestyle=":", label="ridge of an H100 (bf16)")
right.set_xlabel("batch size B")
right.set_ylabel("decode step intensity (FLOP/byte)")
right.set_title("predicted from the published configurations (bf16)", fontsize=9)
# [en] The legend sits outside the axes, so that it hides neither ridge line.
# [zh] 图例放在坐标区之外，不遮挡任何一条拐点线。
right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
fig.tight_layout()
ROOFLINE_PNG = OUT / "roofline.png"
fig.savefig(ROOFLINE_PNG, dpi=120)
plt.show()
assert all(COSTS[s.name][1]["intensity"] < GPU_RIDGE / 100 for s in SHAPES)

# %% [markdown] lang="en"
# *The next section is the first notebook's check of our decoder against Hugging Face GPT-2, repeated
# unchanged: it is here because section 11 needs its mapping of our weights into `GPT2LMHeadModel`.*

# %% [markdown] lang="zh"
# *下一节是第一份笔记本中用 Hugging Face GPT-2 检验我们解码器的内容，原样重复：它之所以出现在这里，是因为第 11 节要用到其中把我们的权重装进 `GPT2LMHeadModel` 的映射。*
