# %% [markdown] lang="en"
# ## 7. Takeaways and exercises
#
# - **A KV cache stores each layer's keys and values** (this toy has one layer; the PyTorch notebook
#   shows a cache per layer with two). A cached call projects only its new tokens,
#   and its logits equal those of a full pass over the whole sequence, up to rounding (section 2;
#   largest difference here {{run:browser.cached_vs_full:.2g}}).
# - **Positions continue from the cache length.** Restarting them at zero kept every shape legal and
#   moved the logits by up to {{run:browser.restart_error:.2f}}.
# - **A chunk that follows a cache needs the lower-right alignment**, $j \le P + i$ (`causal_lower_right`
#   in PyTorch). The upper-left alignment, which `is_causal=True` and `np.tri` give on a grid that is
#   not square, moved the logits by up to {{run:browser.upper_left_error:.2f}}. Without a cache both
#   are the same triangle, so only a test with a cache tells them apart.
# - **An exact cache saves work and costs no accuracy** (a compressed cache is another matter): the call of section 6 projected $C$ rows instead of
#   $P + C$, and its output agreed with full recomputation within the float64 tolerance.
# - **Shapes never reveal these mistakes.** A comparison of the numbers, shown able to fail by a negative
#   control, does.

# %% [markdown] lang="zh"
# ## 7. 要点与练习
#
# - **KV 缓存保存每一层的键和值**（这个玩具模型只有一层；PyTorch 笔记本用两层展示了每层各有一份缓存）。带缓存的调用只投影新 token，它的 logits 与对整个序列做一次完整调用的结果相同，只差舍入误差（见第 2 节；这里最大绝对误差为 {{run:browser.cached_vs_full:.2g}}）。
# - **位置要从缓存长度接着数。** 位置从零重新计数时，所有形状依然合法，logits 的最大绝对误差却达到 {{run:browser.restart_error:.2f}}。
# - **接在缓存之后的分块需要右下角对齐的掩码**，即 $j \le P + i$（PyTorch 中的 `causal_lower_right`）。网格不是方阵时，`is_causal=True` 和 `np.tri` 给出的是左上角对齐，它让 logits 的最大绝对误差达到 {{run:browser.upper_left_error:.2f}}。没有缓存时两者是同一个三角形，所以只有用到缓存的测试才能区分它们。
# - **精确的缓存省下了计算，却不损失精度**（压缩的缓存另当别论）：第 6 节的那次调用只投影了 $C$ 行，而不是 $P + C$ 行，输出与完整重算仍在 FP64 容差内一致。
# - **形状永远暴露不了这些错误。** 只有比较数值，并用负对照证明这个比较确实会失败，才能查出它们。

# %% [markdown] lang="en"
# **Exercise 1: prefill in chunks.** A long prompt is often fed in several calls (*chunked prefill*).
# Feed the six tokens of section 2 as three calls of 3, 2 and 1 tokens, passing the cache from one
# call to the next. What shape does the cached K have after each call? Do the six rows of logits
# equal those of the full pass?
#
# <details><summary>Show the answer</summary>
#
# `(1, 4, 3, 16)`, then `(1, 4, 5, 16)`, then `(1, 4, 6, 16)`: the cache grows by the length of each
# chunk. And yes, the logits agree with the full pass within the tolerance: every call numbers its
# tokens from the cache length and uses the lower-right mask, so cutting the prompt into chunks
# changes at most the rounding (section 2). The next cell runs the three calls and checks both answers.
#
# </details>

# %% [markdown] lang="zh"
# **练习 1：分块预填充。** 长提示（prompt）常常分几次调用送入模型，这叫**分块预填充**（chunked prefill）。把第 2 节的六个 token 分成三次调用送入，分别含 3、2、1 个 token，每次调用都把上一次得到的缓存传下去。每次调用之后，缓存的 K 是什么形状？拼起来的六行 logits 与完整调用的结果相同吗？
#
# <details><summary>查看答案</summary>
#
# 依次是 `(1, 4, 3, 16)`、`(1, 4, 5, 16)` 和 `(1, 4, 6, 16)`：每次调用后，缓存都增加一个分块的长度。logits 也与完整调用在容差内一致：每次调用都从缓存长度开始为 token 编号，并使用右下角对齐的掩码，所以把提示切成几个分块，最多只改变舍入误差（见第 2 节）。下一个单元格执行这三次调用，并核对这两个答案。
#
# </details>

# %%
chunk_cache, chunk_logits, chunk_shapes, start = None, [], [], 0
for length in (3, 2, 1):
    logits, chunk_cache, _ = toy_forward(token_ids[:, start:start + length], cache=chunk_cache)
    chunk_logits.append(logits)
    chunk_shapes.append(chunk_cache[0].shape)
    start += length
chunked = np.concatenate(chunk_logits, axis=1)                         # [1, 6, VOCAB]
assert chunk_shapes == [(1, HEADS, 3, HEAD_DIM), (1, HEADS, 5, HEAD_DIM), (1, HEADS, 6, HEAD_DIM)]
assert close(chunked, full_logits)
say(en=f"Exercise 1 checked: the cache grows to 3, 5 and 6 positions; the chunked logits match the full pass "
       f"(largest difference {max_abs_err(chunked, full_logits):.1e}).",
    zh=f"练习 1 已核对：缓存依次增长到 3、5、6 个位置；分块送入得到的 logits 与完整调用一致"
       f"（最大绝对误差 {max_abs_err(chunked, full_logits):.1e}）。")

# %% [markdown] lang="en"
# **Exercise 2: a sliding window.** Some models let each query read only the last $W$ keys, itself
# included (*sliding-window attention*): query $P + i$ reads key $j$ when $P + i - W < j \le P + i$.
# With a cache of $P = 6$ positions, a chunk of $C = 2$ tokens and $W = 3$, which keys does each new
# query read? Does the window need the absolute positions?
#
# <details><summary>Show the answer</summary>
#
# Query 6 reads keys 4, 5 and 6; query 7 reads keys 5, 6 and 7. No, the mask does not need the absolute
# positions: it needs one numbering shared by queries and keys, because the window depends only
# on the distance between a query and a key. Position embeddings or RoPE are different: they need the
# true positions (for RoPE, a new query must use the numbering the cached keys were rotated with, and
# since those keys are stored already rotated, in practice that means the absolute positions).
# Numbering the query $P + i$, on the same scale as the keys, keeps every distance; the
# local index $i$ alone (the upper-left numbering) breaks them, and the window goes wrong in the same way
# as the upper-left triangle.
#
# The window also lets the cache forget: no query of this chunk or a later one reads a key older than
# $W - 1$ positions before the chunk, so the cache only needs its last $W - 1 = 2$ keys and values. With
# the cache trimmed to its last `keep` rows, the next cell's `window_step(keep)` builds the mask with
# `past_len=keep`: it numbers the kept positions from 0 (with `keep = 2`, positions 4–7 become 0–3), which shifts queries and keys
# by the same amount, so every distance is kept. That cell builds the window mask from `allowed_keys`,
# lists the keys each query reads, then runs one attention head three ways: without a cache (all 8 rows
# projected in one call), with the full cache
# of the first 6 rows, and with that cache trimmed to its last 2 rows. All three must give the same
# output; a cache trimmed to 1 row, one too few, must not (the negative control).
#
# </details>

# %% [markdown] lang="zh"
# **练习 2：滑动窗口。** 有些模型只让每个查询读取最近的 $W$ 个键（包括它自己），这叫**滑动窗口注意力**：当 $P + i - W < j \le P + i$ 时，查询 $P + i$ 可以读取键 $j$。设缓存中有 $P = 6$ 个位置，分块有 $C = 2$ 个 token，$W = 3$，每个新查询分别读取哪些键？窗口掩码需要绝对位置吗？
#
# <details><summary>查看答案</summary>
#
# 查询 6 读取键 4、5、6；查询 7 读取键 5、6、7。窗口掩码不需要绝对位置：它需要的是查询和键共用同一套编号，因为窗口只取决于查询与键之间的距离。位置嵌入或 RoPE 则不同，它们需要真实位置（对 RoPE 而言，新查询必须沿用缓存中的键旋转时所用的编号；缓存里的键存的是已经旋转过的结果，所以实际上就是绝对位置）。把查询编号为 $P + i$，与键用同一套编号，每个距离都保持不变；只用局部下标 $i$（即左上角对齐的编号）则会破坏距离，窗口掩码就会犯和左上角三角形同样的错误。
#
# 窗口还让缓存可以淘汰旧的项：这个分块及其后的查询，都不会读取比分块早 $W - 1$ 个位置以上的键，所以缓存只需保留最后 $W - 1 = 2$ 个键和值。缓存只保留最后 `keep` 行之后，下一个单元格的 `window_step(keep)` 用 `past_len=keep` 构造掩码：它把保留下来的位置从 0 开始重新编号（`keep = 2` 时，位置 4–7 变成 0–3），查询和键平移了相同的量，所以每个距离都保持不变。这个单元格在 `allowed_keys` 的基础上构造窗口掩码，列出每个查询读取的键，再用三种方式运行单个注意力头：不用缓存（一次投影全部 8 行）；用前 6 行的完整缓存；用只保留最后 2 行的缓存。三者的输出必须相同；只保留 1 行的缓存少了一行，输出必须不同（负对照）。
#
# </details>

# %%
# [en] The offset mask, further limited to the last `window` keys of each query.
# [zh] 在带偏移的掩码上再加一条限制：每个查询只能读取最近的 `window` 个键。
def window_keys(past_len, new_len, window):
    query_pos = past_len + np.arange(new_len)
    key_pos = np.arange(past_len + new_len)
    return allowed_keys(past_len, new_len) & (key_pos[None, :] > query_pos[:, None] - window)


# [en] The exercise's numbers: P cached positions, a chunk of C tokens, a window of W keys.
# [zh] 练习中的取值：缓存中有 P 个位置，分块有 C 个 token，窗口含 W 个键。
P, C, W = 6, 2, 3
window_read = {f"q{P + i}": np.flatnonzero(row).tolist() for i, row in enumerate(window_keys(P, C, W))}
window_input = np.random.default_rng(SEED + 3).normal(size=(P + C, HEAD_DIM))  # [P + C, Dh]
# [en] Without a cache: all P + C rows in one call; keep the outputs of the C new queries.
# [zh] 不用缓存：一次调用处理全部 P + C 行，只取 C 个新查询的输出。
window_full = single_head_attention(window_input @ Wq1, window_input @ Wk1, window_input @ Wv1,
                                    window_keys(0, P + C, W))[P:]
# [en] The cache: K and V of the first P rows, projected by an earlier call (the prefill).
# [zh] 缓存：前 P 行的 K 和 V，由更早的一次调用（预填充）投影得到。
win_k_cache, win_v_cache = window_input[:P] @ Wk1, window_input[:P] @ Wv1         # [P, Dh], [P, Dh]
new_rows = window_input[P:]                                                       # [C, Dh]


def window_step(keep):
    # [en] The C new rows attend to the last `keep` cached rows plus themselves.
    # [zh] C 个新行读取缓存的最后 `keep` 行和它们自己。
    keys = np.concatenate([win_k_cache[P - keep:], new_rows @ Wk1])                  # [keep + C, Dh]
    values = np.concatenate([win_v_cache[P - keep:], new_rows @ Wv1])
    # [en] past_len = keep: positions P - keep .. P + C - 1 renumbered from 0. Queries and keys shift by
    # [en] the same amount, so every query-key distance, all the window depends on, is kept (see the answer).
    # [zh] past_len = keep：位置 P - keep .. P + C - 1 从 0 开始重新编号。查询和键平移相同的量，
    # [zh] 窗口所依赖的查询与键之间的距离因此全都不变（见答案）。
    return single_head_attention(new_rows @ Wq1, keys, values, window_keys(keep, C, W))


# [en] The full cache, the cache trimmed to its last W - 1 rows, and one row fewer.
# [zh] 完整的缓存、只保留最后 W - 1 行的缓存，以及再少一行的缓存。
window_cached, window_trimmed, window_too_short = window_step(P), window_step(W - 1), window_step(W - 2)
assert window_read == {"q6": [4, 5, 6], "q7": [5, 6, 7]}
assert close(window_cached, window_full) and close(window_trimmed, window_full)
# [en] The negative control: one cached row too few.
# [zh] 负对照：缓存少了一行。
assert not close(window_too_short, window_full)
say(en=f"Exercise 2 checked: query 6 reads keys 4-6, query 7 keys 5-7. Largest difference from the run without "
       f"a cache: {max_abs_err(window_cached, window_full):.1e} with the full cache of {P} rows, "
       f"{max_abs_err(window_trimmed, window_full):.1e} with the cache trimmed to {W - 1} rows, and "
       f"{max_abs_err(window_too_short, window_full):.1e} with {W - 2} row (one too few: caught).",
    zh=f"练习 2 已核对：查询 6 读取键 4–6，查询 7 读取键 5–7。与不用缓存的结果相比，最大绝对误差为："
       f"用 {P} 行的完整缓存时 {max_abs_err(window_cached, window_full):.1e}，缓存只保留 {W - 1} 行时 "
       f"{max_abs_err(window_trimmed, window_full):.1e}，只保留 {W - 2} 行时 {max_abs_err(window_too_short, window_full):.1e}"
       f"（少了一行，被查出）。")

# %% [markdown] lang="en"
# **Exercise 3: the work of a whole generation.** A prompt of $P = 4$ tokens is prefilled, then
# $N = 8$ more tokens are consumed one per call, as in a generation loop (here they are random IDs
# given in advance, not chosen by the model). Count the rows the toy layer projects in total (one row
# is one token through the projections): with the cache, and if every call recomputes the
# whole sequence from scratch.
#
# <details><summary>Show the answer</summary>
#
# With the cache: $4 + 8 \times 1 = 12$ rows. Without it: the prefill's 4 rows, then calls of
# $5, 6, \dots, 12$ rows, $4 + 68 = 72$ in all. In general $P + N$ against
# $(N + 1)P + N(N + 1)/2$: the cache turns projection work that grows with the square of the length
# into work that grows linearly. Attention is another matter: every new query still reads all the keys
# before it, so even with the cache the attention work of a generation grows with the square of its
# length (without the cache, faster still). The next cell runs both loops with `toy_forward`, counts
# the rows, and checks with `close` that both loops give the same last row of logits at every step.
#
# </details>

# %% [markdown] lang="zh"
# **练习 3：一次完整生成的计算量。** 先对 $P = 4$ 个 token 的提示做预填充，之后每次调用送入一个 token，共送入 $N = 8$ 个，就像生成循环那样（这里的 token 是事先给定的随机 ID，并非由模型选出）。玩具层一共要投影多少行（一个 token 经过一遍投影算作一行）？分两种情况来数：用缓存；每次调用都从头重算整个序列。
#
# <details><summary>查看答案</summary>
#
# 用缓存：$4 + 8 \times 1 = 12$ 行。不用缓存：预填充 4 行，之后各次调用依次投影 $5, 6, \dots, 12$ 行，共 $4 + 68 = 72$ 行。一般地，用缓存需要 $P + N$ 行，不用缓存需要 $(N + 1)P + N(N + 1)/2$ 行：缓存把随序列长度平方增长的投影计算变成了线性增长。注意力则是另一回事：每个新查询仍要读取它之前的全部键，所以即使用了缓存，一次生成的注意力计算量仍随长度的平方增长（不用缓存时增长得更快）。下一个单元格用 `toy_forward` 把两种循环都跑一遍，统计投影的行数，并用 `close` 核对两种循环在每一步给出的最后一行 logits 都相同。
#
# </details>

# %%
# [en] The exercise's numbers: a prompt of P tokens, then N tokens one per call.
# [zh] 练习中的取值：提示有 P 个 token，之后每次调用送入一个 token，共 N 个。
P, N = 4, 8
gen_ids = np.random.default_rng(SEED + 4).integers(0, VOCAB, size=(1, P + N))     # [1, P + N]
gen_cache, cached_rows_total, full_rows_total, last_rows = None, 0, 0, []
for end in range(P, P + N + 1):
    # [en] The prefill (the P prompt tokens), then one new token per call.
    # [zh] 先预填充（提示的 P 个 token），之后每次调用送入一个新 token。
    new = gen_ids[:, :P] if end == P else gen_ids[:, end - 1:end]
    cached_logits, gen_cache, cached_parts = toy_forward(new, cache=gen_cache)
    recomputed_logits, _, full_parts_now = toy_forward(gen_ids[:, :end])
    cached_rows_total += cached_parts["x"].shape[1]
    full_rows_total += full_parts_now["x"].shape[1]
    # [en] The step's last row of logits, cached and recomputed.
    # [zh] 这一步最后一行的 logits：带缓存的与重算的。
    last_rows.append((cached_logits[:, -1], recomputed_logits[:, -1]))
gen_errors = [max_abs_err(*pair) for pair in last_rows]
# [en] The answer: P + N rows with the cache, (N + 1)P + N(N + 1)/2 without, 12 and 72 here.
# [zh] 答案：用缓存 P + N 行，不用缓存 (N + 1)P + N(N + 1)/2 行，这里分别是 12 和 72。
assert (cached_rows_total, full_rows_total) == (P + N, (N + 1) * P + N * (N + 1) // 2) == (12, 72)
assert all(close(*pair) for pair in last_rows)
say(en=f"Exercise 3 checked: {cached_rows_total} rows with the cache, {full_rows_total} without; the last row of "
       f"logits agrees at every step (largest difference {max(gen_errors):.1e}).",
    zh=f"练习 3 已核对：用缓存投影 {cached_rows_total} 行，不用缓存投影 {full_rows_total} 行；每一步最后一行的 logits 都一致"
       f"（最大绝对误差 {max(gen_errors):.1e}）。")

# %% tags=["prose-values"]
{"browser": {"cached_vs_full": max_abs_err(step_logits, full_logits[:, PAST:]),
             "restart_error": position_rows["[0, 1]"][1], "upper_left_error": wrong_mask_error}}

# %% [markdown] lang="en"
# ## Where to go next
#
# This notebook stops at one attention layer, and at one head for the comparison. The full PyTorch
# notebook, *KV cache from scratch* ([open it]({{colab:infra-benchmark/kv-cache}})), builds the complete two-layer
# decoder with one cache per layer, checks cached against full computation logit by logit across batch
# sizes, chunk sizes and precisions, breaks positions and masks on purpose, and times prefill, full
# recomputation and cached continuation on the CPU. A last, short section copies the decoder's weights
# into Hugging Face's GPT-2 and uses it as an outside referee; the companion notebook *Checking our
# decoder against Hugging Face GPT-2* ([open it]({{colab:infra-benchmark/kv-cache-hf-gpt2}}))
# takes that comparison further. Both need PyTorch (and `transformers` for the comparison), so they run
# in Jupyter or Colab, not in the browser.

# %% [markdown] lang="zh"
# ## 下一步
#
# 本笔记本只讲到单个注意力层，对比部分也只用了一个头。完整的 PyTorch 笔记本是《从零实现 KV 缓存》（[打开]({{colab:infra-benchmark/kv-cache}})）。它实现了完整的两层解码器，每层各有一份缓存；在不同的 batch 大小、分块长度和精度下，逐个 logit 地对比缓存路径与完整重算；故意把位置和掩码改错；并在 CPU 上对预填充、完整重算和缓存续写计时。最后还有简短的一节，把解码器的权重复制进 Hugging Face 的 GPT-2，请它当外部裁判；配套笔记本《用 Hugging Face GPT-2 检验我们的解码器》（[打开]({{colab:infra-benchmark/kv-cache-hf-gpt2}})）则把这个比较做得更深入。这两份笔记本都依赖 PyTorch（与 GPT-2 的比较还需要 `transformers`），只能在 Jupyter 或 Colab 中运行，不能在浏览器里运行。
