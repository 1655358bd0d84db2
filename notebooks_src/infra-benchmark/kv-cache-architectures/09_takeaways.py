# %% [markdown] lang="en"
# ## 11. Takeaways and exercises
#
# * **GQA and MQA shrink the cache by $H / H_{kv}$**: the cache holds $H_{kv}$ heads, and the measured bytes equal
#   $2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$. Which query head reads which K/V head is part of
#   the model: tiled heads passed every cached-versus-full check and still computed another function; only a
#   referee that knows the layout (the head-by-head loop, Hugging Face's Llama) caught them.
# * **"Equal" means within the dtype's tolerance** whenever two paths hand a kernel different layouts: a view and
#   its copy rounded differently at {{run:gqa.layout_lengths_differing}} of 24 lengths on the machine that ran
#   this notebook (appendix A). Bit-for-bit equality is asserted only where it holds by construction.
# * **RoPE keys are cached after rotation, at their own absolute positions**, and each new chunk must be rotated
#   at its true positions. Because RoPE sees only distances, a shift-based test cannot tell a correct rotation
#   from a backwards one: check the formula itself.
# * **A sliding window needs only the last $W - 1$ positions**, in a ring buffer that reads before it writes.
#   "A window of $W$" is $W$ keys in Hugging Face's code, and $W + 1$ in the Mistral paper's wording read inclusively;
#   a window one key too wide fails the cached check, one key too narrow only the key count. Cropping the context
#   to $W$ tokens is not a window: stacked layers see back $L(W - 1)$ positions.
# * **A quantized cache is an approximation**, judged by stated bounds (set once, after a first run, well above
#   the errors it measured; every later run must stay within them) and by a control that must break them.
#   Random weights show that the cache reads back what it stored, not that a trained model keeps its quality,
#   which is what KIVI measured.
# * **Fused attention changes the arithmetic's order, not the result**, as long as the mask is right:
#   `is_causal=True` after a cache passes a prefill followed by one-token steps and fails for chunks of 2 and 5
#   tokens.
# * **At 7–8B scale the choice matters**: one 32k-token context costs {{run:memory.mha_gib:.0f}} GiB with MHA,
#   more than Llama 3 8B's own (GQA-8) weights, and a quarter of that with its eight K/V heads.
#
# The [compression notebook]({{colab:infra-benchmark/kv-cache-compression}}) builds on this decoder: multi-head
# latent attention (MLA), local and global layers, a cache shared across layers, attention sinks and eviction.

# %% [markdown] lang="zh"
# ## 11. 要点与练习
#
# * **GQA 和 MQA 把缓存缩小到原来的 $H_{kv} / H$**：缓存中保存的是 $H_{kv}$ 个头，实测字节数等于 $2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$。哪个查询头读取哪个 K/V 头，是模型的一部分：平铺的头通过了每一项“缓存对照完整重算”，计算的却是另一个函数；只有知道正确布局的裁判（逐头循环、Hugging Face 的 Llama）才查出了它。
# * **只要两条路径交给内核的内存布局不同，“相等”就只能是在该精度的容差内相等**：在运行本笔记本的机器上，视图与它的副本在 24 个长度中有 {{run:gqa.layout_lengths_differing}} 个舍入结果不同（附录 A）。只有在构造上必然成立的地方，我们才断言逐比特相同。
# * **RoPE 的键在旋转之后缓存，旋转用的是它自己的绝对位置**；每个新分块都必须按真实位置旋转。由于 RoPE 只看得到距离，基于平移的检验分不清正确的旋转和反向的旋转，所以要直接核对公式本身。
# * **滑动窗口只需要最后 $W - 1$ 个位置**，存在一个先读后写的环形缓冲区里。“大小为 $W$ 的窗口”在 Hugging Face 的代码里含 $W$ 个键；按 Mistral 论文的措辞、两端都算在内来理解，则含 $W + 1$ 个键。宽了一个键的窗口通不过缓存检查，窄了一个键的窗口只有键数检查能查出。把上下文裁剪到 $W$ 个 token 并不等于滑动窗口：多层叠加之后，能回看 $L(W - 1)$ 个位置。
# * **量化缓存是一种近似**，要用明确写出的误差界和一个必须违反这些界的负对照来评判。这些界是在第一次运行之后定下的，明显高于当时测得的误差，此后每次运行都必须落在界内。随机权重只能说明这个缓存读回了它存下的内容，不能说明训练好的模型能保持质量，而后者才是 KIVI 所测量的。
# * **融合注意力改变的是运算次序，而不是结果**，前提是掩码正确：在缓存之后使用 `is_causal=True` 的错误，能通过“预填充后逐 token 解码”的运行，而在分块长度为 2 和 5 时失败。
# * **到了 7B 到 8B 的规模，这些选择举足轻重**：一个 32k token 的上下文，用 MHA 需要 {{run:memory.mha_gib:.0f}} GiB，比 Llama 3 8B 本身（GQA-8）的权重还大；用它的 8 个 K/V 头，只需要这个数的四分之一。
#
# [压缩笔记本]({{colab:infra-benchmark/kv-cache-compression}})在这个解码器的基础上更进一步：多头潜在注意力（MLA）、局部层与全局层、跨层共享的缓存、注意力汇聚点以及淘汰策略。

# %% [markdown] lang="en"
# **Exercise 1: GQA at 70B scale.** Llama 3 70B has 80 layers, 64 query heads, 8 K/V heads and $D_h = 128$
# (`config.json` of meta-llama/Meta-Llama-3-70B). In FP16, how many bytes does its cache need per token, how many
# it would need with one K/V head per query head, and how large is the cache of one 8,192-token context in each
# case?
#
# <details><summary>Show the answer</summary>
#
# Per token $2 \cdot 80 \cdot 8 \cdot 128 \cdot 2 = 327{,}680$ bytes, that is 320 KiB; with 64 K/V heads eight
# times as much, 2.5 MiB. One 8,192-token context: 2.5 GiB with GQA, 20 GiB with MHA. The next cell checks these
# numbers with `kv_bytes_per_token`.
#
# </details>

# %% [markdown] lang="zh"
# **练习 1：70B 规模的 GQA。** Llama 3 70B 有 80 层、64 个查询头、8 个 K/V 头，$D_h = 128$（取自 meta-llama/Meta-Llama-3-70B 的 `config.json`）。在 FP16 下，它的缓存每个 token 需要多少字节？如果每个查询头各有一个 K/V 头，又需要多少字节？在这两种情况下，一个 8,192 个 token 的上下文各需要多大的缓存？
#
# <details><summary>查看答案</summary>
#
# 每个 token 需要 $2 \cdot 80 \cdot 8 \cdot 128 \cdot 2 = 327{,}680$ 字节，即 320 KiB；有 64 个 K/V 头时是它的八倍，即 2.5 MiB。一个 8,192 个 token 的上下文：GQA 需要 2.5 GiB，MHA 需要 20 GiB。下一个单元格用 `kv_bytes_per_token` 核对这些数字。
#
# </details>

# %%
per_token_70b = {kv_heads: kv_bytes_per_token(80, kv_heads, 128, FP16) for kv_heads in (8, 64)}
assert per_token_70b == {8: 320 * KiB, 64: 2.5 * 2 ** 20}
assert {h: b * 8192 / GiB for h, b in per_token_70b.items()} == {8: 2.5, 64: 20.0}
say(en="Exercise 1 checked: 320 KiB and 2.5 MiB per token; 2.5 GiB and 20 GiB per 8,192-token context.",
    zh="练习 1 已核对：每个 token 分别为 320 KiB 和 2.5 MiB；每个 8,192 个 token 的上下文分别为 2.5 GiB 和 20 GiB。")

# %% [markdown] lang="en"
# **Exercise 2: where the ring puts a position.** With $W = 8$ the ring has 7 slots. After the model has read 100
# tokens (positions 0 to 99), which positions does the ring hold, and in which slot is position 99? Which keys does
# the query at position 100 read, and which position does it overwrite, in which slot?
#
# <details><summary>Show the answer</summary>
#
# The ring holds positions 93 to 99, the last $W - 1 = 7$; position 99 is in slot $99 \bmod 7 = 1$. The query at
# position 100 reads keys 93 to 100, eight keys: the seven in the ring and its own. Only then is position 100
# written, into slot $100 \bmod 7 = 2$, where position 93 was. The next cell feeds a `RingKV` 100 positions and
# then one more.
#
# </details>

# %% [markdown] lang="zh"
# **练习 2：环形缓冲区把位置放在哪里。** $W = 8$ 时，环形缓冲区有 7 个槽位。模型读入 100 个 token（位置 0–99）之后，环形缓冲区保存的是哪些位置？位置 99 在哪个槽位？位置 100 上的查询读取哪些键？它覆盖的是哪个位置，在哪个槽位？
#
# <details><summary>查看答案</summary>
#
# 环形缓冲区保存位置 93–99，即最后 $W - 1 = 7$ 个位置；位置 99 在第 $99 \bmod 7 = 1$ 个槽位。位置 100 上的查询读取键 93–100，共八个键：环形缓冲区中的七个，加上它自己。此后位置 100 才被写入第 $100 \bmod 7 = 2$ 个槽位，覆盖原先在那里的位置 93。下一个单元格先给一个 `RingKV` 送入 100 个位置，再送入一个。
#
# </details>

# %%
ring, kv = RingKV(WINDOW - 1), torch.zeros(1, 1, 100, 1)
ring.update(kv, kv, torch.arange(100))
held, slot_of_99 = ring.contents()[2].tolist(), ring.positions.tolist().index(99)
_, _, read_by_100 = ring.update(kv[:, :, :1], kv[:, :, :1], torch.tensor([100]))
assert held == list(range(93, 100)) and slot_of_99 == 1
assert read_by_100.tolist() == list(range(93, 101)) and ring.positions[2] == 100 and 93 not in ring.positions.tolist()
say(en="Exercise 2 checked: positions 93 to 99, position 99 in slot 1; the query at 100 reads keys 93 to 100; position 100 replaces 93 in slot 2.",
    zh="练习 2 已核对：保存位置 93–99，位置 99 在第 1 个槽位；位置 100 上的查询读取键 93–100；位置 100 写入第 2 个槽位，取代了位置 93。")

# %% [markdown] lang="en"
# **Exercise 3: what int4 really costs.** Take one K/V head with $D_h = 128$, the layout of section 7 with
# groups of $G = 32$ positions and FP16 scales and minimums, and a context so long that the full-precision window
# does not matter. How many bytes does one token cost, and what fraction is that of the 512 bytes of FP16 keys and
# values?
#
# <details><summary>Show the answer</summary>
#
# The codes: $128 \cdot 4 / 8 = 64$ bytes for K and 64 for V. K's scale and minimum are per channel and per group of
# 32 tokens, $128 \cdot 2 \cdot 2 / 32 = 16$ bytes per token; V's are per token, $2 \cdot 2 = 4$ bytes. In all 148
# bytes, 28.9% of 512: the scales add about 4 points to the quarter that 4-bit codes promise. The next cell asks
# section 7's `quant_bytes` for a context of 3,200 tokens with no full-precision window.
#
# </details>

# %% [markdown] lang="zh"
# **练习 3：int4 的真实开销。** 取一个 $D_h = 128$ 的 K/V 头，采用第 7 节的存储布局，每组 $G = 32$ 个位置，缩放因子和最小值用 FP16 保存；上下文足够长，全精度窗口可以忽略不计。一个 token 要花多少字节？它占 FP16 的 K 和 V 共 512 字节的百分之几？
#
# <details><summary>查看答案</summary>
#
# 编码：K 需要 $128 \cdot 4 / 8 = 64$ 字节，V 也是 64 字节。K 的缩放因子和最小值按通道、每 32 个 token 一组，折合每个 token $128 \cdot 2 \cdot 2 / 32 = 16$ 字节；V 的按 token 保存，每个 token $2 \cdot 2 = 4$ 字节。合计 148 字节，是 512 字节的 28.9%：4 比特编码本该只占四分之一，缩放因子又多占了大约 4 个百分点。下一个单元格用第 7 节的 `quant_bytes` 计算一个长 3,200 个 token、没有全精度窗口的上下文来核对。
#
# </details>

# %%
one_head = ArchConfig(width=128, heads=1, layers=1)
int4_per_token = quant_bytes(3200, 4, one_head, residual=0, group=32, scale_bytes=FP16) / 3200
assert int4_per_token == 148 and round(int4_per_token / kv_bytes_per_token(1, 1, 128, FP16), 3) == 0.289
say(en=f"Exercise 3 checked: {int4_per_token:.0f} bytes per token, {int4_per_token / 512:.1%} of FP16.",
    zh=f"练习 3 已核对：每个 token {int4_per_token:.0f} 字节，占 FP16 的 {int4_per_token / 512:.1%}。")
