# %% [markdown] lang="en"
# ## 12. Takeaways and exercises
#
# * **A KV cache is one $(K, V)$ pair per layer**, one row longer for every token the model consumes. The
#   rows already there are carried over, never recomputed, and every layer keeps its own, because every
#   layer projects its own input.
# * **Three conventions must agree**: which layer owns which cache entry, the absolute positions of the new
#   tokens (they continue at $P$, the length of the cache), and the mask (query $P + i$ reads keys
#   $0 \dots P + i$). Get them right and the cached path is the full recomputation: here within
#   {{run:takeaways.fp32:.1e}} in FP32 and {{run:takeaways.fp64:.1e}} in FP64 over 12 configurations.
# * **Test it the way it can fail**: compare every logit within the dtype's tolerance (not argmax, not bit
#   for bit), with multi-token chunks (one-token steps hide a missing mask), and with a cache at all (without
#   one, the wrong mask is the right one). Break the model on purpose to see that the check notices.
# * **The cache removes recomputation, not reading.** A cached step at $T = 256$ costs
#   {{run:count.cached_256:,}} multiply-adds, $1/T$ of the naive full step, but still reads the whole
#   cache, {{run:count.kv_read_256:,}} bytes here, and that grows with $T$. Per token the cache holds
#   $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ bytes: {{run:published.llama31_32k}} for one sequence of
#   32,768 tokens of Llama 3.1 8B in FP16, four times less than without GQA.
# * **Measure, then explain.** On this run, full recomputation took {{run:timing.speedup_lo:.1f}} to
#   {{run:timing.speedup_hi:.1f}} times the CPU time of the cached continuation (fastest of
#   {{run:takeaways.repeats}} rounds), far below the work ratio: a cached call of this tiny model is mostly
#   fixed overhead, about the same number of operator calls whatever its size ({{run:profile.top_min}} to
#   {{run:profile.top_max}}, 9.5). With real models at small batch, decode is instead bound by memory
#   bandwidth (a general remark, not measured here).

# %% [markdown] lang="zh"
# ## 12. 要点与练习
#
# * **KV 缓存就是每层一对 $(K, V)$**，模型每处理一个 token，它就多一行。已有的行原样带到下一步，从不重新计算；每一层各有自己的缓存，因为每一层投影的都是它自己的输入。
# * **三个约定必须对得上**：哪个缓存项属于哪一层；新 token 的绝对位置（从缓存长度 $P$ 接着往下编号）；掩码（查询 $P + i$ 读取键 $0 \dots P + i$）。三者都对，缓存路径就等同于完整重算：在 12 种配置中，FP32 下最大绝对误差不超过 {{run:takeaways.fp32:.1e}}，FP64 下不超过 {{run:takeaways.fp64:.1e}}。
# * **要按它可能出错的方式来测试**：在该精度的容差内比较每一个 logit（而不是只比较 argmax，也不要求逐比特相同）；要用含多个 token 的分块（逐 token 运行会掩盖缺失的掩码）；而且一定要用到缓存（没有缓存时，错误的掩码恰好是对的）。再故意把模型改坏，确认检查能够查出来。
# * **缓存省掉的是重新计算，而不是读取。** $T = 256$ 时，缓存路径的一步只做 {{run:count.cached_256:,}} 次乘加，是朴素完整重算一步的 $1/T$；但它仍要读取整个缓存，这里是 {{run:count.kv_read_256:,}} 字节，而且随 $T$ 增长。每个 token 的缓存是 $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ 字节：Llama 3.1 8B 在 FP16 下，一条 32,768 个 token 的序列需要 {{run:published.llama31_32k}}，是不用 GQA 时的四分之一。
# * **先测量，再解释。** 在这次运行中，完整重算的 CPU 时间是缓存续写的 {{run:timing.speedup_lo:.1f}} 到 {{run:timing.speedup_hi:.1f}} 倍（取 {{run:takeaways.repeats}} 轮中最快的一轮），远小于工作量之比：这个小模型的一次缓存调用，时间主要花在固定开销上，不论输入多大，算子调用次数都差不多（{{run:profile.top_min}} 到 {{run:profile.top_max}} 次，见 9.5）。对真实的模型，batch 较小时，解码一步受限的是内存带宽（这是一般性的说明，这里没有测量）。

# %% tags=["prose-values"]
{"takeaways": {"fp32": WORST_LOGIT_ERR["fp32"], "fp64": WORST_LOGIT_ERR["fp64"], "repeats": REPEATS}}

# %% [markdown] lang="en"
# **Exercise 1: a chunk after a cache.** The cache holds 7 tokens and the next chunk has 4. What are the
# absolute positions of the new queries, and the last two dimensions of the score tensor? How many keys
# may each query read, and how many would the upper-left triangle let it read?
#
# <details><summary>Show the answer</summary>
#
# The queries sit at positions 7, 8, 9 and 10, and the scores end in `[4, 11]` (4 queries, 11 keys). The
# four queries may read 8, 9, 10 and 11 keys. A triangle built from local indices alone would give them
# 1, 2, 3 and 4 keys. The next cell asks `absolute_positions`, `causal_mask` and `local_triangle_mask` of
# sections 3 and 5.
#
# </details>

# %% [markdown] lang="zh"
# **练习 1：缓存之后的一个分块。** 缓存里有 7 个 token，下一个分块有 4 个 token。新查询的绝对位置是多少？分数张量的最后两维是多少？每个查询能读取几个键？如果用左上角三角形，又能读取几个？
#
# <details><summary>查看答案</summary>
#
# 四个查询位于位置 7、8、9、10，分数张量的最后两维是 `[4, 11]`（4 个查询，11 个键）。它们分别能读取 8、9、10、11 个键；只按局部下标构造的三角形只让它们读取 1、2、3、4 个键。下一个单元格用第 3 节和第 5 节的 `absolute_positions`、`causal_mask` 和 `local_triangle_mask` 来核对。
#
# </details>

# %%
exercise_mask = causal_mask(7, 4)                                       # [4, 11]
assert absolute_positions(7, 4).tolist() == [7, 8, 9, 10] and list(exercise_mask.shape) == [4, 11]
assert exercise_mask.sum(dim=-1).tolist() == [8, 9, 10, 11] and local_triangle_mask(7, 4).sum(dim=-1).tolist() == [1, 2, 3, 4]
say(en="Exercise 1 checked: positions 7, 8, 9, 10; scores `[4, 11]`; 8, 9, 10 and 11 keys (1, 2, 3 and 4 with the "
       "upper-left triangle).",
    zh="练习 1 已核对：位置 7、8、9、10；分数张量末两维 `[4, 11]`；可读取的键分别为 8、9、10、11 个"
       "（用左上角三角形则为 1、2、3、4 个）。")

# %% [markdown] lang="en"
# **Exercise 2: prefill, then one token at a time.** Feed the stream of section 6 the way generation
# does: a prefill of 8 tokens, then the 16 others one per call. Which of the three hook variants of
# section 7 (`VARIANTS`) does this schedule catch?
#
# <details><summary>Show the answer</summary>
#
# It catches `restart_positions` and `local_triangle_mask`, and misses `no_mask_with_cache`. The prefill has
# no cache, so that variant still applies the causal mask there; every later call holds a single token, whose
# query may read every key anyway. That is why section 7 also feeds multi-token chunks. The next cell runs
# `check_equivalence` with the chunk lengths `[8, 1, 1, ...]` on the correct model and on the three variants.
#
# </details>

# %% [markdown] lang="zh"
# **练习 2：先预填充，再逐个 token。** 像生成时那样送入第 6 节的序列：先预填充 8 个 token，再每次调用送入剩下 16 个中的一个。第 7 节用钩子改坏的三个版本（`VARIANTS`）中，这种送法能查出哪几个？
#
# <details><summary>查看答案</summary>
#
# 能查出 `restart_positions` 和 `local_triangle_mask`，查不出 `no_mask_with_cache`。预填充时还没有缓存，所以这个版本在预填充时仍然使用因果掩码；之后每次调用只有一个 token，它的查询本来就可以读取全部键。这正是第 7 节还要送入含多个 token 的分块的原因。下一个单元格在正确的模型和三个改坏的版本上，用分块长度 `[8, 1, 1, ...]` 运行 `check_equivalence`。
#
# </details>

# %%
prefill_then_steps = [8] + [1] * (STREAM_LEN - 8)
schedule_outcomes = {"correct": check_equivalence(model, STREAM, 1, prefill_then_steps)["passed"]}
for variant, variant_hooks in VARIANTS.items():
    with model.hooks(**variant_hooks):
        schedule_outcomes[variant] = check_equivalence(model, STREAM, 1, prefill_then_steps)["passed"]
assert schedule_outcomes == {"correct": True, "restart_positions": False, "local_triangle_mask": False,
                             "no_mask_with_cache": True}
say(en="Exercise 2 checked. Passes: " + ", ".join(f"`{name}` {ok}" for name, ok in schedule_outcomes.items()) + ".",
    zh="练习 2 已核对。是否通过：" + "，".join(f"`{name}` {'是' if ok else '否'}" for name, ok in schedule_outcomes.items()) + "。")

# %% [markdown] lang="en"
# **Exercise 3: the memory of a batch.** A server runs Llama 3.1 8B (32 layers, 8 K/V heads of 128
# dimensions) in FP16 for 8 sequences of 8,192 tokens each. How much memory do their keys and values
# take? And our decoder, in FP16, for a batch of 3 sequences of 100 tokens?
#
# <details><summary>Show the answer</summary>
#
# One token of Llama 3.1 8B takes $2 \cdot 32 \cdot 8 \cdot 128 \cdot 2 = 131{,}072$ bytes (128 KiB), so
# $8 \cdot 8{,}192$ tokens take $2^{33}$ bytes, 8 GiB, on top of the weights. Our decoder:
# $2 \cdot 2 \cdot 4 \cdot 16 \cdot 2 = 512$ bytes per token, times $3 \cdot 100$ tokens, 153,600 bytes. The next cell computes both with `kv_bytes_per_token` and checks the
# second against a real FP16 cache.
#
# </details>

# %% [markdown] lang="zh"
# **练习 3：一个 batch 的内存。** 一台服务器在 FP16 下运行 Llama 3.1 8B（32 层，8 个 K/V 头，每头 128 维），同时服务 8 条序列，每条 8,192 个 token。它们的键和值要占多少内存？我们的解码器在 FP16 下处理 3 条、每条 100 个 token 的 batch 时又要多少？
#
# <details><summary>查看答案</summary>
#
# Llama 3.1 8B 每个 token 占 $2 \cdot 32 \cdot 8 \cdot 128 \cdot 2 = 131{,}072$ 字节（128 KiB），所以 $8 \cdot 8{,}192$ 个 token 占 $2^{33}$ 字节，即 8 GiB，这还不算权重。我们的解码器每个 token 占 $2 \cdot 2 \cdot 4 \cdot 16 \cdot 2 = 512$ 字节，乘以 $3 \cdot 100$ 个 token，共 153,600 字节。下一个单元格用 `kv_bytes_per_token` 计算这两个数，并用一份真实的 FP16 缓存核对第二个数。
#
# </details>

# %%
llama_batch = 8 * 8192 * kv_bytes_per_token(32, 8, 128, FP16_BYTES)
with torch.inference_mode():
    _, batch_cache = with_dtype(model, torch.float16)(torch.randint(0, cfg.vocab, (3, 100)))
ours_batch = 3 * 100 * kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, FP16_BYTES)
assert llama_batch == 8 * 2**30 and ours_batch == cache_bytes(batch_cache) == 153_600
say(en=f"Exercise 3 checked: {binary_size(llama_batch)} for the Llama batch; {ours_batch:,} bytes for ours, as the real cache holds.",
    zh=f"练习 3 已核对：Llama 的这个 batch 需要 {binary_size(llama_batch)}；我们的解码器需要 {ours_batch:,} 字节，与真实缓存一致。")
