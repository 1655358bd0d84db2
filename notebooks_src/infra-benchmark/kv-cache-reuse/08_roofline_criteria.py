# %% [markdown] lang="en"
# **The check.** By their intensities, {{run:roofline.intensity_b1:.2f}} and {{run:roofline.intensity_bmax:.0f}} FLOP/byte,
# the roofline classifies the batch-1 weight product as memory-bound and the largest batch as compute-bound. The
# cell asserts this, and that batching amortizes the weights, not the cache: from the smallest to the largest
# batch the weights' time per token falls below half, the cache's time per sequence does not. The control is a
# wrong bookkeeping the same test must reject: charging each token the whole call's time (not dividing it by the batch).

# %% [markdown] lang="zh"
# **检查**：按算术强度（{{run:roofline.intensity_b1:.2f}} 和 {{run:roofline.intensity_bmax:.0f}} FLOP/字节），Roofline 模型把 batch 为 1 的权重乘法归类为受限于内存带宽，把最大的 batch 归类为受限于计算。下面的单元格断言这一点，并断言 batch 分摊了权重的开销，却分摊不了缓存的开销：从最小的 batch 到最大的 batch，权重乘法每个 token 的时间降到一半以下，缓存读取每条序列的时间却没有。负对照是一种错误的记账，同样的判断必须拒绝它：让每个 token 承担整次调用的耗时（不除以 batch 大小）。

# %%
def amortized(times) -> bool:
    return times[-1] < times[0] / 2


weight_ms = [r["ms_per_token"] for r in WEIGHT_SWEEP]
cache_ms = [r["ms_per_sequence"] for r in CACHE_SWEEP]
first, last = WEIGHT_SWEEP[0], WEIGHT_SWEEP[-1]
ROOFLINE_CHECKS = {"classified": first["intensity"] < RIDGE < last["intensity"],
                   "weights_amortized": amortized(weight_ms), "cache_not_amortized": not amortized(cache_ms)}
# [en] WRONG on purpose: each token charged the whole call's time (the call's time not divided by its batch).
# [zh] 故意写错：每个 token 承担整次调用的耗时（调用的耗时没有除以 batch 大小）。
weight_ms_per_call = [r["ms_per_token"] * r["batch"] for r in WEIGHT_SWEEP]
ROOFLINE_CONTROLS = {"weights_not_amortized": {"caught": not amortized(weight_ms_per_call)}}
assert all(ROOFLINE_CHECKS.values()) and all(c["caught"] for c in ROOFLINE_CONTROLS.values())
say(en=f"Both criteria hold, and the control is caught. Weights: from {weight_ms[0]:.3f} ms to {weight_ms[-1]:.3f} ms per token; "
       f"cache: from {cache_ms[0]:.2f} ms to {cache_ms[-1]:.2f} ms per sequence.",
    zh=f"两条判据都成立，负对照被查出。权重：每个 token 从 {weight_ms[0]:.3f} 毫秒变为 {weight_ms[-1]:.3f} 毫秒；"
       f"缓存：每条序列从 {cache_ms[0]:.2f} 毫秒变为 {cache_ms[-1]:.2f} 毫秒。")

# %% [markdown] lang="en"
# **The picture.** The roof of this core has a sloped side set by STREAM, $\beta = {{run:roofline.bandwidth_gbs:.1f}}$ GB/s,
# and a flat side set by the fastest rate measured, $\pi = {{run:roofline.peak_gflops:.1f}}$ GFLOP/s; the ridge lies at
# {{run:roofline.ridge:.2f}} FLOP/byte. The batch-1 product, at {{run:roofline.intensity_b1:.2f}} FLOP/byte, did
# {{run:roofline.gflops_b1:.1f}} GFLOP/s, {{run:roofline.b1_peak_share:.0%}} of $\pi$. At batch
# {{run:roofline.weight_batch_max}} the same weights serve {{run:roofline.weight_batch_max}} tokens at
# {{run:roofline.gflops_bmax:.0f}} GFLOP/s, and a token's share of the call's time is 1/{{run:roofline.amortization:.1f}} of
# the batch-1 time. The cache reads stay at 0.5 FLOP/byte whatever the batch (orange triangles in the figure).
#
# The published models' decode steps at batch 1 (between {{run:cost.min_intensity_b1:.2f}} and
# {{run:cost.max_intensity_b1:.2f}} FLOP/byte with 16-bit numbers) lie more than a hundred times below a data-centre
# GPU's ridge: an NVIDIA H100 SXM offers {{run:roofline.gpu_peak_tflops:.0f}} TFLOP/s in dense BF16 and
# {{run:roofline.gpu_bandwidth_tbs:.2f}} TB/s (its datasheet), a ridge at {{run:roofline.gpu_ridge:.0f}} FLOP/byte. There a
# call over $k + 1$ rows instead of one still lies far below the ridge, so both calls have the same floor on
# their time, the time of reading their bytes. This is why a decode step is at best as fast as memory lets it
# be, and why the mechanisms of this series, which share or shrink the bytes read, pay off.
#
# **What this section shows.** The batch-1 weight product streamed its weights at
# {{run:roofline.weight_gbs_b1:.1f}} GB/s, {{run:roofline.b1_bandwidth_share:.0%}} of the STREAM bandwidth; batching
# amortizes the weights, not the cache.
#
# *Figure: left, measurements on one core of this machine, in FP32: the roof (black, $\min(\pi, \beta I)$), the
# weight product at each batch size (blue circles, batch written beside each), and the cache reads as attention
# computes them (orange triangles, all at 0.5 FLOP/byte). Right, predictions from the published configurations
# with 16-bit weights and cache at a context of 4,096 tokens: the decode step's intensity against the batch
# size, with the ridge of this core (black, dashed; measured in FP32, so only a rough mark) and of an H100 (grey,
# dotted).*

# %% [markdown] lang="zh"
# **图示**：这个核心的屋顶线斜边由 STREAM 决定，$\beta = {{run:roofline.bandwidth_gbs:.1f}}$ GB/s；水平边由测得的最快速率决定，$\pi = {{run:roofline.peak_gflops:.1f}}$ GFLOP/s；拐点位于 {{run:roofline.ridge:.2f}} FLOP/字节。batch 为 1 的矩阵乘法算术强度为 {{run:roofline.intensity_b1:.2f}} FLOP/字节，速度为 {{run:roofline.gflops_b1:.1f}} GFLOP/s，只有 $\pi$ 的 {{run:roofline.b1_peak_share:.0%}}。batch 为 {{run:roofline.weight_batch_max}} 时，同样的权重服务 {{run:roofline.weight_batch_max}} 个 token，速度达到 {{run:roofline.gflops_bmax:.0f}} GFLOP/s，每个 token 的耗时只有 batch 为 1 时的 1/{{run:roofline.amortization:.1f}}。缓存读取无论 batch 多大，算术强度都停留在 0.5 FLOP/字节（图中的橙色三角形）。
#
# 各公开模型在 batch 为 1 时的解码步（16 位数值下为 {{run:cost.min_intensity_b1:.2f}} 到 {{run:cost.max_intensity_b1:.2f}} FLOP/字节）不到数据中心 GPU 拐点的百分之一：NVIDIA H100 SXM 的稠密 BF16 算力为 {{run:roofline.gpu_peak_tflops:.0f}} TFLOP/s，带宽为 {{run:roofline.gpu_bandwidth_tbs:.2f}} TB/s（见其数据手册），拐点位于 {{run:roofline.gpu_ridge:.0f}} FLOP/字节。在 H100 上，处理 $k + 1$ 行的调用和处理一行的调用都远在拐点左侧，两者耗时的下界都是读完这些字节的时间，因而相同。这就是为什么解码步最快也只能达到内存允许的速度，也是本系列各种机制（分摊或缩小所读取的字节）能带来收益的原因。
#
# **本节的结论**：batch 为 1 的权重乘法读取权重的速度为 {{run:roofline.weight_gbs_b1:.1f}} GB/s，达到 STREAM 带宽的 {{run:roofline.b1_bandwidth_share:.0%}}；batch 分摊了权重的开销，却分摊不了缓存的开销。
#
# *图：左图是在本机一个核心上的测量值，FP32。黑线是屋顶线 $\min(\pi, \beta I)$（图例 roof 给出 STREAM 带宽和测得的最快速率 fastest measured）；蓝色圆点（weights x B tokens）是各种 batch 大小下的权重乘法，旁边标注 batch 大小；橙色三角形（cache reads, B sequences）是按注意力的写法读取缓存，都位于 0.5 FLOP/字节。横轴是算术强度（FLOP/字节），纵轴是单线程 FP32 下的 GFLOP/s。右图是由公开模型的配置算出的预测值（16 位权重和缓存，上下文 4,096 个 token）：解码步的算术强度（纵轴）随 batch 大小（横轴）的变化，并画出这个核心的拐点（黑色虚线，ridge of one core (fp32)，用 FP32 测出，只是粗略的参照）和 H100 的拐点（灰色点线，ridge of an H100 (bf16)）。*

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
            label=f"roof: STREAM {BANDWIDTH / 1e9:.1f} GB/s, fastest measured {PEAK / 1e9:.1f} GFLOP/s")
left.plot([r["intensity"] for r in WEIGHT_SWEEP], [r["gflops"] for r in WEIGHT_SWEEP], "o", color="tab:blue", label="weights x B tokens")
for r in WEIGHT_SWEEP:
    left.annotate(str(r["batch"]), (r["intensity"], r["gflops"]), textcoords="offset points", xytext=(4, -10), fontsize=7)
left.plot([r["intensity"] for r in CACHE_SWEEP], [r["gflops"] for r in CACHE_SWEEP], "^", color="tab:orange", label="cache reads, B sequences")
# [en] The cache's points share one intensity, 0.5 FLOP/byte: one label names their batch sizes.
# [zh] 缓存的各点算术强度相同，都是 0.5 FLOP/字节：用一个标注写出它们的 batch 大小。
left.annotate("B = " + ", ".join(str(r["batch"]) for r in CACHE_SWEEP), (0.5, max(r["gflops"] for r in CACHE_SWEEP)),
              textcoords="offset points", xytext=(6, 5), fontsize=7, color="tab:orange")
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
# ### Optional, to skip on a first read: a rough memory-bound test, how fast the library read the cache, what a few rows cost
#
# *The conclusion first: a call can sit far below its roof, and how far depends on the library's routine for the
# shape it is handed; this run did not pin down why.*
#
# **A rough memory-bound test.** Does a call behave as memory-bound? The cell below calls it so if it moves its
# bytes at **at least a third** of the STREAM bandwidth and does **at most a third** of $\pi$: a rough line chosen
# to separate these measurements, not a standard. It asserts that the batch-1 weight product passes and the
# largest batch, the control, fails. The last row applies the same test to the cache as attention reads it at
# batch 1; it is reported, not asserted, since how fast a library reads a cache depends on its routine for the
# shape (below), so a `False` there is about the routine, not the roofline.

# %% [markdown] lang="zh"
# ### 可选（初读可跳过）：粗略的内存带宽受限判断、数学库读取缓存有多快，以及处理几行的调用要花多少时间
#
# *先说结论：一次调用可能远远达不到它的屋顶线，差多少取决于数学库为这种形状选用的例程；至于原因，本次运行没有查明。*
#
# **粗略的内存带宽受限判断**：一次调用算不算受限于内存带宽？下面的单元格这样判断：搬运字节的速度**至少达到** STREAM 带宽的三分之一，FLOP/s **至多为** $\pi$ 的三分之一。三分之一只是为区分这些测量粗略选定的界线，并非标准。单元格断言 batch 为 1 的权重乘法满足这一条，而负对照最大的 batch 不满足。最后一行对 batch 为 1、按注意力的写法读取缓存的调用做同样的判断；这一行只报告，不做断言，因为数学库读取缓存有多快取决于它为这种形状选用的例程（见下文），所以这里即使得到 `False`，说的也是例程，而不是 Roofline 模型。

# %%
def memory_bound(row) -> bool:
    return row["gbs"] * 1e9 >= BANDWIDTH / 3 and row["gflops"] * 1e9 <= PEAK / 3


ROOFLINE_CHECKS["batch_1_memory_bound"] = memory_bound(first)
ROOFLINE_CONTROLS["largest_batch_memory_bound"] = {"caught": not memory_bound(last)}
assert ROOFLINE_CHECKS["batch_1_memory_bound"] and ROOFLINE_CONTROLS["largest_batch_memory_bound"]["caught"]
# [en] Each row names the call that was timed; the last row (the cache) is reported, not asserted.
# [zh] 每一行写明被计时的调用；最后一行（缓存）只报告，不做断言。
say_table([[f"`{call}`", str(batch), f"{r['gbs'] * 1e9 / BANDWIDTH:.0%}", f"{r['gflops'] * 1e9 / PEAK:.0%}", f"`{memory_bound(r)}`"]
           for call, batch, r in (("F.linear(x, weight)", first["batch"], first), ("F.linear(x, weight)", last["batch"], last),
                                  ("masked_attention(q, k, v, ...)", CACHE_SWEEP[0]["batch"], CACHE_SWEEP[0]))],
          en=["call", "batch B", "bytes per second, share of STREAM", "FLOP/s, share of $\\pi$",
              "memory-bound (bytes share >= 1/3, FLOP/s share <= 1/3)"],
          zh=["调用", "batch $B$", "每秒字节数占 STREAM 的比例", "FLOP/s 占 $\\pi$ 的比例",
              "受限于内存带宽（带宽占比 ≥ 1/3 且算力占比 ≤ 1/3）"])

# %% [markdown] lang="en"
# The score product can be written two ways that read the same contiguous keys and do the same multiply-adds:
# as attention writes it, a row times a transposed matrix (`q @ k^T`), and as a matrix times a column
# (`k @ q^T`). Only the shape in which PyTorch hands the keys to the math library differs (the wide second operand
# of a one-row product, or the tall first operand of a one-column product), and on the machine that built this
# notebook the one oneMKL routine both go to (`SGEMM_BATCH`) runs at different speeds for the two. The value
# product is timed as attention writes it (`w @ v`).

# %% [markdown] lang="zh"
# 分数乘法可以有两种写法，读取的是同一块连续存放的键，乘加次数也相同：一种是注意力里的写法，行向量乘以转置的矩阵（`q @ k^T`）；另一种是矩阵乘以列向量（`k @ q^T`）。不同的只是 PyTorch 把键交给数学库时的形状（前者中键是单行乘法里宽的第二个操作数，后者中键是单列乘法里高的第一个操作数）；在构建本笔记本的机器上，两者调用的是 oneMKL 的同一个例程（`SGEMM_BATCH`），它在这两种形状下的速度不同。值乘法按注意力里的写法计时（`w @ v`）。

# %% [markdown] lang="en"
# The two products alone, at batch {{run:roofline.cache_batch_max}}, each reading half of the cache's bytes (the keys,
# or the values) at 0.5 FLOP/byte; the last column divides the product's time by the attention call's at the
# same batch.

# %% [markdown] lang="zh"
# 单独的两次乘法，batch 为 {{run:roofline.cache_batch_max}}，每次读取缓存字节数的一半（键或值），算术强度都是 0.5 FLOP/字节；最后一列是这次乘法的耗时除以同一 batch 下注意力调用的耗时。

# %% tags=["hide-input"]
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
# **What the products show.** As attention computes them at the same batch, {{run:roofline.cache_batch_max}}, the cache
# reads moved their bytes at {{run:roofline.cache_bandwidth_share_bmax:.0%}} of the STREAM bandwidth. The score product alone read its keys at
# {{run:roofline.scores_kq_share:.0%}} of it written `k @ q^T`, and at {{run:roofline.scores_qk_share:.0%}} written
# `q @ k^T`; the value product read the values at {{run:roofline.values_share:.0%}}. So where `k @ q^T` is the faster,
# what holds the score half back is neither side of the roof nor the data's layout (the same buffer), but how
# fast the library's routine runs for the shape it is handed. A decode kernel on a GPU (Flash-Decoding, vLLM's
# paged attention) is written for exactly this job: to stream the whole cache at the memory bandwidth.
#
# <details><summary>Two remarks on the table (optional)</summary>
#
# Should a product that only reads pass 100% of STREAM, it would not break the roof: its sloped side is STREAM's
# credited rate, below what the memory really moves (the timing details above). The last column is a rough
# guide only: the products were timed as separate calls, so their shares
# ({{run:roofline.scores_qk_attention_share:.0%}} and {{run:roofline.values_attention_share:.0%}} here) are not parts
# of one call's time, whatever their sum.
#
# </details>

# %% [markdown] lang="zh"
# **这两次乘法说明了什么**：按注意力的写法，在同样的 batch 大小 {{run:roofline.cache_batch_max}} 下，缓存读取搬运字节的速度是 STREAM 带宽的 {{run:roofline.cache_bandwidth_share_bmax:.0%}}。单独的分数乘法写成 `k @ q^T` 时，读取键的速度是 STREAM 带宽的 {{run:roofline.scores_kq_share:.0%}}，写成 `q @ k^T` 时是 {{run:roofline.scores_qk_share:.0%}}；值乘法读取值的速度是 {{run:roofline.values_share:.0%}}。所以，只要 `k @ q^T` 更快，就说明拖慢分数这一半的既不是屋顶线的哪条边，也不是数据的布局（两者读的是同一块内存），而是数学库的例程在拿到的那种形状下跑得多快。GPU 上的解码内核（Flash-Decoding、vLLM 的分页注意力）正是为这件事而写的：以内存带宽把整个缓存一路读完。
#
# <details><summary>关于上表的两点说明（可选）</summary>
#
# 只读不写的乘法即使超过 STREAM 带宽的 100%，也不违背屋顶线：斜边是按 STREAM 的计数规则算出的速率，低于内存实际搬运的速率（见上文关于计时的可选部分）。最后一列只是粗略的参考：两次乘法是作为单独的调用计时的，两个比例（这里是 {{run:roofline.scores_qk_attention_share:.0%}} 和 {{run:roofline.values_attention_share:.0%}}）即使加起来接近 100%，也不是同一次调用耗时的分解。
#
# </details>

# %% [markdown] lang="en"
# **What a call over a few rows costs.** The roof sets a floor on a call's time: reading its bytes at $\beta$ left
# of the ridge, doing its FLOPs at $\pi$ right of it. A call over a few rows reads the same weight bytes as a
# one-row call, so left of the ridge it has the same floor. The table marks which calls lie left of this run's
# ridge and gives their floors and measured times in one-row calls: {{run:roofline.few_rows.en}}. Why a few rows can take longer than their floor,
# we did not find out. {{run:spec.mid_verdict.en}}
#
# <details><summary>A hypothesis, not checked here (optional)</summary>
#
# On the machine that built this notebook every batch size calls oneMKL's `SGEMM`. Inside it a one-row product can stream the weights once, as a matrix-vector product does, while a few rows
# take the general path, which first copies (packs) blocks of the weights into a buffer laid out for many rows:
# extra memory traffic and work that only a large batch repays.
#
# </details>

# %% [markdown] lang="zh"
# **处理几行的一次调用要花多少时间。** 屋顶线给调用的耗时定了一个下界：在拐点左侧是以 $\beta$ 读完它的字节的时间，在拐点右侧是以 $\pi$ 做完它的浮点运算的时间。处理几行的调用读取的权重字节与单行调用相同，所以只要位于拐点左侧，两者的下界就相同。下表标出哪些调用位于本次运行的拐点左侧，并以单行调用为单位给出它们的下界和实测耗时：{{run:roofline.few_rows.zh}}。几行的调用为什么可能比下界慢，我们没有查明。{{run:spec.mid_verdict.zh}}
#
# <details><summary>一个假设，这里未加验证（可选）</summary>
#
# 在构建本笔记本的机器上，每种 batch 大小调用的都是 oneMKL 的 `SGEMM`。在它内部，单行乘法可以像矩阵乘向量那样把权重读一遍，而几行的乘法走通用的路径，先把权重一块一块地复制（打包）到一块为多行排布的缓冲区里：多出的内存传输和工作只有 batch 大时才划算。
#
# </details>

# %% tags=["hide-input"]
# [en] What the weight product over a few rows costs next to one over one row (as many rows as section 6's verifying call): reported, not asserted.
# [zh] 处理几行的权重乘法与只处理一行的相比耗时多少（行数与第 6 节的验证调用相当）：只报告，不做断言。
SMALL_BATCHES = [b for b in WEIGHT_BATCHES if 1 < b <= 8] or [WEIGHT_BATCHES[1]]
CALL_RATIOS = {b: median(SECONDS[("weights", b)]) / median(SECONDS[("weights", 1)]) for b in SMALL_BATCHES}
# [en] The roof's floor on a call's time: its FLOPs over the roof at its intensity, min(pi, beta I).
# [zh] 屋顶线给一次调用耗时定的下界：浮点运算次数除以它所在算术强度处的屋顶线 min(pi, beta I)。
SWEEP_ROWS = {r["batch"]: r for r in WEIGHT_SWEEP}
roof_floor = lambda r: 2 * r["batch"] * WIDTH * WIDTH / min(PEAK, BANDWIDTH * r["intensity"])
FLOOR_RATIOS = {b: roof_floor(SWEEP_ROWS[b]) / roof_floor(SWEEP_ROWS[1]) for b in SMALL_BATCHES}
say_table([[str(b), f"{SWEEP_ROWS[b]['intensity']:.2f}", f"`{SWEEP_ROWS[b]['intensity'] < RIDGE}`", f"{FLOOR_RATIOS[b]:.2f}", f"{ratio:.2f}"]
           for b, ratio in CALL_RATIOS.items()],
          en=["rows per call B", "intensity (FLOP/byte)", f"left of the ridge ({RIDGE:.2f})", "roof's floor, in one-row calls",
              "time of one call, in one-row calls"],
          zh=["每次调用的行数 $B$", "算术强度（FLOP/字节）", f"位于拐点（{RIDGE:.2f}）左侧", "屋顶线给出的下界（以单行调用为单位）",
              "一次调用的耗时（以单行调用为单位）"])

# %% [markdown] lang="en"
# *End of section 9's optional part. You may skip the next section too: it is the first notebook's check of our decoder against Hugging Face GPT-2,
# re-run unchanged only because section 11 needs its mapping of our weights into `GPT2LMHeadModel`.*

# %% [markdown] lang="zh"
# *第 9 节的可选部分到此结束。下一节也可以跳过：它是第一份笔记本中用 Hugging Face GPT-2 检验我们解码器的内容，原样重新运行，只是因为第 11 节要用到其中把我们的权重装进 `GPT2LMHeadModel` 的映射。*
