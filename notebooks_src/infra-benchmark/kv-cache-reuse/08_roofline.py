# %% [markdown] lang="en"
# ## 9. The roofline of this machine
#
# A processor can read memory at some bandwidth $\beta$ (bytes per second) and compute at some peak $\pi$
# (FLOP per second). An operation of intensity $I$ can therefore run at most at $\min(\pi, \beta I)$ FLOP/s:
# the **roofline**. Below the **ridge point** $I^* = \pi / \beta$ the memory is the bottleneck (the operation is
# **memory-bound**); above it, the arithmetic is (**compute-bound**). We measure both numbers on this machine,
# with one thread and FP32, in a few seconds:
#
# * **bandwidth**: the sum of a 256 MiB buffer, larger than the caches of common CPUs, which reads every byte
#   once;
# * **matmul throughput**: a large matrix product, `[256, 4096] @ [4096, 4096]`, whose intensity is over a
#   hundred.
#
# Then two sweeps stand for the two parts of a decode step, each over several batch sizes $B$:
#
# * **weights**: $B$ token vectors times one `[4096, 4096]` weight matrix (64 MiB, read once per call, as a
#   layer's weights are);
# * **cache**: $B$ sequences, each with its own cache of {{run:roofline.cache_keys:,}} keys in 8 heads of 128
#   dimensions (64 MiB of K and V per sequence), attended by one query per head.
#
# The roof is drawn with the best rates observed in this section, so that no measurement lies above it: the
# fastest read rate (of the sum or of any product) for the bandwidth, the fastest product for the throughput. Our toy decoder
# is no use here: its 0.6 MB of weights sit in the CPU's caches, and its decode step is bound
# by the fixed cost of each call, as the first notebook found. The sweeps use sizes at which memory is
# really read.

# %% [markdown] lang="zh"
# ## 9. 本机的 Roofline 模型
#
# 处理器读取内存有一定的带宽 $\beta$（字节/秒），做运算有一定的峰值 $\pi$（FLOP/秒）。因此，算术强度为 $I$ 的运算最快只能达到 $\min(\pi, \beta I)$ FLOP/秒：这就是 **Roofline 模型**（屋顶线模型）。在**拐点** $I^* = \pi / \beta$ 左侧，瓶颈在内存（运算**受限于内存带宽**）；在拐点右侧，瓶颈在运算（**受限于计算**）。我们用单线程、FP32，花几秒钟在本机上测出这两个数：
#
# * **带宽**：对一个 256 MiB 的缓冲区求和（它比常见 CPU 的各级缓存都大），每个字节恰好读一次；
# * **矩阵乘法吞吐量**：一个大的矩阵乘法 `[256, 4096] @ [4096, 4096]`，其算术强度超过一百。
#
# 接着用两组扫描分别代表解码步的两个部分，每组都扫过几种 batch 大小 $B$：
#
# * **权重**：$B$ 个 token 向量乘以一个 `[4096, 4096]` 的权重矩阵（64 MiB，每次调用读一遍，就像一层的权重那样）；
# * **缓存**：$B$ 条序列，每条都有自己的缓存，含 {{run:roofline.cache_keys:,}} 个键，分 8 个头、每头 128 维（每条序列 64 MiB 的 K 和 V），每个头用一个查询去做注意力。
#
# 屋顶线按本节观察到的最佳速率来画，这样任何测量点都不会高出屋顶线：带宽取最快的读取速率（求和或任何一次乘法），吞吐量取最快的那次乘法。我们的玩具解码器在这里派不上用场：它只有 0.6 MB 权重，全部待在 CPU 缓存里，它的解码步受限于每次调用的固定开销，第一份笔记本已经发现了这一点。这两组扫描用的尺寸则确实要从内存中读取数据。

# %%
def best_times(calls: dict, rounds: int) -> dict:
    # [en] Seconds per call: one warm-up each, then `rounds` rounds that time every call once, in turn; the fastest of each.
    # [zh] 每次调用的秒数：各预热一次，然后进行 `rounds` 轮、每轮依次给每个调用计时一次；各取最快的一次。
    times = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    for _ in range(rounds):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


ROUNDS = 2 if QUICK else 4
WEIGHT_BATCHES = (1, 16, 256) if QUICK else (1, 2, 4, 8, 16, 32, 64, 128, 256)
CACHE_BATCHES = (1, 4) if QUICK else (1, 2, 4, 8)
CACHE_HEADS, CACHE_DIM, CACHE_KEYS = 8, 128, 8192
FP32 = 4

with torch.inference_mode():
    stream = torch.ones(64 * 2**20)                                           # 256 MiB
    STREAM_BANDWIDTH = stream.numel() * FP32 / best_times({"sum": lambda: stream.sum()}, ROUNDS)["sum"]
    del stream
    weight = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(SEED + 50))     # 64 MiB
    big = torch.randn(256, 4096)
    MATMUL = 2 * 256 * 4096 * 4096 / best_times({"matmul": lambda: F.linear(big, weight)}, ROUNDS)["matmul"]

    inputs = {batch: torch.randn(batch, 4096) for batch in WEIGHT_BATCHES}
    seconds = best_times({batch: (lambda x=x: F.linear(x, weight)) for batch, x in inputs.items()}, ROUNDS)
    WEIGHT_SWEEP = []
    for batch in WEIGHT_BATCHES:
        flops, bytes_read = 2 * batch * weight.numel(), FP32 * (weight.numel() + 2 * batch * 4096)
        WEIGHT_SWEEP.append({"batch": batch, "intensity": flops / bytes_read, "gflops": flops / seconds[batch] / 1e9,
                             "gbs": bytes_read / seconds[batch] / 1e9, "ms_per_token": 1e3 * seconds[batch] / batch})
    del weight, big, inputs

    # [en] One cache per sequence: K and V of [B, 8, CACHE_KEYS, 128] each, one query per head (the values do not matter here).
    # [zh] 每条序列一份缓存：K 和 V 各为 [B, 8, CACHE_KEYS, 128]，每个头一个查询（这里数值是多少无关紧要）。
    caches = {batch: (torch.full((batch, CACHE_HEADS, 1, CACHE_DIM), 0.1), *torch.full((2, batch, CACHE_HEADS, CACHE_KEYS, CACHE_DIM), 0.1))
              for batch in CACHE_BATCHES}
    everything = torch.ones(1, 1, 1, CACHE_KEYS, dtype=torch.bool)
    seconds = best_times({batch: (lambda c=c: masked_attention(*c, everything)) for batch, c in caches.items()}, ROUNDS)
    CACHE_SWEEP = []
    for batch in CACHE_BATCHES:
        flops, bytes_read = 2 * batch * CACHE_HEADS * 2 * CACHE_DIM * CACHE_KEYS, FP32 * 2 * batch * CACHE_HEADS * CACHE_KEYS * CACHE_DIM
        CACHE_SWEEP.append({"batch": batch, "intensity": flops / bytes_read, "gflops": flops / seconds[batch] / 1e9,
                            "gbs": bytes_read / seconds[batch] / 1e9, "ms_per_sequence": 1e3 * seconds[batch] / batch})
    del caches

# [en] The roof: the best rates observed, so that no measurement lies above it (timings on a busy machine vary).
# [zh] 屋顶线取观察到的最佳速率，这样任何测量点都不会高出屋顶线（繁忙的机器上计时会有波动）。
BANDWIDTH = max(STREAM_BANDWIDTH, max(r["gbs"] for r in WEIGHT_SWEEP + CACHE_SWEEP) * 1e9)
PEAK = max(MATMUL, max(r["gflops"] for r in WEIGHT_SWEEP + CACHE_SWEEP) * 1e9)
RIDGE = PEAK / BANDWIDTH

say(en=f"This machine, one thread, FP32: read bandwidth {STREAM_BANDWIDTH / 1e9:.1f} GB/s (the sum), matmul throughput "
       f"{MATMUL / 1e9:.1f} GFLOP/s (the large product); roof: {BANDWIDTH / 1e9:.1f} GB/s and {PEAK / 1e9:.1f} GFLOP/s, "
       f"ridge point {RIDGE:.2f} FLOP/byte.",
    zh=f"本机，单线程，FP32：读带宽 {STREAM_BANDWIDTH / 1e9:.1f} GB/s（求和），矩阵乘法吞吐量 {MATMUL / 1e9:.1f} GFLOP/s"
       f"（大矩阵乘法）；屋顶线：{BANDWIDTH / 1e9:.1f} GB/s 和 {PEAK / 1e9:.1f} GFLOP/s，拐点 {RIDGE:.2f} FLOP/字节。")
say_table([[str(r["batch"]), f"{r['intensity']:.2f}", f"{r['gflops']:.1f}", f"{r['ms_per_token']:.3f}"] for r in WEIGHT_SWEEP],
          en=["weights: batch B", "intensity (FLOP/byte)", "GFLOP/s", "ms per token"],
          zh=["权重：batch B", "算术强度（FLOP/字节）", "GFLOP/s", "每个 token 的毫秒数"])
say_table([[str(r["batch"]), f"{r['intensity']:.2f}", f"{r['gflops']:.1f}", f"{r['ms_per_sequence']:.2f}"] for r in CACHE_SWEEP],
          en=["cache: batch B", "intensity (FLOP/byte)", "GFLOP/s", "ms per sequence"],
          zh=["缓存：batch B", "算术强度（FLOP/字节）", "GFLOP/s", "每条序列的毫秒数"])

# %% [markdown] lang="en"
# **The criteria**, two, each with its control:
#
# * **the batch-1 product is memory-bound**: its intensity lies left of the measured ridge point. The control
#   applies the same test to the largest batch, which must come out compute-bound;
# * **batching amortizes the weights, not the cache**: from the smallest to the largest batch, the time per
#   token of the weight product falls below half, while the time per sequence of the cache reads does not.
#   The control is the cache's test applied to the weight product, where it must fail.
#
# Only these coarse properties are asserted, with wide margins; the numbers themselves are this run's, and
# timings on a machine shared with other work vary from run to run.

# %% [markdown] lang="zh"
# **判据**共两条，各有一个负对照：
#
# * **batch 为 1 的矩阵乘法受限于内存带宽**：它的算术强度位于实测拐点的左侧。负对照把同样的判断用在最大的 batch 上，结果必须是受限于计算；
# * **batch 分摊了权重的开销，却分摊不了缓存的开销**：从最小的 batch 到最大的 batch，权重乘法每个 token 的时间降到一半以下，缓存读取每条序列的时间却没有。负对照把缓存的这项判断用在权重乘法上，结果必须不成立。
#
# 这里只断言这些粗略的性质，并留有很大的余地；具体数值是本次运行的结果，在与其他任务共用的机器上，每次运行的计时都会有所不同。

# %%
def memory_bound(intensity) -> bool:
    return intensity < RIDGE


def amortized(times) -> bool:
    return times[-1] < times[0] / 2


weight_ms = [r["ms_per_token"] for r in WEIGHT_SWEEP]
cache_ms = [r["ms_per_sequence"] for r in CACHE_SWEEP]
ROOFLINE_CHECKS = {"batch_1_memory_bound": memory_bound(WEIGHT_SWEEP[0]["intensity"]),
                   "weights_amortized": amortized(weight_ms), "cache_not_amortized": not amortized(cache_ms)}
ROOFLINE_CONTROLS = {"largest_batch_memory_bound": {"caught": not memory_bound(WEIGHT_SWEEP[-1]["intensity"])},
                     "weights_not_amortized": {"caught": amortized(weight_ms)}}
say(en=f"Batch 1: intensity {WEIGHT_SWEEP[0]['intensity']:.2f} < ridge {RIDGE:.2f}: memory-bound `{ROOFLINE_CHECKS['batch_1_memory_bound']}`; "
       f"batch {WEIGHT_SWEEP[-1]['batch']}: intensity {WEIGHT_SWEEP[-1]['intensity']:.1f}, memory-bound `{not ROOFLINE_CONTROLS['largest_batch_memory_bound']['caught']}`. "
       f"Weights: {weight_ms[0]:.3f} -> {weight_ms[-1]:.3f} ms per token; cache: {cache_ms[0]:.2f} -> {cache_ms[-1]:.2f} ms per sequence.",
    zh=f"batch 1：算术强度 {WEIGHT_SWEEP[0]['intensity']:.2f} < 拐点 {RIDGE:.2f}，受限于内存带宽：`{ROOFLINE_CHECKS['batch_1_memory_bound']}`；"
       f"batch {WEIGHT_SWEEP[-1]['batch']}：算术强度 {WEIGHT_SWEEP[-1]['intensity']:.1f}，受限于内存带宽：`{not ROOFLINE_CONTROLS['largest_batch_memory_bound']['caught']}`。"
       f"权重：每个 token {weight_ms[0]:.3f} -> {weight_ms[-1]:.3f} 毫秒；缓存：每条序列 {cache_ms[0]:.2f} -> {cache_ms[-1]:.2f} 毫秒。")
assert all(ROOFLINE_CHECKS.values()) and all(c["caught"] for c in ROOFLINE_CONTROLS.values())

# %% [markdown] lang="en"
# **The picture.** On this machine the ridge lies at {{run:roofline.ridge:.1f}} FLOP/byte
# ({{run:roofline.peak_gflops:.0f}} GFLOP/s over {{run:roofline.bandwidth_gbs:.1f}} GB/s). The batch-1 product, at
# {{run:roofline.intensity_b1:.2f}} FLOP/byte, runs at {{run:roofline.gflops_b1:.1f}} GFLOP/s, streaming its weights at
# {{run:roofline.weight_gbs_b1:.1f}} GB/s; at batch {{run:roofline.weight_batch_max}} the same weights serve
# {{run:roofline.weight_batch_max}} tokens at {{run:roofline.gflops_bmax:.0f}} GFLOP/s, and each token costs
# {{run:roofline.amortization:.1f}} times less. The cache reads stay at 0.5 FLOP/byte whatever the batch, and their
# time per sequence does not fall the way the weights' time per token does ({{run:roofline.cache_ms_first:.1f}} ms
# at batch 1, {{run:roofline.cache_ms_last:.1f}} ms at batch {{run:roofline.cache_batch_max}}). The published models' decode steps at batch 1 (between
# {{run:cost.min_intensity_b1:.2f}} and {{run:cost.max_intensity_b1:.2f}} FLOP/byte with 16-bit numbers) lie more than a
# hundred times below a data-centre GPU's ridge: an NVIDIA H100 SXM offers {{run:roofline.gpu_peak_tflops:.0f}} TFLOP/s
# in dense BF16 and {{run:roofline.gpu_bandwidth_tbs:.2f}} TB/s (its datasheet), a ridge at
# {{run:roofline.gpu_ridge:.0f}} FLOP/byte. This is why a decode step is as fast as memory
# lets it be, and why the mechanisms of this series pay off: batching shares the weights' bytes, GQA, MLA
# and quantization shrink the cache's bytes, and speculative decoding verifies $k + 1$ tokens for about the
# bytes of one.
#
# *Figure: left, the roofline of this machine (black: $\min(\pi, \beta I)$ with the measured bandwidth and
# matmul throughput), the weight product at each batch size (blue circles, batch size written beside
# each), the cache reads (orange triangles) and the decode step of each published model at batch 1 (one
# colour per model, placed on the roof at its intensity with 16-bit numbers). Right, the decode step's
# intensity against the batch size for the same models at a context of 4,096 tokens, with the ridge points
# of this machine (black, dashed) and of an H100 (grey, dotted).*

# %% [markdown] lang="zh"
# **图示**：本机的拐点位于 {{run:roofline.ridge:.1f}} FLOP/字节（{{run:roofline.peak_gflops:.0f}} GFLOP/s 除以 {{run:roofline.bandwidth_gbs:.1f}} GB/s）。batch 为 1 的矩阵乘法算术强度为 {{run:roofline.intensity_b1:.2f}} FLOP/字节，速度为 {{run:roofline.gflops_b1:.1f}} GFLOP/s，读取权重的速度为 {{run:roofline.weight_gbs_b1:.1f}} GB/s；batch 为 {{run:roofline.weight_batch_max}} 时，同样的权重服务 {{run:roofline.weight_batch_max}} 个 token，速度达到 {{run:roofline.gflops_bmax:.0f}} GFLOP/s，每个 token 的开销降到原来的 1/{{run:roofline.amortization:.1f}}。缓存读取无论 batch 多大，算术强度都停留在 0.5 FLOP/字节，每条序列所花的时间也不像权重那样随 batch 下降（batch 为 1 时 {{run:roofline.cache_ms_first:.1f}} 毫秒，batch 为 {{run:roofline.cache_batch_max}} 时 {{run:roofline.cache_ms_last:.1f}} 毫秒）。各公开模型在 batch 为 1 时的解码步（16 位数值下为 {{run:cost.min_intensity_b1:.2f}} 到 {{run:cost.max_intensity_b1:.2f}} FLOP/字节）比数据中心 GPU 的拐点低一百倍以上：NVIDIA H100 SXM 的稠密 BF16 算力为 {{run:roofline.gpu_peak_tflops:.0f}} TFLOP/s，带宽为 {{run:roofline.gpu_bandwidth_tbs:.2f}} TB/s（见其数据手册），拐点位于 {{run:roofline.gpu_ridge:.0f}} FLOP/字节。这就是为什么解码步的速度只取决于内存能有多快，也是本系列各种机制能带来收益的原因：batch 让许多 token 分摊权重的字节；GQA、MLA 和量化减少缓存的字节；投机解码则只花大约一个 token 的字节，验证 $k + 1$ 个 token。
#
# *图：左图是本机的 Roofline 模型（黑线：用实测带宽和矩阵乘法吞吐量画出的 $\min(\pi, \beta I)$）、各种 batch 大小下的权重乘法（蓝色圆点，旁边标注 batch 大小）、缓存读取（橙色三角形），以及每个公开模型在 batch 为 1 时的解码步（每个模型一种颜色，按其 16 位数值下的算术强度放在屋顶线上）。右图是这些模型在上下文为 4,096 个 token 时，解码步的算术强度随 batch 大小的变化，并画出本机的拐点（黑色虚线）和 H100 的拐点（灰色点线）。*

# %%
# [en] NVIDIA H100 SXM datasheet: 1,979 TFLOP/s BF16 with sparsity (989 dense), 3.35 TB/s HBM3.
# [zh] NVIDIA H100 SXM 数据手册：BF16 稀疏算力 1,979 TFLOP/s（稠密 989），HBM3 带宽 3.35 TB/s。
GPU_PEAK, GPU_BANDWIDTH = 989e12, 3.35e12
GPU_RIDGE = GPU_PEAK / GPU_BANDWIDTH
PLOT_BATCHES = [2 ** i for i in range(10)]
colors = plt.rcParams["axes.prop_cycle"].by_key()["color"][2:]

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
xs = np.logspace(-1.3, 3, 200)
left.loglog(xs, np.minimum(PEAK, BANDWIDTH * xs) / 1e9, color="black", label="roof of this machine")
left.plot([r["intensity"] for r in WEIGHT_SWEEP], [r["gflops"] for r in WEIGHT_SWEEP], "o", color="tab:blue", label="weights x B tokens")
for r in WEIGHT_SWEEP:
    left.annotate(str(r["batch"]), (r["intensity"], r["gflops"]), textcoords="offset points", xytext=(4, -10), fontsize=7)
left.plot([r["intensity"] for r in CACHE_SWEEP], [r["gflops"] for r in CACHE_SWEEP], "^", color="tab:orange", label="cache reads, B sequences")
for shape, color in zip(SHAPES, colors):
    intensity = COSTS[shape.name][1]["intensity"]
    left.plot([intensity], [min(PEAK, BANDWIDTH * intensity) / 1e9], "D", color=color, markersize=5, label=f"{shape.name}, B = 1")
left.set_xlabel("arithmetic intensity (FLOP/byte)")
left.set_ylabel("GFLOP/s (1 thread, fp32)")
left.legend(fontsize=7, loc="lower right")
for shape, color in zip(SHAPES, colors):
    right.loglog(PLOT_BATCHES, [decode_step_cost(shape, b, COST_CONTEXT, BF16)["intensity"] for b in PLOT_BATCHES], "-", color=color, label=shape.name)
right.axhline(RIDGE, color="black", linestyle="--", label="ridge of this machine")
right.axhline(GPU_RIDGE, color="gray", linestyle=":", label="ridge of an H100 (bf16)")
right.set_xlabel("batch size B")
right.set_ylabel("decode step intensity (FLOP/byte)")
right.legend(fontsize=7)
fig.tight_layout()
ROOFLINE_PNG = OUT / "roofline.png"
fig.savefig(ROOFLINE_PNG, dpi=120)
plt.show()
assert all(COSTS[s.name][1]["intensity"] < GPU_RIDGE / 100 for s in SHAPES)

# %% tags=["prose-values"]
{"roofline": {"cache_keys": CACHE_KEYS, "weight_batch_max": WEIGHT_SWEEP[-1]["batch"], "ridge": RIDGE,
              "peak_gflops": PEAK / 1e9, "bandwidth_gbs": BANDWIDTH / 1e9, "intensity_b1": WEIGHT_SWEEP[0]["intensity"],
              "gflops_b1": WEIGHT_SWEEP[0]["gflops"], "weight_gbs_b1": WEIGHT_SWEEP[0]["gbs"],
              "gflops_bmax": WEIGHT_SWEEP[-1]["gflops"], "amortization": weight_ms[0] / weight_ms[-1],
              "cache_ms_first": cache_ms[0], "cache_ms_last": cache_ms[-1], "cache_batch_max": CACHE_SWEEP[-1]["batch"],
              "gpu_peak_tflops": GPU_PEAK / 1e12, "gpu_bandwidth_tbs": GPU_BANDWIDTH / 1e12, "gpu_ridge": GPU_RIDGE}}
