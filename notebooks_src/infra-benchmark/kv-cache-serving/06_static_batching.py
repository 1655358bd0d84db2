# %% [markdown] lang="en"
# **The stream.** The whole section uses one seeded stream of {{run:stream.requests}} requests: prompts of
# {{run:stream.prompt_min}} to {{run:stream.prompt_max}} tokens, {{run:stream.output_min}} to
# {{run:stream.output_max}} output tokens, arrivals spread over the first iterations. It is served from a
# pool of {{run:stream.blocks}} blocks of {{run:stream.block_size}} positions, at most
# {{run:stream.max_batch}} requests at once.

# %% [markdown] lang="zh"
# **请求流**：本节始终使用同一个由固定种子生成的请求流，共 {{run:stream.requests}} 个请求：提示 {{run:stream.prompt_min}} 到 {{run:stream.prompt_max}} 个 token，输出 {{run:stream.output_min}} 到 {{run:stream.output_max}} 个 token，在开头若干次迭代内陆续到达。服务它的池有 {{run:stream.blocks}} 个物理块，每个物理块 {{run:stream.block_size}} 个位置，同时最多运行 {{run:stream.max_batch}} 个请求。

# %%
STREAM_REQUESTS, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH = 24, 40, 8, 8
STREAM_PROMPTS, STREAM_OUTPUTS = (4, 48), (4, 40)
rng_stream = np.random.default_rng(SEED + 5)
# [en] (prompt tokens, output tokens, arrival iteration) per request
# [zh] 每个请求的（提示 token 数，输出 token 数，到达时的迭代）
STREAM_SPECS = list(zip(rng_stream.integers(STREAM_PROMPTS[0], STREAM_PROMPTS[1] + 1, STREAM_REQUESTS).tolist(),
                        rng_stream.integers(STREAM_OUTPUTS[0], STREAM_OUTPUTS[1] + 1, STREAM_REQUESTS).tolist(),
                        np.cumsum(rng_stream.integers(0, 3, STREAM_REQUESTS)).tolist()))

# %% [markdown] lang="en"
# **The baseline: static batching, counted.** The cost of a schedule can be counted without running the
# model: it needs only each request's output length, fixed here because no stop token ends a request
# early. (That the schedule does not change a request's tokens is checked, on this stream, for the
# continuous loop below.) `static_schedule` forms a batch from the requests that have arrived, first
# come, first served, under the same two limits as the loop below: at most `max_batch` requests, and
# their worst-case budgets (`blocks_needed`) must fit in the pool. The batch then runs until its longest request
# is done, and only then leaves. Each request's first token comes from its prefill, so it needs
# `max_new - 1` decode steps; a batch needs as many as its longest request. We count the decode steps,
# the tokens per decode step, and the **idle row-steps**: decode steps in which a request that has
# finished still holds its row. The control runs next to it: with `max_batch=1` static batching serves one
# request at a time, and must produce exactly one token per decode step with no idle row.

# %% [markdown] lang="zh"
# **基线：静态批处理的计数**。不必运行模型，就能数出一种调度的代价：只需要每个请求的输出长度，而这里没有停止 token 让请求提前结束，输出长度是固定的。（调度不改变请求生成的 token，这一点后面会在这个请求流上对连续批处理循环加以核对。）`static_schedule` 用已经到达的请求按先来先服务的顺序组成一个 batch，限制与后面的循环相同：最多 `max_batch` 个请求，而且它们的最坏情况预算（`blocks_needed`）必须放得进池中。这个 batch 一直运行到其中最长的请求结束，然后才整体离开。每个请求的第一个 token 来自预填充，因此它需要 `max_new - 1` 个解码步；一个 batch 需要的解码步数与其中最长的请求相同。我们统计解码步数、每个解码步生成的 token 数，以及**空闲行步数**：已经完成的请求仍占着自己那一行的解码步数。同时运行的还有它的对照：`max_batch=1` 时，静态批处理就是一次只处理一个请求，每个解码步必须恰好生成 1 个 token，而且没有空闲行。

# %%
def static_schedule(requests, num_blocks, block_size, max_batch) -> dict:
    # [en] Batches formed from the arrived requests, each run until its longest request is done.
    # [zh] 用已到达的请求组成 batch，每个 batch 运行到其中最长的请求结束。
    waiting = sorted(requests, key=lambda r: (r.arrival, r.rid))
    iteration, decode_steps, idle_row_steps, batches = 0, 0, 0, 0
    while waiting:
        batch, reserved = [], 0
        while (waiting and waiting[0].arrival <= iteration and len(batch) < max_batch
               and reserved + blocks_needed(waiting[0], block_size) <= num_blocks):
            reserved += blocks_needed(waiting[0], block_size)
            batch.append(waiting.pop(0))
        if not batch:
            # [en] Nobody has arrived yet: an empty iteration.
            # [zh] 还没有请求到达：空转一次迭代。
            iteration += 1
            continue
        steps = max(r.max_new for r in batch) - 1
        decode_steps += steps
        idle_row_steps += sum(steps - (r.max_new - 1) for r in batch)
        batches += 1
        # [en] One iteration per decode step, as in `serve` (a batch with no decode step still takes one).
        # [zh] 与 `serve` 相同，每个解码步占一次迭代（没有解码步的 batch 也占一次）。
        iteration += max(steps, 1)
    decoded_tokens = sum(r.max_new - 1 for r in requests)
    return {"batches": batches, "iterations": iteration, "decode_steps": decode_steps, "decoded_tokens": decoded_tokens,
            "tokens_per_decode_step": decoded_tokens / decode_steps, "idle_row_steps": idle_row_steps}


# [en] Prompt contents do not matter for counting; only lengths and arrivals do.
# [zh] 计数只与长度和到达时刻有关，与提示的内容无关。
stream_shapes = [Request(rid, torch.zeros(p, dtype=torch.long), o, a) for rid, (p, o, a) in enumerate(STREAM_SPECS)]
STATIC_BATCHING = static_schedule(stream_shapes, STREAM_BLOCKS, STREAM_BLOCK_SIZE, STREAM_MAX_BATCH)
one_at_a_time = static_schedule(stream_shapes, STREAM_BLOCKS, STREAM_BLOCK_SIZE, max_batch=1)
say_table([[f"`max_batch={m}`", str(s["batches"]), str(s["decode_steps"]), f"{s['tokens_per_decode_step']:.2f}", str(s["idle_row_steps"])]
           for m, s in ((STREAM_MAX_BATCH, STATIC_BATCHING), (1, one_at_a_time))],
          en=["static batching", "batches", "decode steps", "tokens per decode step", "idle row-steps"],
          zh=["静态批处理", "batch 数", "解码步数", "每个解码步的 token 数", "空闲行步数"])
assert one_at_a_time["tokens_per_decode_step"] == 1 and one_at_a_time["idle_row_steps"] == 0
assert STATIC_BATCHING["tokens_per_decode_step"] > 1 and STATIC_BATCHING["idle_row_steps"] > 0

# %% tags=["prose-values"]
{"stream": {"requests": STREAM_REQUESTS, "blocks": STREAM_BLOCKS, "block_size": STREAM_BLOCK_SIZE, "max_batch": STREAM_MAX_BATCH,
            "prompt_min": STREAM_PROMPTS[0], "prompt_max": STREAM_PROMPTS[1], "output_min": STREAM_OUTPUTS[0], "output_max": STREAM_OUTPUTS[1]},
 "static_batching": {"decode_steps": STATIC_BATCHING["decode_steps"], "decoded_tokens": STATIC_BATCHING["decoded_tokens"], "tokens_per_decode_step": float(STATIC_BATCHING["tokens_per_decode_step"]),
            "idle_row_steps": STATIC_BATCHING["idle_row_steps"]}}

# %% [markdown] lang="en"
# Static batching already beats one request at a time, but in this run its finished requests held
# {{run:static_batching.idle_row_steps}} row-steps doing nothing, and requests that arrived during a batch waited
# for all of it. Continuous batching gives those rows to waiting requests; the loop that does it comes next.

# %% [markdown] lang="zh"
# 静态批处理已经胜过一次只处理一个请求，但在本次运行中，已完成的请求白白占用了 {{run:static_batching.idle_row_steps}} 个行步，而在一个 batch 运行期间到达的请求，要等这整个 batch 结束。连续批处理把这些行让给等待中的请求；下面就是这样做的循环。
