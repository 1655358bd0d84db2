# %% [markdown] lang="en"
# **The loop.** At every iteration, `serve` admits waiting requests, runs one decode step for every
# request present, and lets the requests that have generated all their tokens leave and give their
# blocks back. Its two model calls come first: `prefill` runs a new request's prompt on its own, and
# `decode_step` gives every running request one token in one batched call.

# %% [markdown] lang="zh"
# **循环**：`serve` 在每次迭代中接纳等待的请求，为当前所有请求执行一个解码步，再让已经生成完全部 token 的请求离开并归还它的物理块。先看它的两次模型调用：`prefill` 单独处理新请求的提示，`decode_step` 在一次 batch 调用中让每个运行中的请求各生成一个 token。

# %%
def prefill(model, cache, request):
    # [en] A new request's prompt, alone in its own call; the last prompt position gives its first token.
    # [zh] 新请求的提示单独调用一次；提示最后一个位置的 logits 给出它的第一个 token。
    cache.add(request.rid)
    logits = store_forward(model, request.prompt[None], torch.ones(1, len(request.prompt), dtype=torch.bool),
                           SeqBatchStore(cache, [request.rid]))
    request.logits.append(logits[0])
    request.tokens.append(int(logits[0, -1].argmax()))


def decode_step(model, cache, requests):
    # [en] One more token for each of `requests`, all in one batched call.
    # [zh] 在一次 batch 调用中，让 `requests` 中的每个请求各多生成一个 token。
    ids = torch.tensor([[r.tokens[-1]] for r in requests])
    logits = store_forward(model, ids, torch.ones(len(requests), 1, dtype=torch.bool), SeqBatchStore(cache, [r.rid for r in requests]))
    for row, r in enumerate(requests):
        r.logits.append(logits[row])
        r.tokens.append(int(logits[row, -1].argmax()))

# %% [markdown] lang="en"
# The loop itself, `serve`, written for any cache with the interface above. Its **admission rule**:
#
# * **Worst-case budget.** A request's budget is the most blocks it can ever hold: its prompt plus its
#   output minus one (the last token's K/V is never stored), rounded up to whole blocks (`blocks_needed`
#   above). The first request in line is admitted when it has arrived, fewer than `max_batch` requests are
#   running, and its budget plus the budgets of the running requests is at most the `num_blocks` of the
#   pool; then the next is tried. The rule compares budgets, not free blocks: the pool may hold free blocks
#   and still refuse a request, because the running requests may still need them; in exchange the pool can
#   never run out in the middle of a request.
# * **First come, first served.** Requests are admitted in order of arrival (ties by request number), and a
#   request never overtakes the one ahead of it, even if it would fit.
# * **`max_new` as `max_tokens`.** `max_new` stands for a real request's `max_tokens`, an upper bound that
#   real requests do carry (without a stop token, our requests always reach it). Section 7 counted the
#   blocks actually allocated; this rule budgets for the worst case, a larger amount: the shaded area in the
#   figure below, which real engines avoid by admitting optimistically and preempting.
#
# Inside one iteration the order is admit, decode, retire: a request admitted at iteration $i$ is
# prefilled (its first token) and then takes part in the decode step of the same iteration (its second
# token). `serve` pauses (`yield`) at each iteration's peak, after its decode step and before finished
# requests leave, and hands over what it decided; a `for` loop over `serve(...)` runs it.

# %% [markdown] lang="zh"
# 下面是循环本身 `serve`，适用于任何具有上述接口的缓存。它的**接纳规则**如下：
#
# * **最坏情况预算**：一个请求的预算是它最多会持有的物理块数，即提示长度加输出长度再减一（最后一个 token 的 K/V 从不存储），再向上取整到整数个物理块（即上面的 `blocks_needed`）。排在最前面的等待请求在三个条件同时满足时被接纳：它已经到达；运行中的请求少于 `max_batch` 个；它的预算加上运行中各请求的预算不超过池中的 `num_blocks` 个物理块。接着再检查下一个请求。这条规则比较的是预算，而不是空闲的物理块：池中即使还有空闲的物理块，也可能拒绝一个请求，因为运行中的请求之后还可能用到它们；换来的好处是，池绝不会在某个请求中途耗尽。
# * **先来先服务**：请求按到达顺序接纳（同时到达的按请求编号），一个请求即使放得下，也从不越过排在它前面的请求。
# * **`max_new` 相当于 `max_tokens`**：`max_new` 对应真实请求中的 `max_tokens`，真实请求确实会带这样一个上限（我们没有停止 token，所以请求总会生成到这个上限）。第 7 节统计的是实际分配的物理块；这条规则则按最坏情况做预算，数量更多，也就是下图中的阴影区域。真实的推理引擎用乐观接纳加抢占来避免这部分浪费。
#
# 一次迭代内部的顺序是：接纳、解码、退出。在第 $i$ 次迭代被接纳的请求先做预填充（得到第一个 token），再参加同一次迭代的解码步（得到第二个 token）。`serve` 在每次迭代的峰值时刻暂停（`yield`），即解码步之后、完成的请求离开之前，把这次迭代的决定交出来。用 `for` 循环遍历 `serve(...)` 就能运行它。

# %%
def serve(model, cache, requests, num_blocks, block_size, max_batch):
    # [en] Admit (prefill alone), decode all running requests together, retire finished ones; repeat.
    # [en] Yields at each iteration's peak: after the decode step, before finished requests leave.
    # [zh] 接纳请求（单独预填充），所有运行中的请求一起解码，让完成的请求退出；如此循环。
    # [zh] 在每次迭代的峰值时刻 yield：解码步之后、完成的请求离开之前。
    waiting = sorted(requests, key=lambda r: (r.arrival, r.rid))
    running, iteration = [], 0
    while waiting or running:
        reserved, admitted = sum(blocks_needed(r, block_size) for r in running), []
        while (waiting and waiting[0].arrival <= iteration and len(running) < max_batch
               and reserved + blocks_needed(waiting[0], block_size) <= num_blocks):
            request = waiting.pop(0)
            prefill(model, cache, request)
            request.admitted = iteration
            reserved += blocks_needed(request, block_size)
            running.append(request)
            admitted.append(request.rid)
        decoding = [r for r in running if len(r.tokens) < r.max_new]
        if decoding:
            decode_step(model, cache, decoding)
        yield {"iteration": iteration, "admitted": admitted, "decoded": [r.rid for r in decoding],
               "running": [r.rid for r in running], "waiting": len(waiting),
               "blocks_reserved": sum(blocks_needed(r, block_size) for r in running)}
        for r in [r for r in running if len(r.tokens) == r.max_new]:
            cache.free(r.rid)
            r.finished = iteration
            running.remove(r)
        iteration += 1


# %% [markdown] lang="en"
# Small helpers, folded: `watch` records the pool at each pause of `serve` (blocks in use, and
# whether every running request is within its budget); `make_requests` builds requests from
# `(prompt tokens, output tokens, arrival)` with seeded random prompts; `alone` is the reference for one
# request, the first notebook's cache at batch 1, computed once per request and kept; `request_logits`
# joins a request's logits into one tensor.

# %% [markdown] lang="zh"
# 下面几个小工具默认折叠：`watch` 在 `serve` 每次暂停时记录池的状态（使用中的物理块数，以及每个运行中的请求是否都在预算之内）；`make_requests` 按 `(提示 token 数, 输出 token 数, 到达时的迭代)` 生成请求，提示是用固定种子随机生成的 token；`alone` 是单个请求的参照，即第一份笔记本的缓存、batch 为 1 时的结果，每个请求只算一次并保存下来；`request_logits` 把一个请求的 logits 拼成一个张量。

# %% tags=["hide-input"]
def watch(paged, events, requests, block_size) -> list:
    # [en] The trace: each iteration's decisions, plus the pool at its peak (blocks in use, and whether every
    # [en] running request holds at most the blocks budgeted for it).
    # [zh] 迭代记录：每次迭代的决定，加上峰值时刻池的状态（使用中的物理块数，以及每个运行中的请求
    # [zh] 持有的物理块是否都不超过它的预算）。
    needed = {r.rid: blocks_needed(r, block_size) for r in requests}
    return [event | {"blocks_used": paged.pool.used(),
                     "within_reservation": all(len(paged.tables[rid]) <= needed[rid] for rid in event["running"])}
            for event in events]


def make_requests(specs, seed):
    gen = torch.Generator().manual_seed(seed)
    return [Request(rid, torch.randint(0, cfg.vocab, (prompt_len,), generator=gen), max_new, arrival)
            for rid, (prompt_len, max_new, arrival) in enumerate(specs)]


ALONE_CACHE = {}


def alone(request):
    # [en] The reference for one request: the first notebook's cache, batch 1; then a full recomputation.
    # [zh] 单个请求的参照：第一份笔记本的缓存，batch 为 1；再做一次完整重算。
    key = (tuple(request.prompt.tolist()), request.max_new)
    if key not in ALONE_CACHE:
        ALONE_CACHE[key] = generate_alone(model, request.prompt, steps=request.max_new - 1)
    return ALONE_CACHE[key]


def request_logits(request):
    return torch.cat(request.logits)                                    # [prompt + max_new - 1, vocab]

# %% [markdown] lang="en"
# **Blocks return and are reused.** Requests that join later get the blocks that finished requests gave
# back; the first proof checks that nothing goes wrong when they do. Its six requests, with different
# prompt and output lengths, all arrive at once and share a pool of 24 blocks of 4 positions, at
# most three running at a time. `check_reuse` serves them over a given pool and over a contiguous cache
# and gathers the checks, in two groups:
#
# * **the numbers**: the paged run must equal, bit for bit, the same schedule over the contiguous cache
#   (the same calls on the same inputs, as in section 6), and every request's tokens must equal
#   what it generates alone, its logits within the FP32 tolerance (alone, its rows sit in matrices of
#   other shapes);
# * **the bookkeeping**: at each iteration's peak no request holds more blocks than its budget,
#   blocks used earlier are handed out again, and at the end every block is back in the pool.
#
# The scheduler's own promises (never more than three running, first come first served, no request kept
# waiting without a reason) no logit can reveal, since a request's logits are the same whenever it runs.
# The audit after the stream checks them, on this run and on the stream. The code is folded; the
# table it prints follows.

# %% [markdown] lang="zh"
# **物理块能归还、能复用**：之后加入的请求拿到的，正是已完成的请求归还的物理块；第一项证明检查的就是复用时不出错。这项证明用六个请求，它们的提示长度和输出长度各不相同，全部同时到达，共用一个 24 个物理块的池（每个物理块 4 个位置），同一时刻最多运行三个请求。`check_reuse` 让这些请求分别在给定的池和连续缓存上运行，并汇总各项检查，分为两组：
#
# * **数值**：分页缓存的运行结果必须与同一调度下连续缓存的结果逐比特相同（与第 6 节一样，这是同样的输入上的同样的调用），而且每个请求生成的 token 都必须与它单独运行时完全相同，logits 在 FP32 容差内一致（单独运行时，它的各行处在形状不同的矩阵里）；
# * **记账**：在每次迭代的峰值时刻，没有哪个请求持有的物理块超过它的预算；先前用过的物理块会被再次分配出去；运行结束时，所有物理块都已回到池中。
#
# 调度器自己的承诺（同时运行的请求从不超过三个、先来先服务、没有请求无故等待），任何 logits 都反映不出来，因为一个请求无论何时运行，logits 都一样。请求流运行之后的核查会在这次运行和请求流上逐项核对这些承诺。代码默认折叠，下面紧接着是它打印的表格。

# %% tags=["hide-input"]
# [en] (prompt tokens, output tokens, arrival iteration)
# [zh] （提示 token 数，输出 token 数，到达时的迭代）
REUSE_SPECS = [(9, 6, 0), (14, 12, 0), (5, 3, 0), (11, 8, 0), (7, 10, 0), (13, 5, 0)]
REUSE_BLOCKS = 24


def check_reuse(pool) -> dict:
    # [en] The six requests served over `pool` (the scheduler counts REUSE_BLOCKS blocks), then over a contiguous cache.
    # [zh] 六个请求先在 `pool` 上运行（调度器按 REUSE_BLOCKS 个物理块计算），再在连续缓存上运行一遍。
    paged_requests, contiguous_requests = make_requests(REUSE_SPECS, SEED + 3), make_requests(REUSE_SPECS, SEED + 3)
    paged = PagedCache(pool)
    trace = watch(paged, serve(model, paged, paged_requests, REUSE_BLOCKS, BLOCK_SIZE, max_batch=3), paged_requests, BLOCK_SIZE)
    for _ in serve(model, ContiguousCache(cfg), contiguous_requests, REUSE_BLOCKS, BLOCK_SIZE, max_batch=3):
        pass
    versus_contiguous = compare([request_logits(r) for r in paged_requests], [request_logits(r) for r in contiguous_requests])
    versus_alone = compare([request_logits(r) for r in paged_requests], [alone(r)["logits"] for r in paged_requests])
    return {
        "bit_exact_vs_contiguous": versus_contiguous["bit_exact"],
        "max_abs_logit_err_vs_contiguous": versus_contiguous["max_abs_logit_err"],
        "max_abs_logit_err_vs_alone": versus_alone["max_abs_logit_err"],
        "close_to_alone": versus_alone["close"],
        "finite": versus_alone["finite"],
        "tokens_as_alone": all(r.tokens == alone(r)["tokens"] for r in paged_requests),
        "reused_blocks": len(pool.allocations) - len(set(pool.allocations)),
        "all_returned": pool.used() == 0,
        "within_reservation": all(t["within_reservation"] for t in trace),
        "requests": [[r.rid, len(r.prompt), r.max_new, blocks_needed(r, BLOCK_SIZE), r.arrival, r.admitted, r.finished]
                     for r in paged_requests],
        # [en] For the audit of the scheduler below.
        # [zh] 留给后面核查调度器。
        "served": paged_requests,
        "trace": trace,
    }


def show_reuse(reuse):
    say_table([[str(x) for x in row] for row in reuse["requests"]],
              en=["request", "prompt tokens", "output tokens", "worst-case budget (blocks)", "arrives", "admitted", "finished"],
              zh=["请求", "提示 token 数", "输出 token 数", "最坏情况预算（物理块数）", "到达时的迭代", "接纳时的迭代", "完成时的迭代"])
    say(en=f"Bit-exact vs the contiguous cache: `{reuse['bit_exact_vs_contiguous']}`; tokens as alone: `{reuse['tokens_as_alone']}` "
           f"(max abs logit error vs the alone runs {reuse['max_abs_logit_err_vs_alone']:.1e}). {reuse['reused_blocks']} allocations "
           f"of a block an earlier request had used; every request within its budget: `{reuse['within_reservation']}`; "
           f"all blocks back in the pool: `{reuse['all_returned']}`.",
        zh=f"与连续缓存逐比特相同：`{reuse['bit_exact_vs_contiguous']}`；token 与单独运行时相同：`{reuse['tokens_as_alone']}`"
           f"（与单独运行相比，logits 的最大绝对误差为 {reuse['max_abs_logit_err_vs_alone']:.1e}）。有 {reuse['reused_blocks']} 次分配"
           f"拿到的是先前请求用过的物理块；每个请求都未超出预算：`{reuse['within_reservation']}`；"
           f"全部物理块都已归还：`{reuse['all_returned']}`。")

# %%
REUSE = check_reuse(BlockPool(cfg, REUSE_BLOCKS, BLOCK_SIZE))
show_reuse(REUSE)
# [en] The criterion, one line per clause: reused blocks give the same results as fresh ones (contiguous cache,
# [en] each request alone); blocks really were reused; every request stayed within its budget, and every block came back.
# [zh] 判据，每行一条：复用的物理块给出的结果与全新的相同（连续缓存、每个请求单独运行）；确实有物理块被复用；
# [zh] 每个请求都没超出预算，每个物理块都回到了池中。
assert REUSE["bit_exact_vs_contiguous"] and REUSE["tokens_as_alone"] and REUSE["close_to_alone"]
assert REUSE["reused_blocks"] > 0
assert REUSE["within_reservation"] and REUSE["all_returned"]

# %% [markdown] lang="en"
# **Negative control: a reused block not cleared.** `release` returns a block to the free list without
# resetting its fill count; its next owner appends behind slots it never wrote, and reads them. Stale
# fill counts also make sequences take more blocks than the scheduler budgeted for them. With the
# normal pool this bug crashes (the cell shows the `RuntimeError` of the exhausted pool, which says nothing
# about what went wrong); we then give it twice the blocks so that you can see the wrong numbers instead.

# %% [markdown] lang="zh"
# **负对照：复用的物理块没有清理**。`release` 把物理块放回空闲列表，却没有把它的已填计数清零；下一个持有者会接在并非自己写入的槽位之后追加，并读取这些槽位。过期的已填计数还会让序列占用的物理块超过调度器给它的预算。用正常大小的池，这个错误会让运行直接崩溃（下面的单元格显示了物理块耗尽时的 `RuntimeError`，它说明不了错在哪里）；所以我们再多配一倍的物理块，好让错误的数值显现出来。

# %%
class NotClearedPool(BlockPool):
    def clear(self, block):
        for t in self.k + self.v:
            # [en] WRONG on purpose: the fill count is kept.
            # [zh] 故意写错：保留了已填计数。
            t[block] = float("nan")


try:
    check_reuse(NotClearedPool(cfg, REUSE_BLOCKS, BLOCK_SIZE))
    crash = None
except RuntimeError as error:
    crash = error
say(en=f"With the normal pool ({REUSE_BLOCKS} blocks): `RuntimeError: {crash}`",
    zh=f"用正常大小的池（{REUSE_BLOCKS} 个物理块）：`RuntimeError: {crash}`")
assert crash is not None and str(crash).startswith("free == []")
not_cleared = check_reuse(NotClearedPool(cfg, 2 * REUSE_BLOCKS, BLOCK_SIZE))
not_cleared_caught = not (not_cleared["bit_exact_vs_contiguous"] or not_cleared["close_to_alone"] or not_cleared["within_reservation"])
say(en=f"Reused block not cleared: bit-exact vs the contiguous cache `{not_cleared['bit_exact_vs_contiguous']}`, close to the alone "
       f"runs `{not_cleared['close_to_alone']}`, every request within its budget `{not_cleared['within_reservation']}`: caught.",
    zh=f"复用的物理块没有清理：与连续缓存逐比特相同 `{not_cleared['bit_exact_vs_contiguous']}`，与单独运行一致 "
       f"`{not_cleared['close_to_alone']}`，每个请求都未超出预算 `{not_cleared['within_reservation']}`：已查出。")
# [en] Stale slots are NaN, and stale fill counts take more blocks than budgeted: every check of the proof fails.
# [zh] 过期的槽位是 NaN，过期的已填计数让请求占用的物理块超过预算：这项证明的每项检查都失败。
assert not_cleared_caught and not not_cleared["finite"]
