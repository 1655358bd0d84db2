# %% [markdown] lang="en"
# **Negative controls.** Three mistakes a prefix cache can make, each a subclass of `PrefixCache` that
# changes one method, each served through the same loop and judged by the same comparison with the cold
# runs. They need situations that the random stream above does not produce on its own, so they run on two
# small scenarios, which the correct pool must pass as well:
#
# * **shared documents** (`shared_documents`, a pool of 64 blocks): request 0 is system prompt 1, a document of 8 tokens and a
#   question; request 1 is system prompt 2 and a question; request 2 arrives later with system prompt 2,
#   *the same document* and another question. Then request 3 sends a 14-token text (its last block holds
#   only 2 tokens) and generates 8 tokens, and request 4 sends the same text plus one token, while request 3
#   is still running;
# * **a full pool** (`full_pool`, 12 blocks): request 0 leaves its system prompt in the cache; request 1 hits it and
#   generates 8 tokens; request 2, a long prompt, arrives while request 1 runs and needs every other block.
#
# The mistakes:
#
# * **block hashed without its prefix**: each block's hash covers its own tokens only. In request 2 the
#   document's blocks then "hit" the blocks that request 0 computed after system prompt 1: same tokens,
#   other prefix, other K/V;
# * **partly filled block shared**: the last, partly filled block of a prompt gets a hash too. Request 4
#   then shares request 3's last block and writes its own next token into the slot where request 3 keeps
#   its first generated token, which request 3 reads on its next step;
# * **held block left in the LRU queue**: `acquire` raises the count but forgets to take the block out of
#   the queue. When request 2 needs blocks, the pool evicts the system-prompt blocks that request 1 still
#   reads.

# %% [markdown] lang="zh"
# **负对照**：前缀缓存可能犯的三种错误，各自写成只改动 `PrefixCache` 一个方法的子类，都用同一个服务循环运行，也都用同样的方法与冷启动结果比较。上面的随机请求流自己不会产生触发这些错误的情形，所以它们运行在两个小场景上；正确的池也必须通过这两个场景：
#
# * **共用文档**（`shared_documents`，池中有 64 个物理块）：请求 0 由系统提示 1、一份 8 个 token 的文档和一个问题组成；请求 1 由系统提示 2 和一个问题组成；请求 2 稍后到达，由系统提示 2、**同一份文档**和另一个问题组成。随后，请求 3 发来一段 14 个 token 的文本（它的最后一个物理块只有 2 个 token），并生成 8 个 token；请求 4 在请求 3 还在运行时发来同一段文本再加一个 token；
# * **池满**（`full_pool`，12 个物理块）：请求 0 把它的系统提示留在缓存里；请求 1 命中这段提示，并生成 8 个 token；请求 2 的提示很长，在请求 1 运行期间到达，需要其余所有物理块。
#
# 三种错误如下：
#
# * **块哈希不含前缀**：每个物理块的哈希只覆盖它自己的 token。于是在请求 2 中，文档所在的物理块“命中”了请求 0 在系统提示 1 之后算出的那些物理块：token 相同，前缀不同，K/V 也就不同；
# * **共享未填满的物理块**：提示最后那个未填满的物理块也算出了块哈希。于是请求 4 共享了请求 3 的最后一个物理块，并把自己的下一个 token 写进了请求 3 存放第一个生成 token 的那个槽位，而请求 3 在下一步就会读取它；
# * **被持有的物理块留在 LRU 队列中**：`acquire` 把引用计数加一，却忘了把物理块移出队列。当请求 2 需要物理块时，池淘汰了请求 1 仍在读取的系统提示物理块。

# %%
class HashWithoutPrefix(PrefixCache):
    def block_hashes(self, tokens):
        # [en] WRONG on purpose: each block hashed by its own tokens alone.
        # [zh] 故意写错：每个物理块只按它自己的 token 计算哈希。
        size = self.block_size
        return [hashlib.sha256(f"{tokens[s:s + size]}".encode()).hexdigest() for s in range(0, len(tokens) - size + 1, size)]


class SharesPartialBlock(PrefixCache):
    def block_hashes(self, tokens):
        hashes = chained_block_hashes(tokens, self.block_size)
        tail = tokens[len(hashes) * self.block_size:]
        # [en] WRONG on purpose: the partly filled last block gets a hash as well.
        # [zh] 故意写错：未填满的最后一个物理块也得到一个哈希。
        if tail:
            hashes.append(hashlib.sha256(f"{hashes[-1] if hashes else ''}|{tail}".encode()).hexdigest())
        return hashes


class EvictsHeldBlocks(PrefixCache):
    def acquire(self, block):
        # [en] WRONG on purpose: the held block stays in the LRU queue.
        # [zh] 故意写错：被持有的物理块仍留在 LRU 队列中。
        self.refs[block] += 1


def scenario_specs(seed):
    rng = random.Random(seed)
    tokens = lambda n: [rng.randrange(cfg.vocab) for _ in range(n)]
    system_1, system_2, document, text, long_prompt = tokens(8), tokens(8), tokens(8), tokens(14), tokens(24)
    shared_documents = [(system_1 + document + tokens(3), 6, 0), (system_2 + tokens(3), 6, 0),
                        (system_2 + document + tokens(3), 6, 8), (text, 8, 8), (text + tokens(1), 6, 10)]
    full_pool = [(system_1 + tokens(2), 3, 0), (system_1 + tokens(2), 8, 4), (long_prompt, 6, 6)]
    return {"shared_documents": (shared_documents, 64), "full_pool": (full_pool, 12)}


SCENARIOS = scenario_specs(SEED + 2)
CONTROL_CASES = {"correct": (PrefixCache, list(SCENARIOS)), "hash_without_prefix": (HashWithoutPrefix, ["shared_documents"]),
                 "partial_block_shared": (SharesPartialBlock, ["shared_documents"]), "held_block_evicted": (EvictsHeldBlocks, ["full_pool"])}
CONTROL_RUNS = {name: {scenario: run_stream(*SCENARIOS[scenario], pool_class=pool_class) for scenario in scenarios}
                for name, (pool_class, scenarios) in CONTROL_CASES.items()}
say_table([[f"`{CONTROL_CASES[name][0].__name__}`", f"`{scenario}`", f"{r['requests_with_hit']}/{len(SCENARIOS[scenario][0])}", str(r["wrong_requests"] or "-"),
            f"{r['max_abs_logit_err']:.1e}", f"`{r['finite']}`", f"`{r['close']}`"]
           for name, runs in CONTROL_RUNS.items() for scenario, r in runs.items()],
          en=["pool", "scenario", "requests with a hit", "requests not as cold", "max logit err", "finite", "all as cold"],
          zh=["池", "场景", "有命中的请求", "与冷启动不一致的请求", "最大 logits 误差", "数值有限", "全部与冷启动一致"])
# [en] Who suffers: request 2 (the hash without prefix), request 3 (owner of the shared block), request 1 (its blocks evicted).
# [zh] 谁受害：请求 2（不含前缀的块哈希）、请求 3（被共享物理块的主人）、请求 1（它的物理块被淘汰）。
PREFIX_CONTROLS = {name: {"scenario": scenario, "wrong_requests": r["wrong_requests"], "max_abs_logit_err": r["max_abs_logit_err"],
                          "finite": r["finite"], "caught": not r["close"]}
                   for name, runs in CONTROL_RUNS.items() if name != "correct" for scenario, r in runs.items()}
assert all(r["close"] and r["finite"] for r in CONTROL_RUNS["correct"].values())
assert all(c["caught"] for c in PREFIX_CONTROLS.values()) and not PREFIX_CONTROLS["held_block_evicted"]["finite"]
assert [PREFIX_CONTROLS[name]["wrong_requests"] for name in PREFIX_CONTROLS] == [[2], [3], [1]]
assert CONTROL_RUNS["correct"]["full_pool"]["iterations"] > CONTROL_RUNS["held_block_evicted"]["full_pool"]["iterations"]

# %% [markdown] lang="en"
# Each control is caught by the comparison with the cold runs: the hash without its prefix and the shared
# partial block give finite, wrong logits (largest errors {{run:prefix.controls.hash_without_prefix:.2f}} and
# {{run:prefix.controls.partial_block_shared:.2f}}), and it is the victim that suffers: request 2 for the first,
# request 3, the owner of the shared block, for the second. The evicted held block gives NaN, the mark of the
# test instrument. The correct pool passes both scenarios; in the full pool it makes request 2 wait for blocks
# instead, and the scenario takes {{run:prefix.full_pool_iterations.correct}} iterations instead of
# {{run:prefix.full_pool_iterations.held_block_evicted}}.
#
# **What the cache saves.** The figure shows the stream of {{run:prefix.requests}} requests served through each pool.
# With the largest pool, {{run:prefix.hit_rate_largest:.1%}} of all prompt tokens are found in the cache, and
# {{run:prefix.hits_largest}} of the {{run:prefix.requests}} requests find at least their system prompt there (each of the
# four system prompts must be computed once). With {{run:prefix.smallest_pool}} blocks, barely more than the
# {{run:prefix.largest_request_blocks}} the largest request needs, the hit rate falls to {{run:prefix.hit_rate_smallest:.1%}}:
# blocks are evicted before their next use, and requests also wait longer for blocks
# ({{run:prefix.iterations_smallest}} iterations instead of {{run:prefix.iterations_largest}}).
#
# *Figure: left, the hit rate (share of prompt tokens found in the cache, blue, left axis) and the prefill
# tokens saved (the same curve in tokens, right axis) against the number of blocks in the pool; right, the
# evictions (orange) and the iterations the stream takes to finish (grey) against the same pool sizes.*

# %% [markdown] lang="zh"
# 每个负对照都被与冷启动结果的比较查出：不含前缀的块哈希和共享未填满的物理块给出的是有限但错误的 logits（最大误差分别为 {{run:prefix.controls.hash_without_prefix:.2f}} 和 {{run:prefix.controls.partial_block_shared:.2f}}），而且受害的是别的请求：前者是请求 2，后者是被共享物理块的主人请求 3。被淘汰的、仍被持有的物理块则给出 NaN，这正是检测手段留下的痕迹。正确的池通过了两个场景；在池满的场景中，它让请求 2 等待物理块，于是这个场景共需 {{run:prefix.full_pool_iterations.correct}} 轮，而不是 {{run:prefix.full_pool_iterations.held_block_evicted}} 轮。
#
# **缓存省下了什么**：下图是同一个包含 {{run:prefix.requests}} 个请求的请求流在各种大小的池上的结果。池最大时，全部提示 token 中有 {{run:prefix.hit_rate_largest:.1%}} 在缓存中找到，{{run:prefix.requests}} 个请求中有 {{run:prefix.hits_largest}} 个至少在缓存中找到了自己的系统提示（四段系统提示各自都必须先算一次）。池只有 {{run:prefix.smallest_pool}} 个物理块（仅比最大请求所需的 {{run:prefix.largest_request_blocks}} 个多一点）时，命中率降到 {{run:prefix.hit_rate_smallest:.1%}}：物理块在下一次用到之前就被淘汰了，请求等待物理块的时间也更长（需要 {{run:prefix.iterations_smallest}} 轮，而不是 {{run:prefix.iterations_largest}} 轮）。
#
# *图：左图是命中率（在缓存中找到的提示 token 所占比例，蓝色，左侧纵轴）和省下的预填充 token 数（同一条曲线换算成 token 数，右侧纵轴）随池中物理块数的变化；右图是同样几种池大小下的淘汰次数（橙色）和处理完整个请求流所需的轮数（灰色）。*

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
blocks = [r["blocks"] for r in SWEEP]
left.plot(blocks, [100 * r["hit_rate"] for r in SWEEP], "o-", color="tab:blue")
left.set_xlabel("blocks in the pool")
left.set_ylabel("hit rate (% of prompt tokens)")
left.set_ylim(0, 100)
tokens_axis = left.twinx()
tokens_axis.set_ylim(0, SWEEP[0]["prompt_tokens"])
tokens_axis.set_ylabel("prefill tokens saved")
right.plot(blocks, [r["evictions"] for r in SWEEP], "s-", color="tab:orange", label="evictions")
right.plot(blocks, [r["iterations"] for r in SWEEP], "^-", color="tab:gray", label="iterations to finish")
right.set_xlabel("blocks in the pool")
right.legend()
fig.suptitle(f"prefix cache: {STREAM_REQUESTS} requests, blocks of {BLOCK_SIZE} tokens", fontsize=10)
fig.tight_layout()
HIT_RATE_PNG = OUT / "prefix_hit_rate.png"
fig.savefig(HIT_RATE_PNG, dpi=120)
plt.show()
