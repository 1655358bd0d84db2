# %% [markdown] lang="en"
# A request of this notebook also records how many of its prompt tokens were found in the cache. `read_kv`
# reads a request's K/V from its blocks in the decoder's format, and `run_tokens` is one model call: it feeds
# tokens after the cached positions, stores their K/V in the request's blocks and chooses the next token.
# `admit` and `decode_step` are the first two steps of the loop described above.

# %% [markdown] lang="zh"
# 本笔记本的请求还要记下它的提示中有多少个 token 在缓存中找到。`read_kv` 把一个请求的 K/V 从它的物理块中读出来，转换成解码器的格式；`run_tokens` 是一次模型调用：把 token 接在已缓存的位置之后送进模型，把它们的 K/V 存进请求的物理块，再选出下一个 token。`admit` 和 `decode_step` 就是上面描述的循环的前两步。

# %%
@dataclass
class PrefixRequest(Request):
    # [en] Prompt tokens found in the cache on admission.
    # [zh] 接纳时在缓存中找到的提示 token 数。
    hit_tokens: int = 0


def read_kv(cache, seq):
    # [en] The sequence's K/V in the decoder's format: [(K, V)] of [1, H, length, Dh]; None while it has none.
    # [zh] 序列的 K/V，转换成解码器的格式：[(K, V)]，形状为 [1, H, length, Dh]；还没有 K/V 时为 None。
    if cache.length(seq) == 0:
        return None
    return [tuple(t[None] for t in cache.read(layer, seq)) for layer in range(len(cache.pool.k))]


@torch.inference_mode()
def run_tokens(model, cache, request, ids):
    held = cache.length(request.rid)
    logits, kv = model(ids[None], read_kv(cache, request.rid))              # [1, n, vocab]
    addresses = cache.reserve(request.rid, len(ids))
    for layer, (k, v) in enumerate(kv):                                    # k, v: [1, H, held + n, Dh]
        cache.write(layer, request.rid, addresses, k[0, :, held:], v[0, :, held:])
    request.logits.append(logits[0, -1])
    request.tokens.append(int(logits[0, -1].argmax()))


def admit(model, cache, request, hits, hit_tokens):
    cache.add(request.rid, hits)
    request.hit_tokens = hit_tokens
    run_tokens(model, cache, request, request.prompt[hit_tokens:])
    for block, block_hash in zip(cache.tables[request.rid], cache.pool.block_hashes(request.prompt.tolist())):
        cache.pool.publish(block, block_hash)


def decode_step(model, cache, request):
    run_tokens(model, cache, request, torch.tensor(request.tokens[-1:]))

# %% [markdown] lang="en"
# `promised` (folded) is the formula's last term, the serving notebook's bookkeeping. `serve` is the loop: its
# admission test is the rule above, line for line.

# %% [markdown] lang="zh"
# `promised`（已折叠）算出公式的最后一项，是服务笔记本中的记账代码。`serve` 就是服务循环：它的接纳判断与上面的规则逐项对应。

# %% tags=["hide-input"]
def promised(cache, running) -> int:
    # [en] Blocks the running requests may still take: what each may need, less what it holds.
    # [zh] 运行中的请求还可能取走的物理块：每个请求可能需要的，减去它已持有的。
    return sum(blocks_needed(r, cache.pool.block_size) - len(cache.tables[r.rid]) for r in running)

# %%
def serve(model, cache, requests):
    # [en] Admit (look up, prefill after the hit), decode every running request, retire finished ones; repeat.
    # [en] Yields at each iteration's peak: after the decode step, before finished requests leave.
    # [zh] 接纳请求（查找，只预填充命中之后的部分），每个运行中的请求各解码一步，让完成的请求退出；如此循环。
    # [zh] 在每次迭代的峰值时刻 yield：解码步之后、完成的请求离开之前。
    pool = cache.pool
    waiting, running, iteration = sorted(requests, key=lambda r: (r.arrival, r.rid)), [], 0
    while waiting or running:
        while waiting and waiting[0].arrival <= iteration:
            hits, hit_tokens = pool.lookup(waiting[0].prompt.tolist())
            fresh = blocks_needed(waiting[0], pool.block_size) - len(hits)
            # [en] Hit blocks in the LRU queue are about to be held: they cannot be evicted for this request.
            # [zh] LRU 队列中命中的物理块马上就要被持有：不能为这个请求淘汰它们。
            if fresh > pool.available() - sum(block in pool.evictable for block in hits) - promised(cache, running):
                if not running:
                    raise PoolFull({"blocks": pool.num_blocks, "request": waiting[0].rid, "needs": fresh})
                break
            request = waiting.pop(0)
            admit(model, cache, request, hits, hit_tokens)
            request.admitted = iteration
            running.append(request)
        for request in running:
            if len(request.tokens) < request.max_new:
                decode_step(model, cache, request)
        yield {"iteration": iteration, "running": [r.rid for r in running]}
        for request in [r for r in running if len(r.tokens) == r.max_new]:
            cache.free(request.rid)
            request.finished = iteration
            running.remove(request)
        iteration += 1

# %% [markdown] lang="en"
# **The workload.** A seeded stream of requests: each starts with one of four system prompts of 40, 28, 20
# and 32 tokens (chosen with probabilities 0.4, 0.3, 0.2, 0.1), followed by a question of 2 to 12 random
# tokens, and asks for 3 to 10 new tokens; one request arrives per iteration.

# %% [markdown] lang="zh"
# **负载**：一个由随机种子生成的请求流。每个请求以四段系统提示之一开头（长度分别为 40、28、20、32 个 token，被选中的概率分别为 0.4、0.3、0.2、0.1），后面接一个由 2 到 12 个随机 token 组成的问题，并要求生成 3 到 10 个新 token；每次迭代到达一个请求。

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


STREAM = make_stream(STREAM_REQUESTS, SEED + 1)

# %% [markdown] lang="en"
# **The criterion and the sweep.** Two results matter: the **hit rate** (the share of prompt tokens found in the
# cache) and **logits as cold**: each request gives the same tokens as its cold run (below), with logits within
# the FP32 tolerance, and requests without a hit are bit-identical. Close
# logits imply identical tokens only where no decision is a near tie, so the smallest **margin** of the cold runs
# (best logit minus second best) must be at least 100 times the largest absolute error. The other keys that the folded
# `run_stream` returns are sanity checks of the serving loop: every hit is whole blocks shorter than its prompt,
# every logit is finite (an evicted block is refilled with NaN), no running request outgrows what its admission
# counted, and at the end every block is free or cached. The same stream goes through pools from barely enough
# blocks for the largest request to pools large enough that the hit rate stops growing, so small pools must evict
# blocks that later requests would have found.

# %% [markdown] lang="zh"
# **判据与扫描。** 要紧的结果有两个：**命中率**（提示 token 中在缓存里找到的比例），以及 **logits 与冷启动一致**，即每个请求生成的 token 与它的冷启动运行（见下文）所得的相同，logits 在 FP32 容差之内，没有命中的请求逐比特相同。logits 相近只有在没有哪一步的决策几乎打平时，才能推出 token 相同，所以冷启动结果中的最小**余量**（最大的 logit 减去第二大的 logit）必须至少是最大绝对误差的 100 倍。折叠起来的 `run_stream` 返回的其余各项是对服务循环的健全性检查：每次命中都是整数个物理块、比提示短；所有 logits 都是有限数（被淘汰的物理块会重新填满 NaN）；没有哪个运行中的请求超出接纳时为它计入的物理块数；最后每个物理块不是空闲的，就是已缓存的。同一个请求流依次交给不同大小的池：从刚好放得下最大请求的池，到大得足以让命中率不再上升的池；池小时就不得不淘汰后续请求本来能找到的物理块。

# %% [markdown] lang="en"
# **The reference: each request served cold.** `serve_cold` runs the first notebook's greedy loop on one request
# alone, with no other request and no prefix cache, and keeps the result, so that every pool size is compared with
# the same cold run.

# %% [markdown] lang="zh"
# **参照：每个请求都以冷启动方式单独处理。** `serve_cold` 对单个请求运行第一份笔记本的贪心生成循环，不与其他请求同批，也不用前缀缓存，并保存结果，这样每种池大小都与同一次冷启动运行比较。

# %%
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
    return torch.stack(rows), tokens                                   # [n_new, vocab]


COLD = {}


def serve_cold(request):
    key = (tuple(request.prompt.tolist()), request.max_new)
    if key not in COLD:
        COLD[key] = greedy_generate(model, request.prompt.tolist(), request.max_new)
    return COLD[key]


# %% tags=["hide-input"]
# [en] The harness: run one stream through one pool, serving with checks and comparing each request with its cold run.
# [zh] 测试框架：让一个请求流通过一个池，边服务边检查，并把每个请求与它的冷启动运行比较。
def compare_with_cold(requests, block_size) -> dict:
    # [en] Each request's logits [max_new, vocab] and tokens, next to its cold run's.
    # [zh] 每个请求的 logits [max_new, vocab] 和 token，与它冷启动的结果并排放在一起。
    rows = [(r, torch.stack(r.logits), *serve_cold(r)) for r in requests]
    hits = [(logits, cold) for r, logits, cold, _ in rows if r.hit_tokens]
    misses = [(logits, cold) for r, logits, cold, _ in rows if not r.hit_tokens]
    everything = compare([logits for _, logits, _, _ in rows], [cold for _, _, cold, _ in rows])
    wrong = [r.rid for r, logits, cold, tokens in rows if not (close(logits, cold) and r.tokens == tokens)]
    return {
        "close": not wrong,
        "misses_bit_identical": compare([logits for logits, _ in misses], [cold for _, cold in misses])["bit_exact"],
        "whole_blocks": all(r.hit_tokens % block_size == 0 and r.hit_tokens < len(r.prompt) for r in requests),
        "finite": everything["finite"],
        "wrong_requests": wrong,
        "max_abs_logit_err": everything["max_abs_logit_err"],
        "max_abs_logit_err_hits": compare([logits for logits, _ in hits], [cold for _, cold in hits])["max_abs_logit_err"],
        "min_margin": min(float((top2[:, 0] - top2[:, 1]).min()) for top2 in (cold.topk(2, dim=-1).values for _, _, cold, _ in rows)),
    }


def serve_and_check(cache, requests) -> dict:
    # [en] As in the serving notebook: serve, and at each iteration's peak check that every running request holds at most
    # [en] the blocks counted for it on admission; at the end, that no block is held and none is lost.
    # [zh] 与服务笔记本相同：服务请求，并在每次迭代的峰值时刻检查每个运行中的请求持有的物理块不超过接纳时为它计入的数量；
    # [zh] 最后检查没有物理块仍被持有，也没有物理块丢失：每个物理块不是空闲的，就是已缓存的。
    pool = cache.pool
    needed = {r.rid: blocks_needed(r, pool.block_size) for r in requests}
    peaks = [all(len(cache.tables[rid]) <= needed[rid] for rid in event["running"]) for event in serve(model, cache, requests)]
    return {"iterations": len(peaks), "within_reservation": all(peaks),
            "all_released": not any(pool.refs) and sorted(pool.free + list(pool.evictable)) == list(range(pool.num_blocks))}


def run_stream(specs, num_blocks, pool_class=PrefixPool) -> dict:
    cache = PagedCache(pool_class(cfg, num_blocks))
    requests = [PrefixRequest(rid, torch.tensor(prompt), max_new, arrival) for rid, (prompt, max_new, arrival) in enumerate(specs)]
    served = serve_and_check(cache, requests)
    prompt_tokens, hit_tokens = sum(len(r.prompt) for r in requests), sum(r.hit_tokens for r in requests)
    return {"blocks": num_blocks, "evictions": cache.pool.evictions, **served,
            "requests_with_hit": sum(r.hit_tokens > 0 for r in requests), "hit_tokens": [r.hit_tokens for r in requests],
            "prompt_tokens": prompt_tokens, "prefill_tokens_saved": hit_tokens, "hit_rate": hit_tokens / prompt_tokens,
            **compare_with_cold(requests, cache.pool.block_size)}

# %%
SWEEP = [run_stream(STREAM, n) for n in POOL_SIZES]
say_table([[str(r["blocks"]), f"{r['hit_rate']:.1%}", f"{r['prefill_tokens_saved']:,}", str(r["evictions"]), str(r["iterations"]),
            f"{r['max_abs_logit_err_hits']:.1e}", f"{r['min_margin']:.1e}"] for r in SWEEP],
          en=["pool blocks", "hit rate", "prefill tokens saved", "evictions", "iterations", "max abs logit error (hits)", "min margin"],
          zh=["池中物理块数", "命中率", "省下的预填充 token 数", "淘汰次数", "迭代次数", "logits 的最大绝对误差（命中）", "最小余量"])
assert all(r["close"] and r["misses_bit_identical"] and r["whole_blocks"] and r["finite"] and r["within_reservation"]
           and r["all_released"] for r in SWEEP)
assert all(r["min_margin"] > 100 * r["max_abs_logit_err"] for r in SWEEP) and SWEEP[0]["evictions"] > 0
say(en=f"For each of the {len(SWEEP)} pool sizes the logits equal the cold runs' (same tokens, within the FP32 tolerance, "
       f"requests without a hit bit-identical), and the serving loop's sanity checks hold.",
    zh=f"在全部 {len(SWEEP)} 种池大小下，logits 都与冷启动一致（token 相同，在 FP32 容差之内，没有命中的请求逐比特相同），"
       f"服务循环的各项健全性检查也都通过。")
