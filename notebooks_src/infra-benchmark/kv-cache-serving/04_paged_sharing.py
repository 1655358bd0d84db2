# %% [markdown] lang="en"
# **Second criterion: a shared prompt.** Two requests start with the same 14-token prompt (a shared
# system prompt, say) and then continue with different tokens of their own (5 and 9 of them), before 8
# greedy steps each. The prompt is prefilled once; the second sequence forks from the first, sharing
# its blocks. With blocks of 4 positions the 14 prompt positions fill three blocks and half of a
# fourth. The three full blocks stay shared to the end. The half-filled one is copied when the first
# sequence writes into it; after that copy the second sequence is its only holder, and writes into it
# in place. Both must equal, bit for bit, the same calls over the contiguous cache, and
# within the tolerance a full recomputation of their own tokens.
#
# **Forking versus prefix caching.** `fork` with copy-on-write is how a paged cache serves the
# candidates of *one* request (parallel sampling, beam search): the request knows that its candidates
# share the prompt. Sharing a prompt *across requests*, which arrive independently, is **prefix
# caching**, and it needs two more pieces that this notebook does not build. A **content index** finds
# the blocks that already hold a new prompt's prefix: vLLM hashes each *full* block together with the
# hash of the block before it, so only full blocks are ever cached and shared, and a partly filled last
# block is recomputed; SGLang keeps a radix tree over token sequences instead. And **eviction** reuses
# blocks that no request holds any more (reference count 0) but that were kept for future hits, the least
# recently used first, when the pool runs out.

# %% [markdown] lang="zh"
# **第二条判据：共用的提示**。两个请求以同一段 14 个 token 的提示开头（比如共用的系统提示），之后各自接上不同的 token（分别 5 个和 9 个），再各做 8 步贪心生成。共用的提示只预填充一次；第二条序列从第一条分叉出来，共享它的物理块。物理块大小为 4 时，14 个提示位置占满三个物理块，再加半个。三个满的物理块一直共享到最后。半满的那个物理块在第一条序列写入时被复制；复制之后，第二条序列成了它唯一的持有者，直接原地写入。两条序列的结果都必须与同样的调用在连续缓存上的结果逐比特相同，并在容差范围内等于对各自 token 的完整重算。
#
# **分叉共享与前缀缓存的区别**：分页缓存正是用带写时复制的 `fork` 来服务**同一个**请求的多个候选序列（并行采样、束搜索）：请求自己知道它的候选序列共用同一段提示。而在**不同请求之间**共享提示属于**前缀缓存**，因为这些请求是各自独立到达的。前缀缓存还需要两样东西，本笔记本没有实现。一是**内容索引**，用来找出已经存有新提示前缀的物理块：vLLM 对每个**填满的**物理块连同前一个物理块的哈希一起计算哈希，所以只有填满的物理块才会被缓存和共享，未填满的最后一个物理块要重新计算；SGLang 则在 token 序列上维护一棵基数树（radix tree）。二是**淘汰**：有些物理块已经没有请求持有（引用计数为 0），却为了将来可能的命中而保留着；池不够用时，要按最近最少使用（LRU）的顺序把它们拿来重新分配。

# %%
SHARED_PROMPT_LEN, TAILS, SHARED_STEPS = 14, (5, 9), 8
gen = torch.Generator().manual_seed(SEED + 4)
SHARED_PROMPT = torch.randint(0, cfg.vocab, (SHARED_PROMPT_LEN,), generator=gen)
SHARED_TAILS = [torch.randint(0, cfg.vocab, (n,), generator=gen) for n in TAILS]


def all_real(n):
    return torch.ones(1, n, dtype=torch.bool)                          # [1, n]


def prefill_and_fork(cache):
    # [en] Prefill the shared prompt once as sequence "a"; "b" forks from it.
    # [zh] 把共用的提示作为序列 "a" 预填充一次；"b" 从它分叉出来。
    cache.add("a")
    prompt_logits = store_forward(model, SHARED_PROMPT[None], all_real(SHARED_PROMPT_LEN), SeqBatchStore(cache, ["a"]))
    cache.fork("a", "b")
    return prompt_logits[0]


def continue_both(cache, prompt_logits):
    # [en] Feed each sequence its own tail, then decode both together.
    # [zh] 分别送入各自的后续 token，再一起解码。
    runs = {}
    for seq, tail in zip("ab", SHARED_TAILS):
        logits = store_forward(model, tail[None], all_real(len(tail)), SeqBatchStore(cache, [seq]))
        runs[seq] = {"logits": [prompt_logits, logits[0]], "tokens": [int(logits[0, -1].argmax())]}
    for _ in range(SHARED_STEPS - 1):
        ids = torch.tensor([[runs[s]["tokens"][-1]] for s in "ab"])
        logits = store_forward(model, ids, torch.ones(2, 1, dtype=torch.bool), SeqBatchStore(cache, ["a", "b"]))
        for row, s in enumerate("ab"):
            runs[s]["logits"].append(logits[row])
            runs[s]["tokens"].append(int(logits[row, -1].argmax()))
    return {s: {"logits": torch.cat(run["logits"]), "tokens": run["tokens"]} for s, run in runs.items()}

# %% [markdown] lang="en"
# `check_shared` runs the two requests over a given paged cache and over the contiguous cache, recomputes
# each in full, and reads the sharing from the block tables: the table of `a` right after the fork, and
# both tables at the end. In one line: both sequences equal the contiguous run bit for bit and their full
# recomputation within the tolerance, the three full prompt blocks stay shared to the end, and the
# half-filled one is copied once. The code is folded; its table follows.

# %% [markdown] lang="zh"
# `check_shared` 让两个请求分别在给定的分页缓存和连续缓存上运行，再对每个请求做完整重算，并从块表中读出共享的情况：分叉之后 `a` 的块表，以及结束时两张块表。一句话概括：两条序列都与连续缓存上的运行逐比特相同，并在容差内等于各自的完整重算；三个填满的提示物理块一直共享到最后，半满的那个只复制一次。代码默认折叠，下面紧接着是它打印的表格。

# %% tags=["hide-input"]
def check_shared(paged) -> dict:
    prompt_logits = prefill_and_fork(paged)
    at_fork = list(paged.tables["a"])
    runs = continue_both(paged, prompt_logits)
    contiguous = ContiguousCache(cfg)
    contiguous_runs = continue_both(contiguous, prefill_and_fork(contiguous))
    tables = {s: list(paged.tables[s]) for s in "ab"}
    full_blocks = SHARED_PROMPT_LEN // BLOCK_SIZE
    with torch.inference_mode():
        full = [model(torch.cat((SHARED_PROMPT, tail, torch.tensor(runs[s]["tokens"][:-1])))[None])[0][0]
                for s, tail in zip("ab", SHARED_TAILS)]
    versus_full = compare([runs[s]["logits"] for s in "ab"], full)
    return {
        "bit_exact_vs_contiguous": compare([runs[s]["logits"] for s in "ab"], [contiguous_runs[s]["logits"] for s in "ab"])["bit_exact"],
        "max_abs_logit_err_vs_full": versus_full["max_abs_logit_err"],
        "close_to_full": versus_full["close"],
        "finite": versus_full["finite"],
        "tokens_as_full": all(runs[s]["tokens"] == f[SHARED_PROMPT_LEN + len(t) - 1:].argmax(-1).tolist()
                              for s, t, f in zip("ab", SHARED_TAILS, full)),
        "shared_blocks": [b for b in tables["a"] if b in tables["b"]],
        "full_prompt_blocks": at_fork[:full_blocks],
        "partial_block_copied": at_fork[full_blocks] in tables["b"] and at_fork[full_blocks] not in tables["a"],
        "blocks_in_use": paged.pool.used(),
        "blocks_without_sharing": sum(math.ceil(len(runs[s]["logits"]) / BLOCK_SIZE) for s in "ab"),
        "tables": tables,
    }

# %%
SHARED = check_shared(PagedCache(BlockPool(cfg, 16, BLOCK_SIZE)))
say_table([[f"`{seq}`", str(table)] for seq, table in SHARED["tables"].items()], en=["sequence", "block table"], zh=["序列", "块表"])
say(en=f"Bit-exact vs the contiguous cache: `{SHARED['bit_exact_vs_contiguous']}`; max abs logit error vs full recomputation "
       f"{SHARED['max_abs_logit_err_vs_full']:.1e}; tokens as full recomputation: `{SHARED['tokens_as_full']}`.",
    zh=f"与连续缓存逐比特相同：`{SHARED['bit_exact_vs_contiguous']}`；与完整重算相比，logits 的最大绝对误差为 "
       f"{SHARED['max_abs_logit_err_vs_full']:.1e}；token 与完整重算相同：`{SHARED['tokens_as_full']}`。")
assert SHARED["bit_exact_vs_contiguous"] and SHARED["close_to_full"] and SHARED["tokens_as_full"]
say(en=f"Shared blocks {SHARED['shared_blocks']} (the full prompt blocks {SHARED['full_prompt_blocks']}); the half-filled prompt block "
       f"copied on the first sequence's write: `{SHARED['partial_block_copied']}`; {SHARED['blocks_in_use']} blocks in use instead of "
       f"{SHARED['blocks_without_sharing']}.",
    zh=f"共享的物理块为 {SHARED['shared_blocks']}（提示中填满的物理块为 {SHARED['full_prompt_blocks']}）；提示中半满的那个物理块在第一条序列写入时被复制："
       f"`{SHARED['partial_block_copied']}`；使用中的物理块为 {SHARED['blocks_in_use']} 个，不共享则需要 {SHARED['blocks_without_sharing']} 个。")
saved_blocks = SHARED["blocks_without_sharing"] - SHARED["blocks_in_use"]
assert SHARED["shared_blocks"] == SHARED["full_prompt_blocks"] and SHARED["partial_block_copied"] and saved_blocks == len(SHARED["shared_blocks"])
