# %% [markdown] lang="en"
# ## 12. Takeaways and exercises
#
# * **Padding** puts sequences of different lengths in one batch. Pad on the left, take each row's
#   positions from its attention mask (`cumsum - 1`), mask padding *keys* (not queries), and let a query
#   that sees no key read every key, or NaN spreads through V. Each row then equals its prompt run alone
#   (largest FP32 logit error {{run:takeaways.padding_err:.1e}}), and what sits in a padding slot changes
#   nothing, bit for bit.
# * **A static cache** writes K/V in place into one buffer per layer that never moves, and computes what
#   the `torch.cat` cache computes. Its point is fixed addresses and shapes: a CUDA graph replays a step
#   only if both stay fixed, and `torch.compile` compiles the step again when a shape changes. Fixed shapes
#   need a cache that reads its whole buffer under a mask, as Hugging Face's `StaticCache` does; ours reads
#   a growing prefix, so it fixes the addresses only. Its eager-mode timing is in the optional section 11.
# * **A paged cache** maps each sequence's logical blocks to physical blocks of a shared pool through a
#   block table. Reading is a gather, so it equals a contiguous cache bit for bit. Blocks return to the
#   pool and are reused. `fork` shares all of a sequence's blocks, partly filled ones included; a
#   sequence that writes into a block it still shares copies that block first (copy-on-write).
# * **Memory**, as the share of reserved K/V memory in use: on the simulated workload,
#   {{run:memory.used_contiguous_max:.1f}}% when reserving the maximum length,
#   {{run:memory.used_contiguous_final:.1f}}% when reserving the final length, {{run:memory.used_paged_16:.1f}}%
#   when paging with blocks of 16 positions; the vLLM paper measured 20.4%–38.2% for Orca and 96.3% for vLLM.
# * **Continuous batching** admits and retires requests at every iteration. On the same stream it needed
#   {{run:continuous.decode_steps}} decode steps where static batching needed {{run:static_batching.decode_steps}}
#   ({{run:continuous.tokens_per_decode_step:.2f}} against {{run:static_batching.tokens_per_decode_step:.2f}} tokens
#   per decode step), and every request's tokens were those it generates alone.
# * **Every check can fail.** All {{run:takeaways.controls}} negative controls of sections 4–8 were caught. Bit-for-bit
#   equality was asked only where it holds by construction (the same calls on the same inputs, gathers and
#   copies); everything else was compared within the tolerance of its dtype.
#
# The build writes what this run checked and measured (every variant's errors, every negative control and
# whether it was caught, the timings, the memory table, the batching trace) to `results.json` in
# `outputs/infra-benchmark/kv-cache-serving/`, described in `docs/kv-cache-serving-results-schema.md`;
# when you run the notebook, the figures land in `OUTPUT_DIR`.

# %% [markdown] lang="zh"
# ## 12. 要点与练习
#
# * **填充**让长度不同的序列进入同一个 batch。要在左边填充，从每行的注意力掩码推出位置（`cumsum - 1`），遮住的是填充位上的**键**而不是查询；一个键都看不到的查询要让它读取全部的键，否则 NaN 会经由 V 扩散开。这样每一行都等于它的提示单独运行的结果（FP32 下 logits 的最大绝对误差为 {{run:takeaways.padding_err:.1e}}），而且无论填充位里放什么，结果都逐比特相同。
# * **静态缓存**把 K/V 原地写入每层一个、从不移动的缓冲区，算出的结果与 `torch.cat` 缓存相同。它的意义在于固定的地址和形状：CUDA 图只有在两者都不变时才能重放一个解码步；`torch.compile` 则在形状改变时重新编译这一步。形状要固定，缓存就得像 Hugging Face 的 `StaticCache` 那样在掩码下读取整个缓冲区；我们的存储对象读取的是不断增长的前缀，所以只固定了地址。它在 eager 模式下的计时见可选的第 11 节。
# * **分页缓存**通过块表把每条序列的逻辑块映射到共享池中的物理块。读取只是收集，所以与连续缓存逐比特相同。物理块会归还到池中再被复用；`fork` 让新序列共享原序列的全部物理块，包括没填满的；序列要写入一个仍与别人共享的物理块时，先复制一份再写（写时复制）。
# * **内存**，按预留的 K/V 内存中正在使用的比例计：在模拟负载上，按最大长度预留为 {{run:memory.used_contiguous_max:.1f}}%，按最终长度预留为 {{run:memory.used_contiguous_final:.1f}}%，物理块大小为 16 的分页为 {{run:memory.used_paged_16:.1f}}%；vLLM 论文测得 Orca 为 20.4% 到 38.2%，vLLM 为 96.3%。
# * **连续批处理**在每次迭代都接纳新请求、让完成的请求退出。在同一个请求流上，它需要 {{run:continuous.decode_steps}} 个解码步，静态批处理需要 {{run:static_batching.decode_steps}} 个（每个解码步分别生成 {{run:continuous.tokens_per_decode_step:.2f}} 个和 {{run:static_batching.tokens_per_decode_step:.2f}} 个 token），而每个请求生成的 token 都与它单独运行时相同。
# * **每项检查都能失败**：第 4 到第 8 节的 {{run:takeaways.controls}} 个负对照全部被查出。只有在由构造保证成立的地方（同样的输入上的同样的调用、收集和复制）才要求逐比特相同；其余一律在该精度的容差内比较。
#
# 构建时会把本次运行检查和测量的内容（每种做法的误差、每个负对照及其是否被查出、计时、内存表、批处理的迭代记录）写入 `outputs/infra-benchmark/kv-cache-serving/` 下的 `results.json`，其结构见 `docs/kv-cache-serving-results-schema.md`；读者自己运行本笔记本时，各张图会保存在 `OUTPUT_DIR` 中。

# %% tags=["prose-values"]
{"takeaways": {"padding_err": float(PADDED["fp32"]["max_abs_logit_err"]),
               "controls": sum(c["detected"] for block in ("padding", "static", "paged") for c in RESULTS[block]["negative_controls"].values())}}

# %% [markdown] lang="en"
# **Exercises.** Each asks for a prediction; the cell after it computes the answer with this notebook's
# own classes and checks it. Work it out first, then open the solution.
#
# **1. Addresses in a block table.** A sequence has reserved 10 positions in a pool of blocks of 4
# positions; call its block table `[b0, b1, b2]`. (a) Which physical block and which slot hold position 6,
# and what is its address? (b) How many more positions can the sequence reserve before `reserve` takes
# a block from the free list? (c) How many of its reserved slots hold no token?
#
# <details><summary>Show the solution</summary>
#
# (a) Position 6 is in logical block $\lfloor 6 / 4 \rfloor = 1$, slot $6 \bmod 4 = 2$: physical block `b1`,
# address `4 * b1 + 2`. (b) Two: the last block holds positions 8 and 9 and has room for 10 and 11; position 12
# needs a fourth block. (c) Two, the free slots of the last block: never more than `block_size - 1`.
#
# </details>

# %% [markdown] lang="zh"
# **练习**：每道题都先请你做出预测；题后的单元格用本笔记本自己的类算出答案并加以核对。先自己算一算，再打开答案。
#
# **1. 块表中的地址**：一条序列在物理块大小为 4 的池中预留了 10 个位置，记它的块表为 `[b0, b1, b2]`。(a) 位置 6 存放在哪个物理块的哪个槽位？它的地址是多少？(b) 在 `reserve` 从空闲列表中取新的物理块之前，这条序列还能再预留几个位置？(c) 它预留的槽位中有几个没有存放 token？
#
# <details><summary>查看答案</summary>
#
# (a) 位置 6 在逻辑块 $\lfloor 6 / 4 \rfloor = 1$ 中，槽位为 $6 \bmod 4 = 2$：即物理块 `b1`，地址为 `4 * b1 + 2`。(b) 两个：最后一个物理块存放位置 8 和 9，还能放下 10 和 11；位置 12 需要第四个物理块。(c) 两个，即最后一个物理块中空着的槽位：永远不会超过 `block_size - 1` 个。
#
# </details>

# %%
exercise_pool = BlockPool(cfg, num_blocks=8, block_size=4, seed=SEED + 9)
exercise = PagedCache(exercise_pool)
exercise.add("x")
exercise.reserve("x", 10)
b0, b1, b2 = exercise.tables["x"]
unused_slots = len(exercise.tables["x"]) * exercise_pool.block_size - exercise.length("x")
position_6 = int(exercise.addresses("x")[6])
free_before = len(exercise_pool.free)
exercise.reserve("x", 2)
room_without_new_block = free_before - len(exercise_pool.free)
exercise.reserve("x", 1)
say(en=f"Block table `{[b0, b1, b2]}`: position 6 at address `{position_6} = 4 * {b1} + 2`; {unused_slots} reserved slots empty; "
       f"2 more positions took {room_without_new_block} new blocks, the next one took {free_before - len(exercise_pool.free)}.",
    zh=f"块表为 `{[b0, b1, b2]}`：位置 6 的地址为 `{position_6} = 4 * {b1} + 2`；预留的槽位中有 {unused_slots} 个空着；"
       f"再预留 2 个位置用了 {room_without_new_block} 个新物理块，再下一个位置用了 {free_before - len(exercise_pool.free)} 个。")
assert (position_6, unused_slots, room_without_new_block, free_before - len(exercise_pool.free)) == (4 * b1 + 2, 2, 0, 1)

# %% [markdown] lang="en"
# **2. Parallel sampling.** A request's prompt of 10 tokens is prefilled as sequence `p`, with blocks of 4
# positions. Three samples `s1`, `s2`, `s3` fork from `p`, and `p` is freed. Then each sample appends one
# token, `s1` first, then `s2`, then `s3`. How many blocks are in use before the appends, and after? Which
# sample writes into the prompt's last block in place? How many blocks would three separate copies of the
# prompt, each with its one new token, need?
#
# <details><summary>Show the solution</summary>
#
# Before: 3 blocks (4 + 4 + 2 positions), each held by the three samples. `s1` finds the half-filled third
# block shared (reference count 3) and copies it; `s2` finds it still shared (count 2) and copies it too;
# `s3` is then its only holder and writes in place. After: the 2 full blocks, still shared by all three,
# plus one third block for each sample, 5 in all. Three separate copies would need
# $3 \cdot \lceil 11 / 4 \rceil = 9$.
#
# </details>

# %% [markdown] lang="zh"
# **2. 并行采样**：一个请求的提示有 10 个 token，作为序列 `p` 预填充，物理块大小为 4。三个候选序列（样本）`s1`、`s2`、`s3` 从 `p` 分叉出来，然后释放 `p`。接着每个样本各追加一个 token，先 `s1`，再 `s2`，最后 `s3`。追加之前使用中的物理块有几个？追加之后呢？哪个样本直接原地写入提示的最后一个物理块？如果给三个样本各复制一份提示（各自再加一个新 token），需要多少个物理块？
#
# <details><summary>查看答案</summary>
#
# 追加之前：3 个物理块（分别存放 4、4、2 个位置），每个都由三个样本共同持有。`s1` 发现半满的第三个物理块是共享的（引用计数为 3），于是复制它；`s2` 发现它仍是共享的（引用计数为 2），也复制了一份；这时 `s3` 成了它唯一的持有者，直接原地写入。追加之后：两个填满的物理块仍由三个样本共享，再加上每个样本各自的第三个物理块（共 3 个），总共 5 个。三份独立的副本则需要 $3 \cdot \lceil 11 / 4 \rceil = 9$ 个。
#
# </details>

# %%
sampling = PagedCache(BlockPool(cfg, num_blocks=16, block_size=4, seed=SEED + 10))
sampling.add("p")
sampling.reserve("p", 10)
prompt_last_block = sampling.tables["p"][-1]
for sample in ("s1", "s2", "s3"):
    sampling.fork("p", sample)
sampling.free("p")
in_use_before = sampling.pool.used()
for sample in ("s1", "s2", "s3"):
    sampling.reserve(sample, 1)
in_place = [sample for sample in ("s1", "s2", "s3") if sampling.tables[sample][-1] == prompt_last_block]
# [en] Three separate copies: each sample reserves its own 10 + 1 positions.
# [zh] 三份独立的副本：每个样本各自预留 10 + 1 个位置。
separate = PagedCache(BlockPool(cfg, num_blocks=16, block_size=4, seed=SEED + 10))
for sample in ("s1", "s2", "s3"):
    separate.add(sample)
    separate.reserve(sample, 11)
say(en=f"Blocks in use: {in_use_before} before the appends, {sampling.pool.used()} after; written in place by {', '.join(f'`{s}`' for s in in_place)}; "
       f"three separate copies: {separate.pool.used()} blocks.",
    zh=f"使用中的物理块：追加之前 {in_use_before} 个，追加之后 {sampling.pool.used()} 个；原地写入的样本：{'、'.join(f'`{s}`' for s in in_place)}；"
       f"三份独立的副本：{separate.pool.used()} 个物理块。")
assert (in_use_before, sampling.pool.used(), in_place, separate.pool.used()) == (3, 5, ["s3"], 9)

# %% [markdown] lang="en"
# **3. A pool for a real model.** Llama 3.1 8B has 32 layers and 8 K/V heads of 128 dimensions, stored in
# BF16 (2 bytes), and a context of up to 131,072 positions. (a) How many bytes of K/V does one token take
# (use `kv_bytes_per_token`), and one block of 16 positions? (b) A server gives the pool 16 GiB. How many
# blocks is that? (c) Requests of 1,000 positions each (prompt plus output): how many fit at once if each
# reserves a contiguous region for the model's full context? If the server caps the context at 8,192
# positions (vLLM's `max_model_len`)? And if each request holds blocks of 16 positions?
#
# <details><summary>Show the solution</summary>
#
# (a) $2 \cdot 32 \cdot 8 \cdot 128 \cdot 2 = 131{,}072$ bytes (128 KiB) per token, 2 MiB per block.
# (b) $16\ \text{GiB} / 2\ \text{MiB} = 8{,}192$ blocks. (c) Full context: each request reserves
# $131{,}072 \cdot 128\ \text{KiB} = 16\ \text{GiB}$, the whole pool, so a single request fits. Capped at
# 8,192 positions: $8{,}192 \cdot 128\ \text{KiB} = 1\ \text{GiB}$ each, so 16 requests fit. Paged: each
# request needs $\lceil 1{,}000 / 16 \rceil = 63$ blocks, so $\lfloor 8{,}192 / 63 \rfloor = 130$ requests
# fit, eight times as many as with the cap, and 130 times as many as with the full context.
#
# </details>

# %% [markdown] lang="zh"
# **3. 为真实模型配置的池**：Llama 3.1 8B 有 32 层，8 个 K/V 头，每头 128 维，以 BF16（2 字节）存储，上下文最长 131,072 个位置。(a) 一个 token 的 K/V 占多少字节（用 `kv_bytes_per_token` 计算）？一个含 16 个位置的物理块呢？(b) 服务器给池分配了 16 GiB，这是多少个物理块？(c) 每个请求共 1,000 个位置（提示加输出）：如果每个请求都按模型的完整上下文预留一段连续内存，同时能容纳多少个请求？如果服务器把上下文限制在 8,192 个位置（vLLM 的 `max_model_len`）呢？如果改为分页、物理块大小为 16，又能容纳多少个？
#
# <details><summary>查看答案</summary>
#
# (a) 每个 token $2 \cdot 32 \cdot 8 \cdot 128 \cdot 2 = 131{,}072$ 字节（128 KiB），每个物理块 2 MiB。(b) $16\ \text{GiB} / 2\ \text{MiB} = 8{,}192$ 个物理块。(c) 按完整上下文预留：每个请求预留 $131{,}072 \cdot 128\ \text{KiB} = 16\ \text{GiB}$，占满整个池，所以只能容纳 1 个请求。上下文限制在 8,192 个位置时：每个请求预留 $8{,}192 \cdot 128\ \text{KiB} = 1\ \text{GiB}$，能容纳 16 个请求。分页：每个请求需要 $\lceil 1{,}000 / 16 \rceil = 63$ 个物理块，所以能容纳 $\lfloor 8{,}192 / 63 \rfloor = 130$ 个请求，是限制上下文时的八倍多，是按完整上下文预留时的 130 倍。
#
# </details>

# %%
# [en] 32 layers, 8 K/V heads, 128 dimensions, 2 bytes (BF16); a context of 131,072 positions, or 8,192 if capped.
# [zh] 32 层，8 个 K/V 头，每头 128 维，每个元素 2 字节（BF16）；上下文 131,072 个位置，限制后为 8,192 个。
llama_token = kv_bytes_per_token(32, 8, 128, 2)
llama_block = 16 * llama_token
llama_blocks = 16 * 2**30 // llama_block
full_context_fit = 16 * 2**30 // (131_072 * llama_token)
capped_fit = 16 * 2**30 // (8192 * llama_token)
paged_fit = llama_blocks // math.ceil(1000 / 16)
say(en=f"{llama_token:,} bytes per token, {llama_block // 2**20} MiB per block, {llama_blocks:,} blocks; requests that fit: "
       f"{full_context_fit} with the full context reserved, {capped_fit} with the context capped at 8,192, {paged_fit} paged.",
    zh=f"每个 token {llama_token:,} 字节，每个物理块 {llama_block // 2**20} MiB，共 {llama_blocks:,} 个物理块；能容纳的请求数："
       f"按完整上下文预留时 {full_context_fit} 个，上下文限制在 8,192 个位置时 {capped_fit} 个，分页时 {paged_fit} 个。")
assert (llama_token, llama_blocks, full_context_fit, capped_fit, paged_fit) == (131_072, 8_192, 1, 16, 130)
