# %% [markdown] lang="en"
# ## 8. A small continuous-batching loop
#
# With a static batch, a server waits until every sequence of the batch has finished before it starts
# new ones; a row that finished early sits idle. **Continuous batching** decides at every iteration:
# requests that finished leave, waiting requests whose blocks are available join, and one decode step
# runs for everyone present. The `serve` loop of section 6 already does this over the paged cache. Here
# it runs a seeded stream of 24 requests (prompts of 4 to 48 tokens, 4 to 40 output tokens, arrivals
# spread over the first iterations) on a pool of 40 blocks of 8 positions, at most 8 requests at once.
# Its scheduler is simple and safe: a request is admitted only if the blocks it may need in the worst
# case (prompt plus output minus one, rounded up to whole blocks) fit beside the reservations of the
# running ones, so the pool can never run out in the middle of a request.
#
# **The criterion:** every request's generated tokens equal what it generates alone (batch 1, the
# first notebook's cache, checked once more against full recomputation), and its logits agree with
# the alone run within the FP32 tolerance. We also check the bookkeeping, at each iteration's peak
# (after its decode step, before finished requests leave): no request holds more blocks than were
# reserved for it, the blocks actually in use never exceed the reservations, and every block is back in
# the pool at the end. And, as in section 6, the scheduler: never more than 8 requests running, admissions
# first come first served, none before its arrival, and the first request in line waits only while it has
# not arrived, the batch is full, or its blocks do not fit.

# %% [markdown] lang="zh"
# ## 8. 一个小小的连续批处理循环
#
# 采用静态 batch 时，服务要等 batch 里每条序列都结束，才开始处理新的序列；提前结束的行只能闲着。**连续批处理**则在每一轮都重新决定：已完成的请求离开，物理块够用的等待请求加入，然后为当前所有请求执行一个解码步。第 6 节的 `serve` 循环已经在分页缓存上这样做了。这里让它处理一个由固定种子生成的请求流：24 个请求（提示 4 到 48 个 token，输出 4 到 40 个 token，在开头若干轮内陆续到达），池中有 40 个物理块，每个物理块 8 个位置，同时最多运行 8 个请求。它的调度器简单而稳妥：只有当一个请求在最坏情况下可能需要的物理块（提示长度加输出长度再减一，向上取整到整数个物理块）能与运行中请求的预留量一起放进池中时，才接纳这个请求，所以池不会在某个请求中途耗尽。
#
# **判据**：每个请求生成的 token 都与它单独运行时（batch 为 1，用第一份笔记本的缓存，并再次与完整重算核对）完全相同，它的 logits 与单独运行的结果在 FP32 容差内一致。我们还在每一轮的峰值时刻（解码步之后、完成的请求离开之前）检查记账：没有哪个请求持有的物理块超过为它预留的数量，实际使用的物理块从不超过预留量；运行结束时，所有物理块都已回到池中。与第 6 节一样，调度器也要检查：同时运行的请求从不超过 8 个；按先来先服务的顺序接纳；没有请求在到达之前被接纳；排在最前面的请求只有在尚未到达、batch 已满，或者它的物理块放不下时才等待。

# %%
STREAM_REQUESTS, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH = 24, 40, 8, 8
rng_stream = np.random.default_rng(SEED + 5)
# [en] (prompt tokens, output tokens, arrival iteration) per request
# [zh] 每个请求的（提示 token 数，输出 token 数，到达轮次）
STREAM_SPECS = list(zip(rng_stream.integers(4, 49, STREAM_REQUESTS).tolist(),
                        rng_stream.integers(4, 41, STREAM_REQUESTS).tolist(),
                        np.cumsum(rng_stream.integers(0, 3, STREAM_REQUESTS)).tolist()))
stream_requests = make_requests(STREAM_SPECS, SEED + 6)
stream_pool = BlockPool(cfg, STREAM_BLOCKS, STREAM_BLOCK_SIZE)
TRACE = serve(model, PagedCache(stream_pool), stream_requests, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH)

tol = TOLERANCE[torch.float32]
with torch.inference_mode():
    # [en] The alone run agrees with its own full recomputation.
    # [zh] 单独运行的结果与它自己的完整重算一致。
    alone_consistent = all(alone(r)["tokens"] == alone(r)["logits"][len(r.prompt) - 1:].argmax(-1).tolist()
                           for r in stream_requests)
decode_iterations = [t for t in TRACE if t["decoded"]]
CONTINUOUS = {
    "requests": STREAM_REQUESTS,
    "iterations": len(TRACE),
    "decode_steps": len(decode_iterations),
    "decoded_tokens": sum(t["decoded"] for t in TRACE),
    "prefill_tokens_generated": STREAM_REQUESTS,
    "tokens_per_decode_step": sum(t["decoded"] for t in TRACE) / len(decode_iterations),
    "max_running": max(t["running"] for t in TRACE),
    "tokens_as_alone": all(r.tokens == alone(r)["tokens"] for r in stream_requests),
    "max_abs_logit_err_vs_alone": worst(max_abs_err(request_logits(r), alone(r)["logits"]) for r in stream_requests),
    "close_to_alone": all(torch.allclose(request_logits(r), alone(r)["logits"], atol=tol, rtol=tol) for r in stream_requests),
    "alone_equals_full_recomputation": alone_consistent,
    "peak_blocks_used": max(t["blocks_used"] for t in TRACE),
    "used_within_reserved": all(t["blocks_used"] <= t["blocks_reserved"] <= STREAM_BLOCKS and t["within_reservation"] for t in TRACE),
    "all_returned": stream_pool.used() == 0,
    "waited": sum(r.admitted > r.arrival for r in stream_requests),
    "schedule": check_schedule(stream_requests, TRACE, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH),
}
say(en=(f"{STREAM_REQUESTS} requests in {CONTINUOUS['iterations']} iterations, {CONTINUOUS['decode_steps']} of them with a decode step; "
        f"{CONTINUOUS['tokens_per_decode_step']:.2f} tokens per decode step on average (at most {CONTINUOUS['max_running']} requests at once); "
        f"{CONTINUOUS['waited']} requests waited for blocks. Tokens identical to the alone runs: `{CONTINUOUS['tokens_as_alone']}`; "
        f"largest logit difference {CONTINUOUS['max_abs_logit_err_vs_alone']:.1e}."),
    zh=(f"{STREAM_REQUESTS} 个请求在 {CONTINUOUS['iterations']} 轮内全部完成，其中 {CONTINUOUS['decode_steps']} 轮有解码步；"
        f"平均每个解码步生成 {CONTINUOUS['tokens_per_decode_step']:.2f} 个 token（同时最多 {CONTINUOUS['max_running']} 个请求）；"
        f"有 {CONTINUOUS['waited']} 个请求等待过物理块。token 与单独运行时完全相同：`{CONTINUOUS['tokens_as_alone']}`；"
        f"与单独运行相比，logits 的最大差异为 {CONTINUOUS['max_abs_logit_err_vs_alone']:.1e}。"))
assert CONTINUOUS["tokens_as_alone"] and CONTINUOUS["close_to_alone"] and CONTINUOUS["alone_equals_full_recomputation"]
assert CONTINUOUS["used_within_reserved"] and CONTINUOUS["all_returned"]
assert schedule_kept(CONTINUOUS["schedule"]) and CONTINUOUS["schedule"]["max_running"] == CONTINUOUS["max_running"]
# [en] Here the blocks, not the batch size, made requests wait.
# [zh] 在这里，让请求等待的是物理块，而不是 batch 的大小。
assert CONTINUOUS["schedule"]["head_waited_for"]["blocks"] > 0 and CONTINUOUS["schedule"]["head_waited_for"]["batch"] == 0
assert all(r.finished >= r.admitted >= r.arrival for r in stream_requests)
# [en] Batching happened, and so did waiting.
# [zh] 确实发生了批处理，也确实有请求等待。
assert CONTINUOUS["tokens_per_decode_step"] > 1 and CONTINUOUS["waited"] > 0
# [en] The stream the text describes: 24 requests, prompts of 4 to 48 tokens, 4 to 40 output tokens, a pool of
# [en] 40 blocks of 8 positions, at most 8 requests at once.
# [zh] 正文所说的请求流：24 个请求，提示 4 到 48 个 token，输出 4 到 40 个 token，池中 40 个物理块、每块 8 个位置，同时最多 8 个请求。
assert (STREAM_REQUESTS, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH) == (24, 40, 8, 8)
assert all(4 <= p <= 48 and 4 <= o <= 40 for p, o, _ in STREAM_SPECS) and CONTINUOUS["max_running"] <= STREAM_MAX_BATCH
assert CONTINUOUS["decoded_tokens"] + CONTINUOUS["prefill_tokens_generated"] == sum(r.max_new for r in stream_requests)

# %% [markdown] lang="en"
# The figure follows the pool over the run: blocks in use, blocks reserved by the scheduler, and the
# number of running requests, each at the iteration's peak. The gap between the two block curves is
# the price of the worst-case admission rule: blocks reserved for tokens not generated yet.

# %% [markdown] lang="zh"
# 下图跟踪整个运行过程中池的状态：正在使用的物理块、调度器预留的物理块，以及正在运行的请求数，都取每一轮的峰值。两条物理块曲线之间的差距，就是按最坏情况接纳请求的代价：为尚未生成的 token 预留的物理块。

# %%
iterations = [t["iteration"] for t in TRACE]
fig, ax = plt.subplots(figsize=(7, 3.6))
ax.step(iterations, [t["blocks_used"] for t in TRACE], where="post", label="blocks in use")
ax.step(iterations, [t["blocks_reserved"] for t in TRACE], where="post", linestyle="--", label="blocks reserved (worst case)")
ax.axhline(STREAM_BLOCKS, color="grey", linewidth=0.8, label=f"pool ({STREAM_BLOCKS} blocks of {STREAM_BLOCK_SIZE})")
ax.set_xlabel("loop iteration")
ax.set_ylabel("blocks")
ax2 = ax.twinx()
ax2.step(iterations, [t["running"] for t in TRACE], where="post", color="tab:green", alpha=0.6, label="running requests")
ax2.set_ylabel("running requests")
lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
ax.legend(lines, [l.get_label() for l in lines], fontsize=7, loc="lower center", ncol=2)
ax.set_title(f"{STREAM_REQUESTS} requests, at most {STREAM_MAX_BATCH} at once", fontsize=10)
fig.tight_layout()
OCCUPANCY_PNG = OUT / "pool_occupancy.png"
fig.savefig(OCCUPANCY_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# On this run the loop produced {{run:continuous.tokens_per_decode_step:.2f}} tokens per decode step on
# average, where one request at a time would produce exactly 1: the number that matters to a server,
# since a decode step of a small batch costs little more than a step of one sequence when the weights,
# not the arithmetic, are the bottleneck (a general remark; this CPU toy does not measure it).
#
# **What this toy does not model.** GPU kernels: vLLM's paged attention reads K/V from the blocks
# inside the attention kernel; we gather them into a padded tensor first. Preemption: real schedulers
# admit optimistically and, when blocks run out, swap or recompute a request; our worst-case
# reservation never runs out, and wastes blocks instead (the gap in the figure). Prefill chunking and
# mixed batches: real systems split long prompts into chunks and run them in the same step as decode
# tokens; we prefill each request alone, in its own call. Nor does it model sampling, stop tokens,
# priorities or fairness, or the cost of Python in the loop.

# %% [markdown] lang="zh"
# 本次运行中，这个循环平均每个解码步生成 {{run:continuous.tokens_per_decode_step:.2f}} 个 token，而一次只处理一个请求时恰好是 1 个。对推理服务来说，这才是关键的数字：当瓶颈在于读取权重而不在于计算时，小 batch 的一个解码步只比单条序列的一步稍贵一点（这是一般性的说明，这个 CPU 上的小例子并没有测量它）。
#
# **这个小例子没有模拟的东西**：GPU 算子——vLLM 的分页注意力在注意力算子内部直接从物理块读取 K/V，而我们先把它们收集成一个填充过的张量；抢占——真实的调度器会乐观地接纳请求，物理块不够时再把某个请求换出或重算，而我们按最坏情况预留，永远不会耗尽，代价是浪费物理块（图中两条曲线之间的差距）；分块预填充与混合 batch——真实系统会把长提示切成若干分块，与解码 token 放在同一步里计算，而我们让每个请求在一次单独的调用中完成预填充。此外，它也没有模拟采样、停止 token、优先级与公平性，以及循环中 Python 的开销。

# %% tags=["prose-values"]
{"continuous": {"tokens_per_decode_step": float(CONTINUOUS["tokens_per_decode_step"])}}
