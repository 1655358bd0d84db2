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
