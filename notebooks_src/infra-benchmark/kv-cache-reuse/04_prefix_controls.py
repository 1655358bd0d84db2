# %% [markdown] lang="en"
# **Negative controls.** Three mistakes a prefix cache can make, each a subclass of `PrefixPool` that
# changes one method (two for the partly filled block), each served through the same loop and judged by the same comparison with the cold
# runs. They need situations that the random stream above does not produce on its own, so they run on two
# small scenarios, which the correct pool must pass as well:
#
# * **shared documents** (`shared_documents`, a pool of 64 blocks): two requests with different system
#   prompts, then one that puts a document seen before behind the second system prompt; then a text whose
#   last block is partly filled, and the same text plus one token;
# * **a full pool** (`full_pool`, 12 blocks): a request leaves its system prompt in the cache, a second one
#   hits it, and a third, long one arrives while the second runs and needs more blocks than are free.
#
# System prompts and the document are 8 tokens each (2 blocks of 4), and a question is 3 tokens:
#
# | scenario | request | prompt | new tokens | arrives at iteration | what it must find in the cache |
# |---|---|---|---|---|---|
# | `shared_documents` | 0 | system prompt 1 + document + question | 6 | 0 | nothing |
# | | 1 | system prompt 2 + question | 6 | 0 | nothing |
# | | 2 | system prompt 2 + the same document + another question | 6 | 8 | system prompt 2 (8 tokens), not the document: request 0 computed it after another prefix |
# | | 3 | a text of 14 tokens (its last block holds 2) | 8 | 8 | nothing |
# | | 4 | the same text + 1 token | 6 | 10 | the text's 3 full blocks (12 tokens), not its partly filled last block |
# | `full_pool` | 0 | system prompt 1 + 2 tokens | 3 | 0 | nothing |
# | | 1 | system prompt 1 + 2 other tokens | 7 | 4 | system prompt 1 (8 tokens) |
# | | 2 | 36 tokens not seen before | 4 | 7 | nothing; it needs 10 blocks, and request 1 may take 4 of the 12 |

# %% [markdown] lang="zh"
# **负对照**：前缀缓存可能犯的三种错误，各自写成只改动 `PrefixPool` 一个方法（共享未填满的物理块时改动两个）的子类，都用同一个服务循环运行，也都用同样的方法与冷启动结果比较。上面的随机请求流自己不会产生触发这些错误的情形，所以它们运行在两个小场景上；正确的池也必须通过这两个场景：
#
# * **共用文档**（`shared_documents`，池中有 64 个物理块）：先是两个系统提示不同的请求，然后一个请求把先前见过的一份文档接在第二段系统提示后面；接着是一段最后一个物理块未填满的文本，以及同一段文本再加一个 token；
# * **池满**（`full_pool`，12 个物理块）：一个请求把它的系统提示留在缓存里，第二个请求命中这段提示；第三个请求很长，在第二个请求运行期间到达，需要的物理块比空闲的还多。
#
# 系统提示和文档都是 8 个 token（2 个物理块，每个 4 个位置），问题是 3 个 token：
#
# | 场景 | 请求 | 提示的组成 | 新 token 数 | 到达时的迭代 | 必须在缓存中找到的内容 |
# |---|---|---|---|---|---|
# | `shared_documents` | 0 | 系统提示 1 + 文档 + 问题 | 6 | 0 | 无 |
# | | 1 | 系统提示 2 + 问题 | 6 | 0 | 无 |
# | | 2 | 系统提示 2 + 同一份文档 + 另一个问题 | 6 | 8 | 系统提示 2（8 个 token），但不包括文档：请求 0 是在另一个前缀之后算出文档的 |
# | | 3 | 一段 14 个 token 的文本（最后一个物理块只有 2 个 token） | 8 | 8 | 无 |
# | | 4 | 同一段文本 + 1 个 token | 6 | 10 | 文本的 3 个填满的物理块（12 个 token），但不包括未填满的最后一个物理块 |
# | `full_pool` | 0 | 系统提示 1 + 2 个 token | 3 | 0 | 无 |
# | | 1 | 系统提示 1 + 另外 2 个 token | 7 | 4 | 系统提示 1（8 个 token） |
# | | 2 | 36 个此前未出现过的 token | 4 | 7 | 无；它需要 10 个物理块，而请求 1 可能占用 12 个中的 4 个 |

# %%
def scenario_specs(seed):
    rng = random.Random(seed)
    tokens = lambda n: [rng.randrange(cfg.vocab) for _ in range(n)]
    system_1, system_2, document, text, long_prompt = tokens(8), tokens(8), tokens(8), tokens(14), tokens(24)
    shared_documents = [(system_1 + document + tokens(3), 6, 0), (system_2 + tokens(3), 6, 0),
                        (system_2 + document + tokens(3), 6, 8), (text, 8, 8), (text + tokens(1), 6, 10)]
    # [en] Request 2: 36 tokens, more blocks than are free while request 1 runs.
    # [zh] 请求 2：36 个 token，在请求 1 运行期间需要的物理块比空闲的还多。
    full_pool = [(system_1 + tokens(2), 3, 0), (system_1 + tokens(2), 7, 4), (long_prompt + tokens(12), 4, 7)]
    return {"shared_documents": (shared_documents, 64), "full_pool": (full_pool, 12)}


SCENARIOS = scenario_specs(SEED + 2)

# %% [markdown] lang="en"
# **The three mistakes**, each a subclass of `PrefixPool` that changes one method, except the second, which changes two:
#
# * **block hashed without its prefix**: each block's hash covers its own tokens only. In request 2 the
#   document's blocks then "hit" the blocks that request 0 computed after system prompt 1: same tokens,
#   other prefix, other K/V;
# * **partly filled block shared**: the last, partly filled block of a prompt gets a hash too, and `lookup` caps
#   the hit at the prompt's usable tokens (the table below shows request 4 finding 14). In three steps:
#   1. request 3's text of 14 tokens leaves 2 free slots in its last block; by the time request 4 arrives,
#      request 3 has written its first 2 generated tokens into them;
#   2. request 4 holds that block, and `read_kv` reads every filled slot of its blocks: 16 positions;
#   3. so request 4 sees 2 tokens that are not in its prompt, and its last prompt token goes to position 16
#      instead of 14. The bug shows in what is read and where, not in the hit count. (Request 3 itself is safe:
#      the store copies a shared block that is not full before writing into it.)
# * **held block left in the LRU queue**: `hold` raises the count but forgets to take the block out of
#   the queue. When request 2 needs more blocks than are free, the pool evicts a system-prompt block that
#   request 1 still reads, and request 2 writes its own K/V into it.

# %% [markdown] lang="zh"
# **三种错误**。每种都写成 `PrefixPool` 的一个子类，只改动一个方法（第二种改动两个）：
#
# * **块哈希不含前缀**：每个物理块的哈希只覆盖它自己的 token。于是在请求 2 中，文档所在的物理块“命中”了请求 0 在系统提示 1 之后算出的那些物理块：token 相同，前缀不同，K/V 也就不同；
# * **共享未填满的物理块**：提示最后那个未填满的物理块也算出了块哈希，`lookup` 则把命中数限制在提示中可用的 token 数以内（下表中请求 4 找到 14 个）。分三步来看：
#   1. 请求 3 的文本有 14 个 token，最后一个物理块留下 2 个空槽位；等请求 4 到达时，请求 3 已经把它最先生成的 2 个 token 写了进去；
#   2. 请求 4 持有这个物理块，而 `read_kv` 会读取它所持有的物理块中每一个已写入的槽位：共 16 个位置；
#   3. 于是请求 4 看到了 2 个不属于它提示的 token，它提示的最后一个 token 落在位置 16，而不是 14。所以这个错误出现在读到的内容和位置上，而不是命中数里。（请求 3 本身不受影响：对未填满的共享物理块，存储对象会先复制一份再写入。）
# * **被持有的物理块留在 LRU 队列中**：`hold` 把引用计数加一，却忘了把物理块移出队列。当请求 2 需要的物理块比空闲的还多时，池淘汰了请求 1 仍在读取的一个系统提示物理块，请求 2 又把自己的 K/V 写了进去。

# %%
class HashWithoutPrefix(PrefixPool):
    def block_hashes(self, tokens):
        # [en] WRONG on purpose: each block hashed by its own tokens alone.
        # [zh] 故意写错：每个物理块只按它自己的 token 计算哈希。
        size = self.block_size
        return [hashlib.sha256(f"{tokens[s:s + size]}".encode()).hexdigest() for s in range(0, len(tokens) - size + 1, size)]


class SharesPartialBlock(PrefixPool):
    def block_hashes(self, tokens):
        hashes = chained_block_hashes(tokens, self.block_size)
        tail = tokens[len(hashes) * self.block_size:]
        # [en] WRONG on purpose: the partly filled last block gets a hash as well.
        # [zh] 故意写错：未填满的最后一个物理块也得到一个哈希。
        if tail:
            hashes.append(hashlib.sha256(f"{hashes[-1] if hashes else ''}|{tail}".encode()).hexdigest())
        return hashes

    def lookup(self, prompt):
        # [en] A hit on the partly filled block covers fewer tokens than a block: count only the prompt's usable ones.
        # [zh] 命中未填满的物理块时，覆盖的 token 不足一个物理块：只计入提示中可用的那些。
        hits, hit_tokens = super().lookup(prompt)
        return hits, min(hit_tokens, len(prompt) - 1)


class EvictsHeldBlocks(PrefixPool):
    def hold(self, block):
        # [en] WRONG on purpose: the held block stays in the LRU queue.
        # [zh] 故意写错：被持有的物理块仍留在 LRU 队列中。
        self.refs[block] += 1

# %% [markdown] lang="en"
# **The runs.** The correct pool serves both scenarios, each faulty pool the scenario that exposes it; the
# table gives, per run, the prompt tokens each request found in the cache and the requests whose logits are not
# those of a cold run. The checks: the correct pool matches the cold runs everywhere and finds the hits of the scenarios'
# table; every faulty pool is caught, with finite logits, in the request named above.

# %% [markdown] lang="zh"
# **运行**：正确的池运行两个场景，每个有错的池运行能暴露它的那个场景；下表按每次运行给出每个请求在缓存中找到的提示 token 数，以及 logits 与冷启动不一致的请求。检查的内容是：正确的池处处与冷启动一致，命中的 token 数与场景表相同；每个有错的池都被查出，logits 仍是有限值，出错的正是上面指出的那个请求。

# %%
CONTROL_CASES = {"correct": (PrefixPool, list(SCENARIOS)), "hash_without_prefix": (HashWithoutPrefix, ["shared_documents"]),
                 "partial_block_shared": (SharesPartialBlock, ["shared_documents"]), "held_block_evicted": (EvictsHeldBlocks, ["full_pool"])}
CONTROL_RUNS = {name: {scenario: run_stream(*SCENARIOS[scenario], pool_class=pool_class) for scenario in scenarios}
                for name, (pool_class, scenarios) in CONTROL_CASES.items()}
say_table([[f"`{CONTROL_CASES[name][0].__name__}`", f"`{scenario}`", str(r["hit_tokens"]), str(r["wrong_requests"] or "-"),
            f"{r['max_abs_logit_err']:.1e}", f"`{r['finite']}`", f"`{r['close']}`"]
           for name, runs in CONTROL_RUNS.items() for scenario, r in runs.items()],
          en=["pool", "scenario", "prompt tokens found in the cache, per request", "requests not as cold", "max abs logit error",
              "finite", "all as cold"],
          zh=["池", "场景", "每个请求在缓存中找到的提示 token 数", "与冷启动不一致的请求", "logits 的最大绝对误差",
              "数值有限", "全部与冷启动一致"])
# [en] Who suffers: request 2 (the hash without prefix), request 4 (reads the shared block's extra slots), request 1 (its block evicted).
# [zh] 谁受害：请求 2（不含前缀的块哈希）、请求 4（读到了共享物理块里多出的槽位）、请求 1（它的物理块被淘汰）。
PREFIX_CONTROLS = {name: {"scenario": scenario, "wrong_requests": r["wrong_requests"], "max_abs_logit_err": r["max_abs_logit_err"],
                          "finite": r["finite"], "caught": not r["close"]}
                   for name, runs in CONTROL_RUNS.items() if name != "correct" for scenario, r in runs.items()}
# [en] The correct pool: as cold everywhere, and the hits of the scenarios' table.
# [zh] 正确的池：处处与冷启动一致，命中的 token 数与场景表中的相同。
assert all(r["close"] and r["finite"] for r in CONTROL_RUNS["correct"].values())
assert [CONTROL_RUNS["correct"][scenario]["hit_tokens"] for scenario in SCENARIOS] == [[0, 0, 8, 0, 12], [0, 8, 0]]
assert all(c["caught"] and c["finite"] for c in PREFIX_CONTROLS.values())
assert [PREFIX_CONTROLS[name]["wrong_requests"] for name in PREFIX_CONTROLS] == [[2], [4], [1]]
assert CONTROL_RUNS["correct"]["full_pool"]["iterations"] > CONTROL_RUNS["held_block_evicted"]["full_pool"]["iterations"]

# %% [markdown] lang="en"
# Each control is caught by the comparison with the cold runs, and each gives finite, wrong logits (max abs
# errors {{run:prefix.controls.hash_without_prefix:.2f}}, {{run:prefix.controls.partial_block_shared:.2f}} and
# {{run:prefix.controls.held_block_evicted:.2f}}): no NaN warns of them, because every slot read holds real
# K/V, only the wrong ones. The request that suffers is the one that reads the wrong block: request 2 for
# the hash without its prefix, request 4, the newcomer, for the shared partial block, and request 1, whose
# held block was evicted and refilled by request 2. The correct pool passes both scenarios and finds exactly
# the hits of the table above; in the full pool it makes request 2 wait for blocks instead, and the scenario
# takes {{run:prefix.full_pool_iterations.correct}} iterations, against {{run:prefix.full_pool_iterations.held_block_evicted}}
# for the faulty pool, which admits request 2 at once: correctness can cost a wait.
#
# **What the cache saves.** The figure shows the stream of {{run:prefix.requests}} requests served through each pool.
# With the largest pool, {{run:prefix.hit_rate_largest:.1%}} of all prompt tokens are found in the cache, and
# {{run:prefix.hits_largest}} of the {{run:prefix.requests}} requests find at least their system prompt there (each of the
# four system prompts must be computed once). With {{run:prefix.smallest_pool}} blocks, barely more than the
# {{run:prefix.largest_request_blocks}} the largest request needs, the hit rate is {{run:prefix.hit_rate_smallest:.1%}}
# (blocks are evicted before their next use), and, as the admission rule lets fewer requests run at once, the
# others wait: the stream takes {{run:prefix.iterations_smallest}} iterations, against
# {{run:prefix.iterations_largest}} with the largest pool. Where the hit rate stays flat
# between two pool sizes while the evictions fall, the extra evictions of the smaller pool cost no hits: the
# blocks they took held what no later request looked up, such as a question asked only once.
#
# *Figure: left, the hit rate (the share of prompt tokens found in the cache) against the number of blocks
# in the pool; right, two counts against the same pool sizes: the evictions (orange) and the iterations the
# stream takes to finish (grey). The prefill tokens saved are the hit rate times the stream's prompt tokens (the table
# above gives them).*

# %% [markdown] lang="zh"
# 每个负对照都被与冷启动结果的比较查出，而且给出的都是有限但错误的 logits（最大绝对误差分别为 {{run:prefix.controls.hash_without_prefix:.2f}}、{{run:prefix.controls.partial_block_shared:.2f}} 和 {{run:prefix.controls.held_block_evicted:.2f}}）：没有 NaN 来示警，因为读到的每个槽位里都是真实的 K/V，只是不该读它们。受害的是读错物理块的那个请求：块哈希不含前缀时是请求 2；共享未填满的物理块时是后来的请求 4；被持有的物理块遭淘汰时是请求 1，它仍在读取的物理块被淘汰后，又被请求 2 写进了自己的 K/V。正确的池通过了两个场景，命中的 token 数也与上面的场景表完全一致；在池满的场景中，它让请求 2 等待物理块，于是这个场景共需 {{run:prefix.full_pool_iterations.correct}} 次迭代；有错的池立即接纳请求 2，共需 {{run:prefix.full_pool_iterations.held_block_evicted}} 次：正确性可能要以等待为代价。
#
# **缓存省下了什么**：下图是同一个包含 {{run:prefix.requests}} 个请求的请求流在各种大小的池上的结果。池最大时，全部提示 token 中有 {{run:prefix.hit_rate_largest:.1%}} 在缓存中找到，{{run:prefix.requests}} 个请求中有 {{run:prefix.hits_largest}} 个至少在缓存中找到了自己的系统提示（四段系统提示各自都必须先算一次）。池只有 {{run:prefix.smallest_pool}} 个物理块（仅比最大请求所需的 {{run:prefix.largest_request_blocks}} 个多一点）时，命中率为 {{run:prefix.hit_rate_smallest:.1%}}（物理块在下一次用到之前就被淘汰了）；而且池小时，准入规则允许同时运行的请求更少，其余请求只能等待，所以整个请求流需要 {{run:prefix.iterations_smallest}} 次迭代，池最大时为 {{run:prefix.iterations_largest}} 次。如果两种池大小的命中率相同，而淘汰次数下降，那么较小的池多出的淘汰并没有让命中变少：被淘汰的物理块里存的是之后没有请求会查找的内容，例如只被问过一次的问题。
#
# *图：左图是命中率随池中物理块数的变化：横轴 blocks in the pool 是池中的物理块数，纵轴 hit rate (% of prompt tokens) 是在缓存中找到的提示 token 所占的百分比。右图横轴相同，纵轴 count 表示次数，画了两种次数：图例中 evictions（橙色）是淘汰次数，iterations to finish（灰色）是处理完整个请求流所需的迭代次数。总标题 prefix cache: … requests, blocks of 4 tokens 的意思是：前缀缓存，请求流中的请求数，每个物理块 4 个 token。省下的预填充 token 数等于命中率乘以请求流的提示 token 总数（见上表）。*

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
blocks = [r["blocks"] for r in SWEEP]
left.plot(blocks, [100 * r["hit_rate"] for r in SWEEP], "o-", color="tab:blue")
left.set_xlabel("blocks in the pool")
left.set_ylabel("hit rate (% of prompt tokens)")
left.set_ylim(0, 100)
right.plot(blocks, [r["evictions"] for r in SWEEP], "s-", color="tab:orange", label="evictions")
right.plot(blocks, [r["iterations"] for r in SWEEP], "^-", color="tab:gray", label="iterations to finish")
right.set_xlabel("blocks in the pool")
right.set_ylabel("count")
right.legend()
fig.suptitle(f"prefix cache: {STREAM_REQUESTS} requests, blocks of {BLOCK_SIZE} tokens", fontsize=10)
fig.tight_layout()
HIT_RATE_PNG = OUT / "prefix_hit_rate.png"
fig.savefig(HIT_RATE_PNG, dpi=120)
plt.show()
