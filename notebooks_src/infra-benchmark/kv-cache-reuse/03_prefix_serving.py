# %% [markdown] lang="en"
# ## 5. Serving requests with a prefix cache
#
# A request carries its prompt, the number of tokens to generate and the iteration it arrives at. The
# serving loop repeats three steps, as in the serving notebook: several requests run at the same time and
# each iteration advances every one of them. Unlike the serving notebook, each model call here serves a
# single request (batch 1): the running requests take turns, one call each per iteration, instead of being
# stacked into one batched call. That keeps each call's arithmetic exactly that of a request served alone,
# so the only new thing here is the cache:
#
# * **admit** waiting requests in arrival order: look the prompt up, hold the hit blocks, take fresh
#   blocks for the rest of the prompt and the tokens to come, and prefill **only the tokens after the
#   hit**, over the K/V gathered from the hit blocks; then publish the prompt's full blocks. A request
#   waits while the pool cannot give it enough blocks (free ones plus evictable ones);
# * **decode** one token for every running request, over its K/V gathered from its block table;
# * **retire** finished requests, releasing their blocks in reverse order.
#
# The reference is each request served **cold**: alone, with the first notebook's cache, the whole prompt
# in one call. A request without a hit makes exactly the same calls on the same values (gathering copies
# values and computes nothing), so its logits must be bit-identical to the cold ones. A request with a hit
# computes its prompt in two pieces, the cached prefix earlier (in another request's prefill) and the rest
# now: the sums are grouped differently, so its logits must agree within the FP32 tolerance, and its
# tokens exactly.

# %% [markdown] lang="zh"
# ## 5. 用前缀缓存服务请求
#
# 每个请求带着它的提示、要生成的 token 数，以及它到达的轮次。服务循环与服务笔记本一样重复三步：多个请求同时运行，每一轮让每个请求都前进一步。与服务笔记本不同的是，这里每次调用模型只服务一个请求（batch 为 1）：运行中的请求轮流调用，每轮各调用一次，而不是拼成一个 batch 一起调用。这样每次调用的运算与单独服务这个请求时完全相同，唯一的新东西就是缓存：
#
# * **接纳**：按到达顺序处理等待中的请求：查找提示，持有命中的物理块，为提示的其余部分和将要生成的 token 取新物理块，并且只对**命中部分之后的 token** 做预填充（prefill），计算时读取从命中物理块中收集出来的 K/V；然后登记提示中填满的物理块。如果池给不出足够的物理块（空闲的加上可淘汰的），请求就继续等待；
# * **解码**：每个运行中的请求生成一个 token，计算时读取从它的块表中收集出来的 K/V；
# * **退出**：完成的请求按相反顺序释放它的物理块。
#
# 参照是以**冷启动**方式服务的同一个请求：单独运行，使用第一份笔记本的缓存，整个提示在一次调用中算完。没有命中的请求所做的调用、用到的数值都与冷启动完全相同（收集只复制数值，不做计算），所以它的 logits 必须与冷启动逐比特相同。有命中的请求则分两段计算提示：缓存的前缀早先已经算好（在另一个请求的预填充里），其余部分现在才算；求和的分组方式不同，所以它的 logits 只需在 FP32 容差内一致，生成的 token 则必须完全相同。

# %%
@dataclass
class Request:
    rid: int
    prompt: list
    max_new: int
    arrival: int = 0
    table: list = field(default_factory=list)
    hit_tokens: int = 0
    # [en] Generated tokens, and the logits that chose each of them.
    # [zh] 生成的 token，以及选出每个 token 的 logits。
    tokens: list = field(default_factory=list)
    logits: list = field(default_factory=list)


def blocks_needed(request, block_size) -> int:
    # [en] The last generated token is never fed back, so its K/V is never stored.
    # [zh] 最后生成的 token 不会再送回模型，所以它的 K/V 从不存储。
    return math.ceil((len(request.prompt) + request.max_new - 1) / block_size)


@torch.inference_mode()
def admit(model, pool, request, hits, hit_tokens):
    for block in hits:
        pool.acquire(block)
    request.table = hits + [pool.allocate() for _ in range(blocks_needed(request, pool.block_size) - len(hits))]
    request.hit_tokens = hit_tokens
    past = pool.gather(request.table, hit_tokens) if hit_tokens else None
    logits, cache = model(torch.tensor([request.prompt[hit_tokens:]]), past)   # [1, P - hit, vocab]
    pool.write(request.table, hit_tokens, cache)
    for block, block_hash in zip(request.table, pool.block_hashes(request.prompt)):
        pool.publish(block, block_hash)
    request.logits.append(logits[0, -1])
    request.tokens.append(int(logits[0, -1].argmax()))


@torch.inference_mode()
def decode_step(model, pool, request):
    stored = len(request.prompt) + len(request.tokens) - 1
    logits, cache = model(torch.tensor([[request.tokens[-1]]]), pool.gather(request.table, stored))
    pool.write(request.table, stored, cache)
    request.logits.append(logits[0, -1])
    request.tokens.append(int(logits[0, -1].argmax()))


def serve(model, pool, requests) -> int:
    waiting, running, iteration = sorted(requests, key=lambda r: (r.arrival, r.rid)), [], 0
    while waiting or running:
        while waiting and waiting[0].arrival <= iteration:
            hits, hit_tokens = pool.lookup(waiting[0].prompt)
            fresh = blocks_needed(waiting[0], pool.block_size) - len(hits)
            # [en] Hit blocks in the LRU queue are about to be held: they cannot be evicted for this request.
            # [zh] LRU 队列中命中的物理块马上就要被持有：不能为这个请求淘汰它们。
            if fresh > pool.available() - sum(block in pool.evictable for block in hits):
                if not running:
                    raise PoolFull({"blocks": pool.num_blocks, "request": waiting[0].rid, "needs": fresh})
                break
            running.append(waiting.pop(0))
            admit(model, pool, running[-1], hits, hit_tokens)
        for request in running:
            if len(request.tokens) < request.max_new:
                decode_step(model, pool, request)
        for request in [r for r in running if len(r.tokens) == r.max_new]:
            for block in reversed(request.table):
                pool.release(block)
            running.remove(request)
        iteration += 1
    return iteration


# [en] The first notebook's greedy loop: the prompt in one call, then one token per call over the cache.
# [zh] 第一份笔记本的贪心生成循环：提示一次调用算完，之后每次调用读取缓存、生成一个 token。
@torch.inference_mode()
def greedy_generate(model, prompt, n_new):
    logits, cache = model(torch.tensor([prompt]))
    rows, tokens = [logits[0, -1]], [int(logits[0, -1].argmax())]
    for _ in range(n_new - 1):
        logits, cache = model(torch.tensor([[tokens[-1]]]), cache)
        rows.append(logits[0, -1])
        tokens.append(int(logits[0, -1].argmax()))
    return torch.stack(rows), tokens                                   # [n_new, vocab], n_new ids


COLD = {}


def serve_cold(request):
    key = (tuple(request.prompt), request.max_new)
    if key not in COLD:
        COLD[key] = greedy_generate(model, request.prompt, request.max_new)
    return COLD[key]

# %% [markdown] lang="en"
# **The workload.** A seeded stream of requests: each starts with one of four system prompts of 40, 28, 20
# and 32 tokens (chosen with probabilities 0.4, 0.3, 0.2, 0.1), followed by a question of 2 to 12 random
# tokens, and asks for 3 to 10 new tokens; one request arrives per iteration. `run_stream` serves the
# stream through a pool of a given size and compares every request with its cold run. The same stream
# is served through pools from barely enough blocks for the largest request up to more than it ever
# needs, so that small pools must evict blocks that later requests would have found.
#
# **The criterion**, for every pool size: every request's logits within the tolerance of its cold run and
# its tokens identical (the decisions' margins are reported against the errors); requests without a hit
# bit-identical; every hit a whole number of full blocks and shorter than its prompt, so that a partly
# filled block is never shared; all logits finite, although small pools evict: an evicted block is filled
# with NaN, so a read of one would show; and at the end no block is held any more.

# %% [markdown] lang="zh"
# **负载**：一个由随机种子生成的请求流。每个请求以四段系统提示之一开头（长度分别为 40、28、20、32 个 token，被选中的概率分别为 0.4、0.3、0.2、0.1），后面接一个由 2 到 12 个随机 token 组成的问题，并要求生成 3 到 10 个新 token；每轮到达一个请求。`run_stream` 用给定大小的池服务这个请求流，并把每个请求与它的冷启动结果比较。同一个请求流依次交给不同大小的池：从刚好放得下最大请求的池，到比实际需要还大的池；池小时就不得不淘汰后续请求本来能找到的物理块。
#
# **判据**（对每种池大小）：每个请求的 logits 都在容差内等于它的冷启动结果，生成的 token 完全相同（同时报告决策余量与误差的对比）；没有命中的请求逐比特相同；每次命中都是整数个填满的物理块，并且比提示短，也就是说未填满的物理块从不共享；所有 logits 都是有限数，尽管小池会淘汰物理块：被淘汰的物理块填满 NaN，一旦被读到就会显现出来；最后，没有任何物理块仍被持有。

# %%
SYSTEM_LENGTHS, SYSTEM_WEIGHTS = (40, 28, 20, 32), (0.4, 0.3, 0.2, 0.1)
STREAM_REQUESTS = 24 if QUICK else 48
POOL_SIZES = (18, 32, 96) if QUICK else (18, 24, 32, 48, 64, 96)


def make_stream(n, seed):
    rng = random.Random(seed)
    systems = [[rng.randrange(cfg.vocab) for _ in range(length)] for length in SYSTEM_LENGTHS]
    specs = []
    for rid in range(n):
        system = rng.choices(systems, weights=SYSTEM_WEIGHTS)[0]
        question = [rng.randrange(cfg.vocab) for _ in range(rng.randint(2, 12))]
        specs.append((system + question, rng.randint(3, 10), rid))
    return specs


# [en] The largest error, NaN if any is NaN (Python's max() would skip it depending on the order).
# [zh] 最大误差；只要有一个是 NaN 就返回 NaN（Python 的 max() 会因顺序不同而漏掉 NaN）。
def worst(errors) -> float:
    errors = list(errors)
    return math.nan if any(math.isnan(e) for e in errors) else max(errors, default=0.0)


def compare_with_cold(requests, block_size) -> dict:
    errors, margins, rows = [], [], []
    for r in requests:
        cold_logits, cold_tokens = serve_cold(r)
        logits = torch.stack(r.logits)
        top2 = cold_logits.topk(2, dim=-1).values
        margins.append(float((top2[:, 0] - top2[:, 1]).min()))
        errors.append(max_abs_err(logits, cold_logits))
        rows.append((r, logits, cold_logits, cold_tokens))
    hits = [e for e, (r, *_) in zip(errors, rows) if r.hit_tokens]
    return {
        "close": all(close(logits, cold) and r.tokens == tokens for r, logits, cold, tokens in rows),
        "misses_bit_identical": all(torch.equal(logits, cold) for r, logits, cold, _ in rows if not r.hit_tokens),
        "whole_blocks": all(r.hit_tokens % block_size == 0 and r.hit_tokens < len(r.prompt) for r in requests),
        "finite": all(bool(torch.isfinite(logits).all()) for _, logits, _, _ in rows),
        "wrong_requests": [r.rid for r, logits, cold, tokens in rows if not (close(logits, cold) and r.tokens == tokens)],
        "max_abs_logit_err": worst(errors),
        "max_abs_logit_err_hits": worst(hits),
        "min_margin": min(margins),
    }


def run_stream(specs, num_blocks, pool_class=PrefixCache) -> dict:
    pool = pool_class(cfg, num_blocks)
    requests = [Request(rid, prompt, max_new, arrival) for rid, (prompt, max_new, arrival) in enumerate(specs)]
    iterations = serve(model, pool, requests)
    prompt_tokens, hit_tokens = sum(len(r.prompt) for r in requests), sum(r.hit_tokens for r in requests)
    return {"blocks": num_blocks, "iterations": iterations, "evictions": pool.evictions, "all_released": not any(pool.refs),
            "requests_with_hit": sum(r.hit_tokens > 0 for r in requests),
            "prompt_tokens": prompt_tokens, "prefill_tokens_saved": hit_tokens, "hit_rate": hit_tokens / prompt_tokens,
            **compare_with_cold(requests, pool.block_size)}


STREAM = make_stream(STREAM_REQUESTS, SEED + 1)
SWEEP = [run_stream(STREAM, n) for n in POOL_SIZES]
say_table([[str(r["blocks"]), f"{r['hit_rate']:.1%}", f"{r['prefill_tokens_saved']:,}", str(r["evictions"]), str(r["iterations"]),
            f"{r['max_abs_logit_err_hits']:.1e}", f"{r['min_margin']:.1e}"] for r in SWEEP],
          en=["pool blocks", "hit rate", "prefill tokens saved", "evictions", "iterations", "max logit err (hits)", "min margin"],
          zh=["池中物理块数", "命中率", "省下的预填充 token", "淘汰次数", "轮数", "最大 logits 误差（命中）", "最小余量"])
assert all(r["close"] and r["misses_bit_identical"] and r["whole_blocks"] and r["finite"] and r["all_released"] for r in SWEEP)
assert all(r["min_margin"] > 100 * r["max_abs_logit_err"] for r in SWEEP) and SWEEP[0]["evictions"] > 0
say(en=f"All checks passed for each of the {len(SWEEP)} pool sizes: every request's tokens equal its cold run's and its logits "
       f"are within the FP32 tolerance, requests without a hit are bit-identical, only whole blocks are shared, every logit is "
       f"finite and no block is held at the end.",
    zh=f"{len(SWEEP)} 种池大小下，所有检查全部通过：每个请求生成的 token 都与冷启动相同，logits 都在 FP32 容差之内；"
       f"没有命中的请求逐比特相同；只共享整块；所有 logits 都是有限数；最后没有任何物理块仍被持有。")
