# %% [markdown] lang="en"
# **The stream, served continuously.** Now `serve` runs the stream of the baseline over the paged cache.
# Its scheduler is the admission rule above: a request's worst-case budget must fit beside those of the
# running requests, first come, first served. On this stream the pool, not the cap, is the tighter
# limit: the budgets fill the pool before {{run:stream.max_batch}} requests run, so at most
# {{run:continuous.max_running}} run at once (the audit after the figure shows which limit made requests wait).
#
# **The criterion:** every request's generated tokens equal what it generates alone (batch 1, the
# first notebook's cache, checked once more against full recomputation), and its logits agree with
# the alone run within the FP32 tolerance. We also check the bookkeeping, at each iteration's peak
# (after its decode step, before finished requests leave): no request holds more blocks than are
# in its budget, the blocks actually in use never exceed the budgets, and every block is back in
# the pool at the end.

# %% [markdown] lang="zh"
# **连续地服务请求流**：现在让 `serve` 在分页缓存上处理基线用过的那个请求流。它的调度器就是上面的接纳规则：一个请求的最坏情况预算必须能与运行中各请求的预算一起放进池中，按先来先服务的顺序接纳。在这个请求流上，起限制作用的是池而不是上限：还没有 {{run:stream.max_batch}} 个请求在运行，它们的预算就已占满了池，所以同时最多只有 {{run:continuous.max_running}} 个请求运行（图之后的核查会列出请求因哪种限制而等待）。
#
# **判据**：每个请求生成的 token 都与它单独运行时（batch 为 1，用第一份笔记本的缓存，并再次与完整重算核对）完全相同，它的 logits 与单独运行的结果在 FP32 容差内一致。我们还在每次迭代的峰值时刻（解码步之后、完成的请求离开之前）检查记账：没有哪个请求持有的物理块超过它的预算，实际使用的物理块从不超过各请求的预算之和；运行结束时，所有物理块都已回到池中。

# %% tags=["hide-input"]
def summarize_stream(requests, trace, cache) -> dict:
    # [en] The criterion and the bookkeeping of a served stream, in one dict.
    # [zh] 一次请求流运行的判据与记账，汇总成一个字典。
    with torch.inference_mode():
        # [en] The alone run agrees with its own full recomputation.
        # [zh] 单独运行的结果与它自己的完整重算一致。
        alone_consistent = all(alone(r)["tokens"] == alone(r)["logits"][len(r.prompt) - 1:].argmax(-1).tolist()
                               for r in requests)
    versus_alone = compare([request_logits(r) for r in requests], [alone(r)["logits"] for r in requests])
    decode_iterations = [t for t in trace if t["decoded"]]
    return {
        "requests": len(requests),
        "iterations": len(trace),
        "decode_steps": len(decode_iterations),
        "decoded_tokens": sum(len(t["decoded"]) for t in trace),
        "prefill_tokens_generated": len(requests),
        "tokens_per_decode_step": sum(len(t["decoded"]) for t in trace) / len(decode_iterations),
        "max_running": max(len(t["running"]) for t in trace),
        "tokens_as_alone": all(r.tokens == alone(r)["tokens"] for r in requests),
        "max_abs_logit_err_vs_alone": versus_alone["max_abs_logit_err"],
        "close_to_alone": versus_alone["close"],
        "alone_equals_full_recomputation": alone_consistent,
        "peak_blocks_used": max(t["blocks_used"] for t in trace),
        "used_within_reserved": all(t["blocks_used"] <= t["blocks_reserved"] <= STREAM_BLOCKS and t["within_reservation"] for t in trace),
        "all_returned": cache.pool.used() == 0,
        "waited": sum(r.admitted > r.arrival for r in requests),
    }


def show_stream(c):
    say(en=(f"{c['requests']} requests in {c['iterations']} iterations, {c['decode_steps']} of them with a decode step; "
            f"{c['tokens_per_decode_step']:.2f} tokens per decode step on average (at most {c['max_running']} requests at once); "
            f"{c['waited']} requests waited after their arrival. Tokens identical to the alone runs: `{c['tokens_as_alone']}`; "
            f"max abs logit error {c['max_abs_logit_err_vs_alone']:.1e}. Peak blocks in use {c['peak_blocks_used']} "
            f"of {STREAM_BLOCKS}; within the budgets at every peak: `{c['used_within_reserved']}`; all blocks back: "
            f"`{c['all_returned']}`."),
        zh=(f"{c['requests']} 个请求在 {c['iterations']} 次迭代内全部完成，其中 {c['decode_steps']} 次迭代有解码步；"
            f"平均每个解码步生成 {c['tokens_per_decode_step']:.2f} 个 token（同时最多 {c['max_running']} 个请求）；"
            f"有 {c['waited']} 个请求在到达之后等待过。token 与单独运行时完全相同：`{c['tokens_as_alone']}`；"
            f"logits 的最大绝对误差为 {c['max_abs_logit_err_vs_alone']:.1e}。使用中的物理块峰值为 {c['peak_blocks_used']} 个"
            f"（共 {STREAM_BLOCKS} 个）；每次迭代的峰值都在预算之内：`{c['used_within_reserved']}`；"
            f"全部物理块都已归还：`{c['all_returned']}`。"))


def show_batching(static, continuous, continuous_idle):
    say_table([[name, str(s["decode_steps"]), f"{s['tokens_per_decode_step']:.2f}", str(idle)]
               for name, s, idle in (("`static_schedule`", static, static["idle_row_steps"]), ("`serve`", continuous, continuous_idle))],
              en=["batching", "decode steps", "tokens per decode step", "idle row-steps"],
              zh=["批处理方式", "解码步数", "每个解码步的 token 数", "空闲行步数"])


def show_trace(events):
    say_table([[str(t["iteration"]), str(t["admitted"]), str(t["decoded"]), str(t["running"]), str(t["waiting"])] for t in events],
              en=["iteration", "admitted (prefilled)", "decoded in the batched step", "running", "not yet admitted"],
              zh=["迭代", "接纳（已预填充）", "参加 batch 解码步", "运行中", "尚未接纳"])

# %% [markdown] lang="en"
# The stream through `serve`. `serve` is a generator, so nothing runs until something iterates over it: here
# `watch` is what runs it, to the end, reading the pool at each pause (after the decode step, before finished
# requests leave). The table shows the first three iterations of the trace that admit a request.
# Its last column counts every request not yet admitted, including those that have not arrived yet; the
# figure below draws only the wait after arrival.

# %% [markdown] lang="zh"
# 让请求流经过 `serve`。`serve` 是生成器，只有被遍历时才会运行：这里运行它的是 `watch`，它一直运行到 `serve` 结束，并在每次暂停时（解码步之后、完成的请求离开之前）读取池的状态。表中是运行轨迹里最先接纳请求的三次迭代。最后一列统计所有尚未接纳的请求，包括还没有到达的请求；下面的图只画出请求到达之后的等待。

# %%
stream_requests = make_requests(STREAM_SPECS, SEED + 6)
stream_cache = PagedCache(BlockPool(cfg, STREAM_BLOCKS, STREAM_BLOCK_SIZE))
TRACE = watch(stream_cache, serve(model, stream_cache, stream_requests, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH),
              stream_requests, STREAM_BLOCK_SIZE)
show_trace([t for t in TRACE if t["admitted"]][:3])
CONTINUOUS = summarize_stream(stream_requests, TRACE, stream_cache)
show_stream(CONTINUOUS)
# [en] The criterion, one line per clause: each request's tokens and logits as when it runs alone (itself equal to
# [en] full recomputation); blocks in use within the budgets, every block returned; more than one token per decode step.
# [zh] 判据，每行一条：每个请求的 token 和 logits 与它单独运行时相同（单独运行又与完整重算一致）；使用中的物理块
# [zh] 不超过预算，每个物理块都已归还；每个解码步产生不止一个 token。
assert CONTINUOUS["tokens_as_alone"] and CONTINUOUS["close_to_alone"] and CONTINUOUS["alone_equals_full_recomputation"]
assert CONTINUOUS["used_within_reserved"] and CONTINUOUS["all_returned"]
assert CONTINUOUS["tokens_per_decode_step"] > 1

# %% tags=["prose-values"]
{"continuous": {"decode_steps": CONTINUOUS["decode_steps"], "tokens_per_decode_step": float(CONTINUOUS["tokens_per_decode_step"]), "iterations": CONTINUOUS["iterations"],
                "max_running": CONTINUOUS["max_running"]}}

# %% [markdown] lang="en"
# **Against the baseline.** Both schedules decode the same {{run:static_batching.decoded_tokens}} tokens (each
# request's output minus its first token); continuous batching needs fewer decode steps for them because
# no row waits for the longest request of its batch. The loop's idle row-steps are zero by construction when
# every request generates at least 2 tokens, as here (at least {{run:stream.output_min}}): a finished request
# leaves in the same iteration, whereas a 1-token request would sit idle in its admission iteration's decode
# step. The table counts them from the trace. Neither count
# includes prefill: `serve` prefills each request in its own call, where static batching could prefill a
# whole batch in one.

# %% [markdown] lang="zh"
# **与基线比较**：两种调度解码的都是同样的 {{run:static_batching.decoded_tokens}} 个 token（每个请求的输出减去第一个 token）；连续批处理需要的解码步更少，因为没有哪一行要等它所在 batch 中最长的请求。只要每个请求至少生成 2 个 token（这里每个请求至少生成 {{run:stream.output_min}} 个），由循环的设计，空闲行步数必然为 0：请求完成后在同一次迭代中离开；只生成 1 个 token 的请求则会在它被接纳那次迭代的解码步中空占一行。表中的数是从迭代记录里数出来的。两种计数都不含预填充：`serve` 对每个请求单独调用一次预填充，而静态批处理可以把整个 batch 的预填充放在一次调用里。

# %%
# [en] Rows in the loop's decode steps held by a request that is not decoding: a finished one waits for nobody.
# [zh] 循环的解码步中被不在解码的请求占着的行：已完成的请求不必等任何人。
continuous_idle = sum(len(t["running"]) - len(t["decoded"]) for t in TRACE if t["decoded"])
show_batching(STATIC_BATCHING, CONTINUOUS, continuous_idle)
# [en] Zero idle rows whenever every request generates at least 2 tokens.
# [zh] 只要每个请求至少生成 2 个 token，空闲行就是 0。
assert continuous_idle == 0 or min(r.max_new for r in stream_requests) < 2
assert CONTINUOUS["decoded_tokens"] == STATIC_BATCHING["decoded_tokens"] and CONTINUOUS["decode_steps"] < STATIC_BATCHING["decode_steps"]

# %% [markdown] lang="en"
# The figure follows the run. The upper panel is the timeline of every request, one row each, against
# the loop iteration: a dotted grey line while it waits after its arrival, a dark blue mark where it is
# admitted and its prompt is prefilled alone, and an orange bar for the iterations in which it takes part
# in the batched decode step, up to the iteration in which it finishes. Where several orange bars overlap,
# that is the batch. The middle panel follows the pool at each iteration's peak: the
# scheduler's worst-case budget (shaded area), the blocks in use (blue line) and the pool's size (black
# line); the bottom panel, the number of running requests at that peak (its axis goes up to the cap). The
# shaded area above the blue line is the price of the worst-case admission rule: blocks budgeted for
# tokens not generated yet. The first request in line is refused whenever the gap between the shaded area
# and the black line is smaller than its own budget, although fewer blocks are in use. The blue line counts
# the blocks actually allocated, section 7's measure (which gives paging its high share in use); the
# shaded area is a promise, not an allocation, so the two sections do not contradict each other.

# %% [markdown] lang="zh"
# 下面的图展示整个运行过程。上半部分是每个请求的时间线，每个请求占一行（纵轴 request 是请求编号），横轴 loop iteration 是循环的迭代序号：灰色虚线表示请求到达之后的等待；蓝色标记表示它被接纳、其提示单独预填充的那次迭代；橙色条表示它参与 batch 解码步的各次迭代，一直到它完成的那次迭代。标题写的是请求总数、同时运行的请求数的最大值，以及括号里的上限（cap）；冒号后依次说明等待（dotted，虚线）、预填充（blue，蓝色）和解码（orange，橙色）。几根橙色条重叠的地方就是 batch。中间部分跟踪每次迭代峰值时刻池的状态，左侧纵轴 blocks 是物理块数：worst-case budget (blocks) 是调度器的最坏情况预算（阴影区域），blocks in use 是使用中的物理块（蓝线），pool size 是池的大小（黑线，括号里是物理块数和每个物理块的位置数）。下半部分的纵轴 running 是峰值时刻正在运行的请求数（绿线，纵轴一直画到上限）。蓝线以上的那部分阴影，就是按最坏情况接纳请求的代价：为尚未生成的 token 做的预算。只要阴影与黑线之间的空隙小于排在最前面的等待请求自己的预算，这个请求就会被拒绝，尽管实际使用的物理块更少。蓝线统计的是实际分配的物理块，也就是第 7 节的度量（分页在那里的使用比例很高正是按它算的）；阴影只是预先承诺的数量，并没有真正分配，所以两节的结果并不矛盾。

# %%
fig, (ax_time, ax_pool, ax_running) = plt.subplots(3, 1, figsize=(7.5, 7.4), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1]})
for r in stream_requests:
    if r.admitted > r.arrival:
        ax_time.hlines(r.rid, r.arrival, r.admitted, color="#999999", linestyles=":", linewidth=1)
    ax_time.broken_barh([(r.admitted, r.finished + 1 - r.admitted)], (r.rid - 0.35, 0.7), color="#dd8452")
    ax_time.broken_barh([(r.admitted, 0.3)], (r.rid - 0.35, 0.7), color="#4c72b0")
ax_time.set_ylabel("request")
ax_time.invert_yaxis()
ax_time.set_title(f"{STREAM_REQUESTS} requests, at most {CONTINUOUS['max_running']} at once (cap {STREAM_MAX_BATCH}): wait (dotted), prefill (blue), decode (orange)", fontsize=9)
iterations = [t["iteration"] for t in TRACE]
# [en] Budgets as a shaded area, blocks in use as a line inside it, the pool's size as a black line above.
# [zh] 预算画成阴影区域，使用中的物理块画成其中的一条线，池的大小画成上方的一条黑线。
ax_pool.fill_between(iterations, [t["blocks_reserved"] for t in TRACE], step="post", color="#dd8452", alpha=0.35,
                     linewidth=0, label="worst-case budget (blocks)")
ax_pool.step(iterations, [t["blocks_used"] for t in TRACE], where="post", color="#4c72b0", label="blocks in use")
ax_pool.axhline(STREAM_BLOCKS, color="black", linewidth=1.6, label=f"pool size ({STREAM_BLOCKS} blocks of {STREAM_BLOCK_SIZE} positions)")
ax_pool.set_ylim(0, STREAM_BLOCKS * 1.45)
ax_pool.set_ylabel("blocks")
ax_pool.legend(fontsize=7, loc="upper center", ncol=3)
ax_running.step(iterations, [len(t["running"]) for t in TRACE], where="post", color="tab:green")
ax_running.set_ylim(0, STREAM_MAX_BATCH + 0.5)
ax_running.set_ylabel("running")
ax_running.set_xlabel("loop iteration")
fig.tight_layout()
SERVING_PNG = OUT / "continuous_batching.png"
fig.savefig(SERVING_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# **The scheduler's promises.** No logit can show whether the scheduler kept them, so a folded audit,
# `check_schedule`, reads them from the trace of both runs (the reuse proof's six requests, the stream) and
# asserts them: at most `max_batch` running, first come first served, nobody admitted before arriving, and
# the first in line never waiting without a reason (not arrived, batch full, or its blocks do not fit).

# %% [markdown] lang="zh"
# **调度器的承诺**：调度器有没有兑现这些承诺，任何 logits 都看不出来，所以由折叠起来的核查函数 `check_schedule` 从循环两次运行（复用证明的六个请求和上面的请求流）的迭代记录中读出并断言它们：同时运行的请求不超过 `max_batch` 个，先来先服务，没有请求在到达之前被接纳，排在最前面的请求从不无故等待（它等待的原因只能是尚未到达、batch 已满，或者它的物理块放不进池中）。

# %% tags=["hide-input"]
def check_schedule(requests, trace, num_blocks, block_size, max_batch) -> dict:
    queue = sorted(requests, key=lambda request: (request.arrival, request.rid))
    order = [rid for t in trace for rid in t["admitted"]]
    head_waited_for = {"arrival": 0, "batch": 0, "blocks": 0, "nothing": 0}
    for t in trace:
        waiting = [r for r in queue if r.admitted > t["iteration"]]
        if waiting:
            head = waiting[0]
            reason = ("arrival" if head.arrival > t["iteration"] else "batch" if len(t["running"]) >= max_batch
                      else "blocks" if t["blocks_reserved"] + blocks_needed(head, block_size) > num_blocks else "nothing")
            head_waited_for[reason] += 1
    schedule = {"max_running": max(len(t["running"]) for t in trace),
                "cap_respected": all(len(t["running"]) <= max_batch for t in trace),
                "admission_order": order,
                "first_come_first_served": order == [r.rid for r in queue],
                "none_before_arrival": all(r.arrival <= r.admitted for r in requests),
                "head_waited_for": head_waited_for,
                "no_needless_wait": head_waited_for["nothing"] == 0}
    return schedule | {"kept": all(schedule[k] for k in ("cap_respected", "first_come_first_served", "none_before_arrival",
                                                             "no_needless_wait"))}


SCHEDULES = {"six": check_schedule(REUSE["served"], REUSE["trace"], REUSE_BLOCKS, BLOCK_SIZE, max_batch=3),
             "stream": check_schedule(stream_requests, TRACE, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH)}
six_waits, stream_waits = SCHEDULES["six"]["head_waited_for"], SCHEDULES["stream"]["head_waited_for"]
say(en=(f"Every promise kept in both runs: `{SCHEDULES['six']['kept'] and SCHEDULES['stream']['kept']}`. Iterations in which the "
        f"first in line waited for a place in the batch / for blocks: reuse proof {six_waits['batch']} / {six_waits['blocks']}, "
        f"stream {stream_waits['batch']} / {stream_waits['blocks']}."),
    zh=(f"两次运行是否兑现了全部承诺：`{SCHEDULES['six']['kept'] and SCHEDULES['stream']['kept']}`。排在最前面的请求因 batch 已满 / "
        f"因物理块不够而等待的迭代数：复用证明中为 {six_waits['batch']} / {six_waits['blocks']}，"
        f"请求流中为 {stream_waits['batch']} / {stream_waits['blocks']}。"))
# [en] Every promise kept in both runs, and both limits really in force: three requests at once and a wait for a place in the
# [en] batch in the reuse proof, waits for blocks (never for the batch) in the stream.
# [zh] 两次运行都兑现了每一项承诺，而且两种限制都确实起了作用：复用证明中曾有三个请求同时运行，也有请求等待过 batch 中的空位；
# [zh] 请求流中有请求等待过物理块（从未因 batch 已满而等待）。
six, stream = SCHEDULES["six"], SCHEDULES["stream"]
assert (six["kept"] and stream["kept"] and six["max_running"] == 3 and six["head_waited_for"]["batch"] > 0
        and stream["head_waited_for"]["blocks"] > 0 and stream["head_waited_for"]["batch"] == 0
        and stream["max_running"] < STREAM_MAX_BATCH)

# %% [markdown] lang="en"
# On this run the loop produced {{run:continuous.tokens_per_decode_step:.2f}} tokens per decode step on
# average, against {{run:static_batching.tokens_per_decode_step:.2f}} for static batching and exactly 1 for one
# request at a time (the first token of each request comes from its prefill and is not counted). Tokens
# per step matter because on a GPU a decode step is bound by memory bandwidth: it reads every weight and the
# whole cache for little arithmetic. The weights are read once for the whole batch, each sequence's K/V for
# that sequence alone, so a batch of a few sequences costs little more than one only while the weights make
# up most of the bytes a step reads; with long contexts and large batches the caches outweigh the weights,
# and the step grows with the batch (the
# [reuse notebook]({{colab:infra-benchmark/kv-cache-reuse}}) counts both parts for published models). This CPU
# toy does not measure that; it checks that batching changes nothing in the tokens.
#
# **What this toy does not model.**
#
# * GPU kernels: real engines read K/V from the blocks inside the attention kernel (section 6); we gather
#   them first.
# * Preemption: real schedulers admit optimistically and, when blocks run out, swap or recompute a
#   request; our worst-case budget never runs out, and wastes blocks instead (the gap in the figure).
# * Prefill chunking and mixed batches: real systems split long prompts into chunks and run them in the
#   same step as decode tokens; we prefill each request alone, in its own call.
# * Nor does it model sampling, stop tokens, priorities or fairness, or the cost of Python in the loop.
#
# **Sections 9 to 11 are optional** (9 and 10 need `transformers`); the takeaways are in section 12.

# %% [markdown] lang="zh"
# 本次运行中，这个循环平均每个解码步生成 {{run:continuous.tokens_per_decode_step:.2f}} 个 token，静态批处理是 {{run:static_batching.tokens_per_decode_step:.2f}} 个，一次只处理一个请求时恰好是 1 个（每个请求的第一个 token 来自它的预填充，不计在内）。每步的 token 数很重要，因为在 GPU 上解码步受限于内存带宽：它要读取全部权重和整个缓存，运算却很少。权重为整个 batch 只读一次，每条序列的 K/V 却要各读各的，所以只有当权重在一步读取的字节中占大头时，几条序列组成的 batch 才只比单条序列略慢；上下文很长、batch 很大时，缓存的字节会超过权重，一步的耗时也随 batch 增长（[复用笔记本]({{colab:infra-benchmark/kv-cache-reuse}})对公开模型分别统计了这两部分）。这个 CPU 上的小例子并不测量这一点，它检查的是：批处理不会让生成的 token 有任何改变。
#
# **这个小例子没有模拟的东西**：
#
# * GPU 内核：真实的推理引擎在注意力内核内部直接从物理块读取 K/V（见第 6 节），而我们先把它们收集出来。
# * 抢占：真实的调度器会乐观地接纳请求，物理块不够时再把某个请求换出或重算；我们按最坏情况做预算，永远不会耗尽，代价是浪费物理块（图中两条曲线之间的差距）。
# * 分块预填充与混合 batch：真实系统会把长提示切成若干分块，与解码 token 放在同一步里计算；我们则让每个请求在一次单独的调用中完成预填充。
# * 此外，它也没有模拟采样、停止 token、优先级与公平性，以及循环中 Python 的开销。
#
# **第 9 到 11 节是可选内容**（第 9、10 节需要 `transformers`）；要点在第 12 节。
