# %% [markdown] lang="en"
# ## 12. Takeaways and exercises
#
# * **A cache can be shared because K/V at a position depend only on the prefix.** Prefix caching finds
#   shared prefixes by a chain of block hashes (each block's hash covers its whole prefix), shares full blocks
#   only, counts references, and evicts unreferenced blocks in LRU order. On our stream, {{run:prefix.hit_rate_largest:.0%}}
#   of prompt tokens came from the cache with a large pool, {{run:prefix.hit_rate_smallest:.0%}} with the smallest;
#   the logits equal a cold run within the FP32 tolerance.
# * **Speculative decoding changes how many times the target is called, not what it says.** With a draft that
#   agreed {{run:spec.agreement:.0%}} of the time, $k = 1$ gave {{run:spec.tokens_k1:.2f}} tokens per target call and
#   $k = {{run:spec.kmax}}$ gave {{run:spec.tokens_kmax:.2f}}, all of them the target's own (the logits differ only by rounding,
#   far below every decision's margin), and forgetting to crop the target's cache after a rejection silently changes the text.
# * **Attention over a long cache can be split and merged exactly**, as long as each split reports its maximum
#   and its sum and the merge rescales by $e^{m_s - M}$; a fully masked split must weigh 0, not NaN.
# * **By the count, a decode step does far too little arithmetic per byte to keep a processor busy.** Counted
#   from the published configurations with 16-bit numbers, at batch 1 every model here does
#   {{run:cost.min_intensity_b1:.1f}} to {{run:cost.max_intensity_b1:.1f}} FLOP per byte read (the cache part of a
#   multi-head model such as Llama 2 7B, {{run:cost.llama2_cache:.1f}}), while an H100 needs
#   {{run:roofline.gpu_ridge:.0f}} in BF16 to be busy. Batching shares the weights' bytes, not the cache's, except where sequences share a cached prefix that the kernel reads once for all of them; GQA,
#   MLA and quantization shrink the cache's bytes; speculative decoding reads both once for $k + 1$ tokens.
# * **Measured, the roof is a limit, not a prediction.** On one core of this CPU, in FP32, the ridge lies at
#   {{run:roofline.ridge:.2f}} FLOP/byte, and the batch-1 weight product and the cache reads both have an intensity of
#   0.5, left of it. The batch-1 weight product streamed its weights at {{run:roofline.b1_bandwidth_share:.0%}} of the
#   STREAM bandwidth; batching amortized the weights, not the cache.
# * **Every mechanism here is a place for a silent bug**: a hash without its prefix, a shared partial block,
#   an evicted block still in use, a missing crop, a merge without rescaling. Each gives plausible numbers, and
#   only a comparison with the plain computation catches it.
#
# The build records what this run checked and measured (each section's results and every negative control, with
# `caught: true`) in `results.json` under `outputs/infra-benchmark/kv-cache-reuse/`, described in
# `docs/kv-cache-reuse-results-schema.md`. Running the notebook yourself, you find its figures in `OUTPUT_DIR`.

# %% [markdown] lang="zh"
# ## 12. 要点与练习
#
# * **缓存之所以能共享，是因为某个位置上的 K/V 只取决于它的前缀**。前缀缓存用一条块哈希链查找共享的前缀（每个物理块的哈希覆盖它的整个前缀），只共享填满的物理块，记录引用计数，并按 LRU 顺序淘汰没有被引用的物理块。在我们的请求流上，池很大时有 {{run:prefix.hit_rate_largest:.0%}} 的提示 token 来自缓存，池最小时为 {{run:prefix.hit_rate_smallest:.0%}}；logits 在 FP32 容差内与冷启动一致。
# * **投机解码改变的是目标模型被调用的次数，而不是它说出的内容**。草稿模型与目标模型的一致率为 {{run:spec.agreement:.0%}}：$k = 1$ 时每次目标模型调用得到 {{run:spec.tokens_k1:.2f}} 个 token，$k = {{run:spec.kmax}}$ 时得到 {{run:spec.tokens_kmax:.2f}} 个，这些 token 都是目标模型自己的（logits 只差舍入误差，远小于每个决策的余量）；拒绝草稿之后忘了截短目标模型的缓存，会悄无声息地改变生成的文本。
# * **对长缓存的注意力可以分段计算、再精确合并**，只要每一段都报告自己的最大值和指数和，合并时按 $e^{m_s - M}$ 重新缩放；完全被遮住的一段权重必须为 0，而不是 NaN。
# * **按计数，解码步每读一个字节所做的运算太少，让处理器忙不起来**。按公开模型的配置、16 位数值计算，batch 为 1 时，这里的每个模型每读一个字节只做 {{run:cost.min_intensity_b1:.1f}} 到 {{run:cost.max_intensity_b1:.1f}} 次浮点运算（Llama 2 7B 这样的多头注意力模型，缓存部分为 {{run:cost.llama2_cache:.1f}} 次），而 H100 在 BF16 下要 {{run:roofline.gpu_ridge:.0f}} 次才能忙起来。batch 能分摊权重的字节，却分摊不了缓存的字节，除非几条序列共享一段已缓存的前缀、而内核为它们只读一遍这段前缀；GQA、MLA 和量化缩小缓存的字节；投机解码为 $k + 1$ 个 token 只读一遍权重和缓存。
# * **实测表明，屋顶线是界限，而不是预测**。在这台 CPU 的一个核心上，FP32 下拐点位于 {{run:roofline.ridge:.2f}} FLOP/字节，batch 为 1 的权重乘法和缓存读取的算术强度都是 0.5，在拐点左侧。batch 为 1 的权重乘法读取权重的速度达到 STREAM 带宽的 {{run:roofline.b1_bandwidth_share:.0%}}；batch 分摊了权重的开销，却分摊不了缓存的开销。
# * **这里的每种机制都可能藏着悄无声息的错误**：不含前缀的块哈希、共享未填满的物理块、仍在使用就被淘汰的物理块、忘了截短缓存、合并时不做重新缩放。它们给出的数字都似是而非，只有与最直接的计算方式比较才能把它们查出来。
#
# 构建时，本次运行检查和测量的内容（各节的结果，以及带有 `caught: true` 的每个负对照）记录在 `outputs/infra-benchmark/kv-cache-reuse/` 下的 `results.json` 中，格式见 `docs/kv-cache-reuse-results-schema.md`。自己运行本笔记本时，各张图保存在 `OUTPUT_DIR` 中。

# %% [markdown] lang="en"
# **Exercises.** Each asks for a prediction; the cell after it computes the answer with this notebook's own code and
# checks it. Work it out first, then open the solution.
#
# **1. Hits and block size.** An earlier request left the blocks of its prompt in the cache. A new prompt of 27
# tokens shares its first 22 tokens with it. With blocks of 4 tokens, how many tokens does `lookup` find, and how
# many must the new request prefill? And with blocks of 8?
#
# <details><summary>Solution</summary>
#
# Only full blocks of the shared part count: 5 blocks of 4 cover 20 of the 22 shared tokens, so 20 tokens are
# found and 7 prefilled. With blocks of 8, 2 blocks cover 16 tokens, and 11 are prefilled: larger blocks waste
# more of a partial match (vLLM's default is 16 tokens per block).
#
# </details>

# %% [markdown] lang="zh"
# **练习**：每道题都先请你做出预测；紧随其后的单元格用本笔记本自己的代码算出答案并加以核对。先自己算一算，再打开答案。
#
# **1. 命中与物理块大小**：先前的一个请求把它提示的物理块留在了缓存里。一个 27 个 token 的新提示与它共享前 22 个 token。物理块大小为 4 个 token 时，`lookup` 能找到多少个 token？新请求还需要预填充多少个 token？物理块大小为 8 时又如何？
#
# <details><summary>查看答案</summary>
#
# 只有共享部分中填满的物理块才算数：5 个大小为 4 的物理块覆盖了 22 个共享 token 中的 20 个，所以找到 20 个 token，预填充 7 个。物理块大小为 8 时，2 个物理块覆盖 16 个 token，需要预填充 11 个：物理块越大，部分匹配时浪费得越多（vLLM 默认每个物理块 16 个 token）。
#
# </details>

# %%
rng = random.Random(SEED + 60)
earlier = [rng.randrange(cfg.vocab) for _ in range(30)]
new_prompt = earlier[:22] + [(t + 1) % cfg.vocab for t in earlier[22:27]]
exercise_hits = {}
for size in (4, 8):
    pool = PrefixPool(cfg, num_blocks=16, block_size=size)
    for block_hash in pool.block_hashes(earlier):
        pool.publish(pool.allocate(), block_hash)
    exercise_hits[size] = pool.lookup(new_prompt)[1]
assert exercise_hits == {4: 20, 8: 16}
say(en=f"Found in the cache: {exercise_hits[4]} tokens with blocks of 4 (prefill {27 - exercise_hits[4]}), "
       f"{exercise_hits[8]} with blocks of 8 (prefill {27 - exercise_hits[8]}).",
    zh=f"在缓存中找到：物理块大小为 4 时 {exercise_hits[4]} 个 token（预填充 {27 - exercise_hits[4]} 个），"
       f"大小为 8 时 {exercise_hits[8]} 个（预填充 {27 - exercise_hits[8]} 个）。")

# %% [markdown] lang="en"
# **2. A perfect draft.** Use the target itself as its own draft, with $k = 4$. How many target calls does
# `Speculator` need for 40 new tokens, and how many tokens does each call yield?
#
# <details><summary>Solution</summary>
#
# Every draft is accepted, so each call yields $k + 1 = 5$ tokens: 8 calls for 40 tokens. The budget rule does
# not shorten any round here, because 40 is a multiple of 5. A perfect draft is useless in practice (it costs as
# much as the target), but it shows the ceiling: $k + 1$ tokens per target call.
#
# </details>

# %% [markdown] lang="zh"
# **2. 完美的草稿模型**：把目标模型本身当作自己的草稿模型，取 $k = 4$。生成 40 个新 token，`Speculator` 需要调用目标模型多少次？每次调用得到多少个 token？
#
# <details><summary>查看答案</summary>
#
# 每个草稿都会被接受，所以每次调用得到 $k + 1 = 5$ 个 token：40 个 token 需要 8 次调用。这里预算规则不会让任何一轮缩短，因为 40 是 5 的倍数。完美的草稿模型在实际中毫无用处（它的开销与目标模型一样大），但它给出了上限：每次目标模型调用得到 $k + 1$ 个 token。
#
# </details>

# %%
perfect = Speculator(model, model, 4).generate(SPEC_PROMPTS[0], 40)
assert perfect["target_calls"] == 8 and perfect["accepted"] == [4] * 8 and perfect["tokens"] == PLAIN[0][1]
say(en=f"A perfect draft: {perfect['target_calls']} target calls, {40 / perfect['target_calls']:.0f} tokens per call, the target's own tokens.",
    zh=f"完美的草稿模型：目标模型调用 {perfect['target_calls']} 次，每次得到 {40 / perfect['target_calls']:.0f} 个 token，且正是目标模型自己的 token。")

# %% [markdown] lang="en"
# **3. Two splits by hand.** One query, three keys with scores 1, 2 and 3, one-dimensional values 10, 20 and 30.
# Split 1 holds the first two keys, split 2 the third. Give $m_s$, $l_s$ and $o_s$ of each split, and the merged
# output.
#
# <details><summary>Solution</summary>
#
# Split 1: $m_1 = 2$, $l_1 = e^{-1} + 1 \approx 1.368$, $o_1 = (10 e^{-1} + 20) / l_1 \approx 17.31$. Split 2: $m_2 = 3$,
# $l_2 = 1$, $o_2 = 30$. With $M = 3$: $w_1 = l_1 e^{-1} \approx 0.503$, $w_2 = 1$, and the output is
# $(0.503 \cdot 17.31 + 30) / 1.503 \approx 25.75$, the softmax-weighted mean of 10, 20 and 30. Without the
# rescaling, $(1.368 \cdot 17.31 + 30) / 2.368 \approx 22.67$.
#
# </details>

# %% [markdown] lang="zh"
# **3. 手算两段合并**：一个查询，三个键，分数分别为 1、2、3，一维的值分别为 10、20、30。第 1 段包含前两个键，第 2 段包含第三个键。求每一段的 $m_s$、$l_s$ 和 $o_s$，以及合并后的输出。
#
# <details><summary>查看答案</summary>
#
# 第 1 段：$m_1 = 2$，$l_1 = e^{-1} + 1 \approx 1.368$，$o_1 = (10 e^{-1} + 20) / l_1 \approx 17.31$。第 2 段：$m_2 = 3$，$l_2 = 1$，$o_2 = 30$。取 $M = 3$：$w_1 = l_1 e^{-1} \approx 0.503$，$w_2 = 1$，输出为 $(0.503 \cdot 17.31 + 30) / 1.503 \approx 25.75$，也就是以 softmax 为权重对 10、20、30 求的加权平均。如果不做重新缩放，得到的是 $(1.368 \cdot 17.31 + 30) / 2.368 \approx 22.67$。
#
# </details>

# %%
with torch.inference_mode():
    # [en] Scores q . k / sqrt(1) with q = 1: keys 1, 2, 3; values 10, 20, 30.
    # [zh] q = 1 时分数为 q · k / sqrt(1)：键为 1、2、3；值为 10、20、30。
    q3, k3, v3 = torch.ones(1, 1, dtype=torch.float64), torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64), torch.tensor([[10.0], [20.0], [30.0]], dtype=torch.float64)
    parts = [attend_split(q3, k3[:2], v3[:2], torch.ones(1, 2, dtype=torch.bool)), attend_split(q3, k3[2:], v3[2:], torch.ones(1, 1, dtype=torch.bool))]
    merged, unscaled = merge_splits(*zip(*parts)), merge_without_rescaling(*zip(*parts))
assert [round(float(p[0]), 2) for p in parts] == [17.31, 30.0] and round(float(merged), 2) == 25.75 and round(float(unscaled), 2) == 22.67
assert close(merged.flatten(), torch.softmax(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 0) @ v3)
say(en=f"Split outputs {float(parts[0][0]):.2f} and {float(parts[1][0]):.2f}; merged {float(merged):.2f}; without rescaling {float(unscaled):.2f}.",
    zh=f"两段的输出分别为 {float(parts[0][0]):.2f} 和 {float(parts[1][0]):.2f}；合并结果为 {float(merged):.2f}；不做重新缩放则为 {float(unscaled):.2f}。")

# %% [markdown] lang="en"
# **4. How big a batch?** Leave the cache aside. From which batch size on does the weight part of a Llama 3.1 8B
# decode step (16-bit weights) reach the ridge point of an H100, {{run:roofline.gpu_ridge:.0f}} FLOP/byte?
#
# <details><summary>Solution</summary>
#
# Each 2-byte weight does 2 FLOPs per token, so the weight part's intensity is about $B$ FLOP/byte: a batch of
# about 300 sequences. With
# the cache included, Llama 3.1 8B never gets there at a context of 4,096 tokens: however large the batch, each
# sequence brings its own 512 MiB of K/V, and the FLOPs of one token divided by these bytes come to only
# {{run:exercise.llama_limit:.0f}} FLOP/byte. This is why serving systems work so hard on the cache.
#
# A detail: the cell below finds a batch slightly larger than the ridge's value, because a step also reads one
# embedding row per sequence, bytes that grow with $B$ and keep the weight part's intensity slightly below $B$.
#
# </details>

# %% [markdown] lang="zh"
# **4. batch 要多大**：先不考虑缓存。Llama 3.1 8B 的解码步（16 位权重）中，权重部分的算术强度从多大的 batch 起能达到 H100 的拐点 {{run:roofline.gpu_ridge:.0f}} FLOP/字节？
#
# <details><summary>查看答案</summary>
#
# 每个 2 字节的权重对每个 token 做 2 次浮点运算，所以权重部分的算术强度大约是 $B$ FLOP/字节，于是 batch 要达到约 300 条序列。把缓存算进来，在 4,096 个 token 的上下文下，Llama 3.1 8B 就永远到不了拐点：无论 batch 多大，每条序列都带着自己 512 MiB 的 K/V，一个 token 的浮点运算量除以这些字节，只有 {{run:exercise.llama_limit:.0f}} FLOP/字节。这正是推理服务系统在缓存上下这么大功夫的原因。
#
# 一个细节：下面的单元格算出的 batch 比拐点的数值略大，因为一步还要为每条序列读取一行嵌入，这些字节随 $B$ 增长，使权重部分的算术强度略低于 $B$。
#
# </details>

# %%
ridge_batch = next(b for b in range(1, 1000) if decode_step_cost(llama_8b, b, COST_CONTEXT, BF16)["weight_intensity"] >= GPU_RIDGE)
one_token = decode_step_cost(llama_8b, 1, COST_CONTEXT, BF16)
# [en] However large the batch: the FLOPs of one token over the bytes of its own cache.
# [zh] 无论 batch 多大：一个 token 的浮点运算量除以它自己缓存的字节数。
llama_limit = 2 * (one_token["weight_macs"] + one_token["attention_macs"]) / one_token["kv_bytes"]
assert 290 <= ridge_batch <= 310 and decode_step_cost(llama_8b, 10_000, COST_CONTEXT, BF16)["intensity"] < llama_limit < GPU_RIDGE
say(en=f"The weight part of Llama 3.1 8B reaches the H100 ridge at batch {ridge_batch}; the whole step, cache included, "
       f"approaches {llama_limit:.1f} FLOP/byte as the batch grows.",
    zh=f"Llama 3.1 8B 的权重部分在 batch 为 {ridge_batch} 时达到 H100 的拐点；把缓存算进来，batch 越大，整步的算术强度"
       f"越接近 {llama_limit:.1f} FLOP/字节。")
