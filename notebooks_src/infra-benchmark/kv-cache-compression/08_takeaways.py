# %% [markdown] lang="en"
# ## 9. Takeaways and exercises
#
# * **MLA caches a latent and one shared RoPE key, not per-head keys and values**: $r + d_R$ numbers per token and layer, {{run:takeaways.deepseek_latent}}
#   for DeepSeek-V3 against {{run:takeaways.deepseek_expanded:,}} for its expanded keys and values. It is exact: each form
#   matched its own full recomputation (largest FP32 logit error {{run:takeaways.mla_fp32:.1e}}), the absorbed form
#   matched the naive one within rounding (largest FP32 logit error {{run:takeaways.absorbed_vs_naive_fp32:.1e}}), and
#   Hugging Face's DeepSeek-V3 agreed in FP64.
# * **Absorption is what makes the saving pay off at decode time.** Folding $W^{UK}$ into the query and $W^{UV}$ into the
#   output trades memory traffic for arithmetic: 1/{{run:mla.naive_vs_latent_bytes:.0f}} of the bytes read (each latent
#   read once for both products, as a fused kernel does),
#   {{run:mla.absorbed_vs_naive_macs:.1f}} times the multiply-adds of attention per cached key (scores and values,
#   projections left out; {{run:mla.absorbed_vs_naive_total_macs:.1f}} times for a whole decode step at 32,768 keys), which is why engines decode with the
#   absorbed form and prefill with the expanded one. Caching the latent without absorbing it (what transformers 5.23.0
#   does) saves cache capacity but costs more than the naive form: at 32,768 keys,
#   {{run:mla.expand_on_read_macs_ratio:.0f}} times its multiply-adds, and the cache and expanded tensors it reads and writes in an unfused
#   implementation come to {{run:mla.expand_on_read_traffic_ratio:.1f}} times the naive form's cache read, because it
#   writes and reads back every key and value at every step.
# * **Position must stay out of the latent.** A rotation between the query and $W^{UK}$ depends on the distance, so it
#   cannot be folded, and moving it into latent space does not help: both absorptions agreed with the model only at
#   distance 0. Hence the separate, shared RoPE key.
# * **In a local/global model the global layers hold almost all the cache**: for Gemma 3 27B at 128k tokens,
#   {{run:local_global.gemma3_mixed_gib:.2f}} GiB instead of {{run:local_global.gemma3_uniform_gib:.1f}} GiB. Each layer's
#   cache must match its own mask: a ring on the global layer failed the check.
# * **Sharing a cache between layers is a decision made in training**, not a trick for the cache: with the same weights,
#   the shared model's logits differ from the ordinary model's. In the code, the upper layer reads the shared cache and
#   never writes to it: an upper layer that also appended failed its own cached-versus-full check.
# * **StreamingLLM numbers positions as the cache sees them**: keys cached before RoPE and rotated at every read. Exact
#   against the sparse pattern it defines; an approximation of dense attention.
# * **Eviction policies are approximations**, judged against dense attention with bounds set after a first run (one
#   with a thin margin, said so) and a random control; random weights can show that a policy finds what it looks for,
#   not that a trained model keeps its answers. Choosing per head also fits badly with paged caches, which is one reason
#   serving systems rarely ship these policies.

# %% [markdown] lang="zh"
# ## 9. 要点与练习
#
# * **MLA 缓存的是潜向量和一个共享的 RoPE 键，而不是逐头的键和值**：每个 token 每层 $r + d_R$ 个数，DeepSeek-V3 为 {{run:takeaways.deepseek_latent}} 个，而展开后的键和值需要 {{run:takeaways.deepseek_expanded:,}} 个。它是精确的：每种形式都与自己的完整重算一致（FP32 下 logits 的最大绝对误差为 {{run:takeaways.mla_fp32:.1e}}），吸收形式与朴素形式的差异也在舍入误差范围内（FP32 下 logits 的最大绝对误差为 {{run:takeaways.absorbed_vs_naive_fp32:.1e}}）；Hugging Face 的 DeepSeek-V3 在 FP64 下也与之一致。
# * **吸收让这份节省在解码时真正兑现。** 把 $W^{UK}$ 并入查询、把 $W^{UV}$ 移到输出一侧，是用算术运算换访存：读取的字节只有朴素形式的 1/{{run:mla.naive_vs_latent_bytes:.0f}}（每个潜向量只读一次，同时用于两次乘法，融合内核就是这样做的），按每个缓存的键计，注意力本身（分数与对值的加权和，不含投影）的乘加次数则是它的 {{run:mla.absorbed_vs_naive_macs:.1f}} 倍（在 32,768 个键时，整个解码步是 {{run:mla.absorbed_vs_naive_total_macs:.1f}} 倍）。这也是推理服务系统用吸收形式解码、用展开形式预填充的原因。只缓存潜向量而不吸收（transformers 5.23.0 的做法），省下了缓存容量，代价却比朴素形式更高：在 32,768 个键时，乘加次数是朴素形式的 {{run:mla.expand_on_read_macs_ratio:.0f}} 倍；在非融合实现中，它每步读写的缓存和展开张量是朴素形式（只读缓存）的 {{run:mla.expand_on_read_traffic_ratio:.1f}} 倍，因为它每一步都要把每个键和值写出再读回。
# * **位置信息必须留在潜向量之外。** 夹在查询与 $W^{UK}$ 之间的旋转取决于距离，无法并入查询，把它挪到潜空间里也无济于事：两种吸收都只在距离为 0 时与模型一致。这就是单独设一个共享的 RoPE 键的原因。
# * **在局部/全局模型中，几乎全部缓存都在全局层**：Gemma 3 27B 在 128K token 时需要 {{run:local_global.gemma3_mixed_gib:.2f}} GiB，而不是 {{run:local_global.gemma3_uniform_gib:.1f}} GiB。每一层的缓存都必须与它自己的掩码相配：给全局层配环形缓冲区，检查就失败了。
# * **层间共享缓存是训练时做出的决定**，不是缓存上的技巧：权重相同时，共享模型的 logits 与普通模型不同。在代码中，上层只读取共享缓存、从不往里写：一个也往里追加的上层，连它自己的“缓存对照完整重算”检查都通不过。
# * **StreamingLLM 按键在缓存中的位置编号**：缓存 RoPE 之前的键，每次读取时再旋转。相对于它自己定义的稀疏模式，它是精确的；相对于稠密注意力，它是一种近似。
# * **淘汰策略是近似**，评判时以稠密注意力为基准，并用两样东西：根据第一次运行的结果定下的误差界（其中一条的余地很窄，正文已如实说明），以及随机淘汰这一负对照；随机权重只能说明一个策略找到了它要找的东西，不能说明训练好的模型能保住它的答案。按头选择也与分页缓存格格不入，这是推理服务系统很少提供这些策略的原因之一。

# %% [markdown] lang="en"
# **Exercise 1: MLA in a smaller model.** DeepSeek-V2-Lite has 16 attention heads with the same MLA dimensions as
# DeepSeek-V3 ($r = 512$, $d_R = 64$, $d_C = 128$, $d_v = 128$). Per token and layer, how many numbers does its naive
# cache hold, how many its latent cache, and what is the ratio? Compare the ratio with DeepSeek-V3's.
#
# <details><summary>Show the answer</summary>
#
# Naive: $16 \times (128 + 64 + 128) = 5{,}120$. Latent: $512 + 64 = 576$, the same as DeepSeek-V3, because the latent
# does not depend on the number of heads. The ratio is about 8.9, eight times smaller than DeepSeek-V3's 71: MLA saves
# the most where there are many heads. The next cell checks these numbers with section 4's formulas.
#
# </details>

# %% [markdown] lang="zh"
# **练习 1：较小模型中的 MLA。** DeepSeek-V2-Lite 有 16 个注意力头，MLA 的各个维度与 DeepSeek-V3 相同（$r = 512$，$d_R = 64$，$d_C = 128$，$d_v = 128$）。每个 token 每层，它的朴素缓存保存多少个数？潜向量缓存保存多少个数？两者之比是多少？再与 DeepSeek-V3 的比值比较一下。
#
# <details><summary>查看答案</summary>
#
# 朴素缓存：$16 \times (128 + 64 + 128) = 5{,}120$。潜向量缓存：$512 + 64 = 576$，与 DeepSeek-V3 相同，因为潜向量与头数无关。两者之比约为 8.9，只有 DeepSeek-V3 的比值 71 的八分之一：头越多，MLA 省得越多。下一个单元格用第 4 节的公式核对这些数字。
#
# </details>

# %%
v2_lite = MLAConfig(heads=16, latent=512, rope_dim=64, nope_dim=128, value_dim=128)
assert (expanded_elements(v2_lite), mla_elements(v2_lite)) == (5120, 576)
assert round(expanded_elements(v2_lite) / mla_elements(v2_lite), 1) == 8.9
assert round(expanded_elements(DEEPSEEK_V3) / mla_elements(DEEPSEEK_V3)) == 71
say(en="Exercise 1 checked: 5,120 and 576 numbers per token and layer, a ratio of 8.9 (DeepSeek-V3: 71).",
    zh="练习 1 已核对：每个 token 每层分别为 5,120 和 576 个数，比值 8.9（DeepSeek-V3 为 71）。")

# %% [markdown] lang="en"
# **Exercise 2: a deeper local/global model.** Take section 5's mixed model with twelve layers instead of six (the
# same pattern twice: layers 5 and 11 global, the rest local, $W = 8$). After 100 tokens, how many positions do its
# caches hold in total, and what fraction is that of an all-global model of twelve layers?
#
# <details><summary>Show the answer</summary>
#
# Ten local layers hold $W - 1 = 7$ positions each and two global layers 100 each: $70 + 200 = 270$ positions,
# against $12 \times 100 = 1{,}200$, that is 22.5%. The next cell builds the model, feeds it 100 tokens and counts.
#
# </details>

# %% [markdown] lang="zh"
# **练习 2：更深的局部/全局模型。** 把第 5 节的混合模型从六层改为十二层（同样的模式重复两次：第 5 层和第 11 层是全局层，其余是局部层，$W = 8$）。送入 100 个 token 之后，它的缓存一共保存多少个位置？这是十二层全部为全局层的模型的百分之几？
#
# <details><summary>查看答案</summary>
#
# 十个局部层各保存 $W - 1 = 7$ 个位置，两个全局层各保存 100 个：共 $70 + 200 = 270$ 个位置，而全局模型要保存 $12 \times 100 = 1{,}200$ 个，即 22.5%。下一个单元格构建这个模型，送入 100 个 token，然后数一数。
#
# </details>

# %%
twelve_cfg = replace(llama_cfg, layers=12)
twelve_pattern = LOCAL_GLOBAL * 2
with torch.inference_mode():
    _, twelve_cache = build(twelve_cfg, lambda i: WindowAttention(twelve_cfg, WINDOW) if twelve_pattern[i] == "local"
                            else Attention(twelve_cfg))(torch.randint(0, twelve_cfg.vocab, (1, 100)))
held_total = sum(len(c.contents()[2]) for c in twelve_cache)
assert held_total == 270
say(en="Exercise 2 checked: 270 cached positions, 22.5% of an all-global model's 1,200.",
    zh="练习 2 已核对：缓存共保存 270 个位置，是全局模型 1,200 个的 22.5%。")

# %% [markdown] lang="en"
# **Exercise 3: where the cache puts a token.** With $S = 4$ sinks and a window of $W = 8$, which keys does the query
# at position 30 read? At which cache positions does it see tokens 3 and 23, and itself? How far apart are the query
# and token 0 for RoPE, and how far apart in the text?
#
# <details><summary>Show the answer</summary>
#
# It reads keys 0–3 and 23–30, twelve keys. Token 3 sits at cache position 3, token 23 at 4, and the query itself at
# 11. RoPE sees the query and token 0 at distance 11; in the text they are 30 apart. The next cell asks
# `sink_window_mask` and `cache_positions` of section 6.
#
# </details>

# %% [markdown] lang="zh"
# **练习 3：缓存把 token 放在哪里。** 取 $S = 4$ 个汇聚点、窗口 $W = 8$，位置 30 上的查询读取哪些键？它在哪个缓存位置上看到 token 3、token 23 和它自己？在 RoPE 看来，查询与 token 0 相距多远？在文本中又相距多远？
#
# <details><summary>查看答案</summary>
#
# 它读取键 0–3 和 23–30，共十二个键。token 3 位于缓存位置 3，token 23 位于 4，查询自己位于 11。RoPE 看到查询与 token 0 的距离是 11；在文本中两者相距 30。下一个单元格用第 6 节的 `sink_window_mask` 和 `cache_positions` 来核对。
#
# </details>

# %%
read_by_30 = sink_window_mask(4, 8)(torch.tensor([30]), torch.arange(31))                     # [1, 31]
seen_at = cache_positions(read_by_30)[0]
assert torch.arange(31)[read_by_30[0]].tolist() == [0, 1, 2, 3] + list(range(23, 31))
assert (int(seen_at[3]), int(seen_at[23]), int(seen_at[30])) == (3, 4, 11)
assert int(seen_at[30] - seen_at[0]) == 11
say(en="Exercise 3 checked: keys 0-3 and 23-30; tokens 3, 23 and 30 at cache positions 3, 4 and 11; distance 11 for RoPE, 30 in the text.",
    zh="练习 3 已核对：读取键 0–3 和 23–30；token 3、23、30 的缓存位置分别为 3、4、11；RoPE 看到的距离是 11，文本中的距离是 30。")
