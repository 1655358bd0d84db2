# %% [markdown] lang="en"
# ## 6. One attention head, with and without the cache
#
# Now the computation itself, for one head of width 16 and the `HISTORY` and `CHUNK` you chose in
# section 5. The rows of `layer_input` stand for the layer's input at each absolute position (token
# and position embeddings already added).
#
# - **Full recomputation** projects all `P + C` positions to Q, K and V, runs causal attention over
#   all of them, and keeps the last `C` output rows.
# - **The cached path** projected K and V for the first `P` positions earlier (that is the cache). In
#   this call it projects only the `C` new rows, appends their K/V after the cached ones, and lets the
#   `C` new queries attend with the offset mask.
#
# In float64 both paths should agree up to rounding. The cell prints the largest absolute difference
# and checks the two with `np.allclose`. It also counts the rows each path projects in this call, and
# runs the cached path once more with the upper-left triangle to show that the comparison catches it.

# %% [markdown] lang="zh"
# ## 6. 单个注意力头：用缓存与不用缓存
#
# 现在来看计算本身：一个宽度为 16 的注意力头，`HISTORY` 和 `CHUNK` 沿用你在第 5 节中设定的值。`layer_input` 的每一行代表该层在某个绝对位置上的输入（token 嵌入和位置嵌入已经加好）。
#
# - **完整重算**：把全部 `P + C` 个位置投影成 Q、K、V，在所有位置上做因果注意力，只保留最后 `C` 行输出。
# - **缓存路径**：前 `P` 个位置的 K、V 早先已经算好，这就是缓存。本次调用只投影 `C` 个新行，把它们的 K/V 拼接在缓存之后，再让这 `C` 个新查询按带偏移的掩码做注意力。
#
# 在 float64 精度下，两条路径的结果应当只差舍入误差。单元格会打印最大绝对误差，并用 `np.allclose` 检查两者是否一致；还会统计本次调用中每条路径各投影了多少行，并用左上角三角形再跑一次缓存路径，表明这个比较能抓住错误的掩码。

# %%
def single_head_attention(q, k, v, mask):
    # q: [C, Dh], k, v: [T, Dh], mask: bool [C, T] -> [C, Dh]
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return softmax(np.where(mask, scores, -np.inf)) @ v


head_rng = np.random.default_rng(SEED + 1)
Wq1, Wk1, Wv1 = (head_rng.normal(scale=1 / math.sqrt(HEAD_DIM), size=(HEAD_DIM, HEAD_DIM)) for _ in range(3))
layer_input = head_rng.normal(size=(HISTORY + CHUNK, HEAD_DIM))
projected_rows = {}

# [en] Full recomputation: every position goes through the projections again.
# [zh] 完整重算：每个位置都重新经过投影。
q_all, k_all, v_all = layer_input @ Wq1, layer_input @ Wk1, layer_input @ Wv1
projected_rows["full recomputation"] = layer_input.shape[0]
full_out = single_head_attention(q_all, k_all, v_all, allowed_keys(0, HISTORY + CHUNK))[HISTORY:]

# [en] Cached path: K/V of the history were stored during an earlier call ...
# [zh] 缓存路径：历史位置的 K/V 在之前的调用中已经存好……
k_cache, v_cache = layer_input[:HISTORY] @ Wk1, layer_input[:HISTORY] @ Wv1
# [en] ... so this call projects only the new rows.
# [zh] ……所以这次调用只投影新的行。
chunk = layer_input[HISTORY:]
q_new, k_new, v_new = chunk @ Wq1, chunk @ Wk1, chunk @ Wv1
projected_rows["cached path"] = chunk.shape[0]
k_cat = np.concatenate([k_cache, k_new])
v_cat = np.concatenate([v_cache, v_new])
cached_out = single_head_attention(q_new, k_cat, v_cat, allowed_keys(HISTORY, CHUNK))
wrong_out = single_head_attention(q_new, k_cat, v_cat, upper_left_mask(HISTORY, CHUNK))

max_error = np.abs(cached_out - full_out).max()
wrong_error = np.abs(wrong_out - full_out).max()
say(en=f"`P = {HISTORY}`, `C = {CHUNK}`, head width {HEAD_DIM}, float64.",
    zh=f"`P = {HISTORY}`，`C = {CHUNK}`，每头宽度 {HEAD_DIM}，float64。")
say_table([[str(projected_rows["full recomputation"]), str(projected_rows["cached path"]),
            f"{max_error:.2e}", f"{wrong_error:.2e}"]],
          en=["rows projected, full recomputation", "rows projected, cached path",
              "max |cached - full|, offset mask", "max |cached - full|, upper-left triangle"],
          zh=["本次投影的行数（完整重算）", "本次投影的行数（缓存路径）",
              "最大 |缓存路径 - 完整路径|（带偏移的掩码）", "最大 |缓存路径 - 完整路径|（左上角三角形）"])

assert cached_out.dtype == full_out.dtype == np.float64
assert q_new.shape == (CHUNK, HEAD_DIM) and k_cat.shape == v_cat.shape == (HISTORY + CHUNK, HEAD_DIM)
assert cached_out.shape == full_out.shape == (CHUNK, HEAD_DIM)
assert projected_rows == {"full recomputation": HISTORY + CHUNK, "cached path": CHUNK}
assert np.allclose(cached_out, full_out, rtol=1e-10, atol=1e-10)
if HISTORY > 0:
    assert not np.allclose(wrong_out, full_out, rtol=1e-5, atol=1e-5)
else:
    # [en] With an empty cache the two masks are the same grid.
    # [zh] 缓存为空时，两种掩码是同一个网格。
    assert np.allclose(wrong_out, full_out, rtol=1e-10, atol=1e-10)

# %% [markdown] lang="en"
# ### Exercise
#
# A cache holds 10 tokens and the next chunk has 3. What are the absolute positions of the new
# queries? What are the last two dimensions of the score array? How many keys can each new query
# read, and how many would the upper-left triangle expose?
#
# <details><summary>Show the answer</summary>
#
# The new queries sit at positions 10, 11 and 12. The scores end in `[3, 13]`: three queries against
# thirteen keys (ten cached, three new). The three queries read 11, 12 and 13 keys. The upper-left
# triangle looks only at local indices and would expose 1, 2 and 3.
#
# </details>
#
# The next cell checks this answer with the functions defined above.

# %% [markdown] lang="zh"
# ### 练习
#
# 缓存里已有 10 个 token，下一个分块有 3 个 token。新查询的绝对位置分别是多少？分数数组的最后两个维度是多少？每个新查询各能读取多少个键？如果误用左上角三角形，又会各暴露多少个键？
#
# <details><summary>查看答案</summary>
#
# 新查询位于位置 10、11 和 12。分数数组的最后两维是 `[3, 13]`：3 个查询对 13 个键（10 个来自缓存，3 个是新的）。三个查询分别能读取 11、12、13 个键。左上角三角形只看局部下标，只会暴露 1、2、3 个键。
#
# </details>
#
# 下一个单元格用前面定义的函数验证这个答案。

# %%
ex_past, ex_chunk = 10, 3
ex_rng = np.random.default_rng(SEED + 2)
ex_q = ex_rng.normal(size=(ex_chunk, HEAD_DIM))
ex_k = ex_rng.normal(size=(ex_past + ex_chunk, HEAD_DIM))
assert query_positions(ex_past, ex_chunk).tolist() == [10, 11, 12]
assert (ex_q @ ex_k.T).shape[-2:] == (3, 13)
assert allowed_keys(ex_past, ex_chunk).sum(axis=1).tolist() == [11, 12, 13]
assert upper_left_mask(ex_past, ex_chunk).sum(axis=1).tolist() == [1, 2, 3]
say(en="The exercise's answer checks out.", zh="练习的答案验证无误。")

# %% [markdown] lang="en"
# ## Where to go next
#
# This notebook stops at one attention layer, and at one head for the comparison. The full PyTorch
# notebook, [`kv-cache.en.ipynb`](kv-cache.en.ipynb) next to this one in the repository's `build/infra-benchmark/`
# folder ([open it in Colab]({{colab:infra-benchmark/kv-cache}})), builds the complete
# two-layer decoder with one cache per layer (section 5), checks cached against full computation
# logit by logit across batch sizes, chunk sizes and precisions (section 6), breaks positions and
# masks on purpose (section 7), and times prefill, full recomputation and cached continuation on the
# CPU, saving the raw results (sections 8–9). A last, short section copies the decoder's weights into
# Hugging Face's GPT-2 and uses it as an outside referee; the companion notebook *Checking our decoder
# against Hugging Face GPT-2* ([open it in Colab]({{colab:infra-benchmark/kv-cache-hf-gpt2}})) takes
# that comparison further. Both need PyTorch (and `transformers` for the comparison), so they run in
# Jupyter or Colab, not in the browser.

# %% [markdown] lang="zh"
# ## 下一步
#
# 本笔记本只讲到单个注意力层，对比部分也只用了一个头。完整的 PyTorch 笔记本是仓库 `build/infra-benchmark/` 目录下与本笔记本并列的 [`kv-cache.zh.ipynb`](kv-cache.zh.ipynb)（[在 Colab 中打开]({{colab:infra-benchmark/kv-cache}})）：它实现了完整的两层解码器，每层各有一份缓存（第 5 节）；在不同的 batch 大小、分块长度和精度下，逐个 logit 地对比缓存计算与完整计算（第 6 节）；故意把位置和掩码改错（第 7 节）；并在 CPU 上对预填充、完整重算和缓存续写计时，保存原始结果（第 8、9 节）。最后还有简短的一节，把解码器的权重复制进 Hugging Face 的 GPT-2，请它当外部裁判；配套笔记本《用 Hugging Face GPT-2 检验我们的解码器》（[在 Colab 中打开]({{colab:infra-benchmark/kv-cache-hf-gpt2}})）则把这个比较做得更深入。两者都依赖 PyTorch（这个比较还需要 `transformers`），因此需要在 Jupyter 或 Colab 中运行，无法在浏览器里运行。
