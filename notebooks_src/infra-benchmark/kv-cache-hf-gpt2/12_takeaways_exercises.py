# %% [markdown] lang="en"
# ## 11. Takeaways and exercises
#
# - **An outside referee agrees with our decoder.** With our weights, `GPT2LMHeadModel` computes the same
#   logits, with and without the cache, and caches the same K and V in every layer: the largest
#   difference was {{run:takeaways.worst_error:.1e}}, at FP64 rounding level.
# - **The mapping is where the mistakes are.** `nn.Linear` stores `[out, in]`, GPT-2's `Conv1D`
#   `[in, out]`, and GPT-2's `c_attn` holds Q, K and V in one matrix. A missing weight, or a missing
#   transpose that changes a shape, is refused at loading; tied embeddings, a square matrix left
#   untransposed and the wrong GELU load silently, and only the comparison catches them.
# - **Per-layer errors say where a mistake sits**: a mistake that acts after a layer has produced its
#   keys and values leaves that layer's cache right and shows up in the next layer's.
# - **The tolerance decides what a comparison can see.** The wrong GELU changed the logits by only
#   {{run:takeaways.gelu_error:.1e}}: far above FP64 rounding; in FP32 it is caught, but its largest error
#   is only {{run:gelu.fp32_margin:.0f}} times the FP32 tolerance. With `mlp.fc` scaled by 0.1, so that the activation inputs shrink, its FP32
#   error, {{run:gelu.fp32_small_trap:.1e}}, passes the FP32 tolerance. Compare in FP64 when a small
#   systematic difference matters.
# - **The library's cache is an object updated in place.** Reuse a prefix by taking a deep copy first,
#   or cut the cache back with `crop(-n)`, which is what assisted (speculative) decoding does with
#   rejected draft tokens. Our list of tensors needs neither.
# - **Same arithmetic, different overhead.** Both decode steps do the same
#   {{run:profile.matmul_flops:,}} matrix-product FLOPs; the library's step makes
#   {{run:profile.gpt2_python:,}} function calls against our {{run:profile.ours_python:,}}, and on the
#   machine that built this notebook its time was {{run:race.ratio:.2f}} times ours. Spread over the extra calls, the time difference is
#   {{run:profile.us_per_call:.1f}} µs per call (an average, not a measured cost: section 10); it says nothing
#   about speed at real sizes.
#
# **Versions and saved results.** The notebook was written against transformers 5.23.0, the version this
# repository pins; sections 4, 7 and 8 also ran unchanged with 4.57.1 and 5.0.0. It calls `crop` only as
# `crop(-n)`: 5.23.0 refuses a positive argument, the older "length to keep" form (`DynamicLayer.crop` in
# `transformers/cache_utils.py`). The build writes `results.json` (the errors, the traps, the GELU study,
# the cache reuse, the timing and the profile; its keys are documented in
# `docs/kv-cache-hf-gpt2-results-schema.md`) to `outputs/infra-benchmark/kv-cache-hf-gpt2/`; a reader who
# runs the notebook finds the figures in `OUTPUT_DIR`.

# %% [markdown] lang="zh"
# ## 11. 要点与练习
#
# - **外部裁判与我们的解码器一致。** 装入我们的权重后，`GPT2LMHeadModel` 无论用不用缓存都算出相同的 logits，每一层缓存的 K 和 V 也相同：最大绝对误差为 {{run:takeaways.worst_error:.1e}}，处于 FP64 舍入误差的水平。
# - **错误出在映射上。** `nn.Linear` 存的是 `[out, in]`，GPT-2 的 `Conv1D` 存的是 `[in, out]`，GPT-2 的 `c_attn` 还把 Q、K、V 放在同一个矩阵里。缺了某个权重，或者漏了转置而导致形状不符，加载时就会被拒绝；共享嵌入权重、方阵漏了转置、用错了 GELU，加载时都一声不响，只有比较才能查出来。
# - **逐层的误差能指出错误所在的位置**：在某一层算出 K 和 V 之后才起作用的错误，不影响这一层的缓存，要到下一层的缓存才显现出来。
# - **容差决定了比较能看见什么。** 用错 GELU 只让 logits 偏离了 {{run:takeaways.gelu_error:.1e}}：远高于 FP64 的舍入误差；FP32 下也能查出，但误差只是 FP32 容差的 {{run:gelu.fp32_margin:.0f}} 倍。把 `mlp.fc` 乘以 0.1、让激活函数的输入变小之后，它在 FP32 下的误差 {{run:gelu.fp32_small_trap:.1e}} 就通过了 FP32 的容差。要分辨微小的系统性差异，就在 FP64 下比较。
# - **库的缓存是一个被原地更新的对象。** 要复用某个前缀，先做一份深拷贝；或者用 `crop(-n)` 把缓存截短，辅助生成（投机解码）正是这样丢掉被拒绝的草稿 token 的。我们的张量列表两种办法都用不着。
# - **运算相同，开销不同。** 两个模型的一个解码步都做了 {{run:profile.matmul_flops:,}} 次矩阵乘法浮点运算；库的一个解码步要调用 {{run:profile.gpt2_python:,}} 次函数，我们的只有 {{run:profile.ours_python:,}} 次；在构建本笔记本的机器上，库的耗时是我们的 {{run:race.ratio:.2f}} 倍。把耗时之差平摊到多出来的调用上，每次调用约 {{run:profile.us_per_call:.1f}} 微秒（这是平均值，不是实测的开销，见第 10 节）；它说明不了实际规模下的速度。
#
# **版本与保存的结果。** 本笔记本是按本仓库锁定的 transformers 5.23.0 编写的；第 4、7、8 节也在 4.57.1 和 5.0.0 上原样运行过。它只以 `crop(-n)` 的形式调用 `crop`：5.23.0 会拒绝正数参数，也就是旧的“保留长度”写法（见 `transformers/cache_utils.py` 中的 `DynamicLayer.crop`）。构建时把 `results.json`（误差、陷阱、GELU 实验、缓存复用、计时与性能分析；各字段见 `docs/kv-cache-hf-gpt2-results-schema.md`）写入 `outputs/infra-benchmark/kv-cache-hf-gpt2/`；读者自己运行本笔记本时，会在 `OUTPUT_DIR` 中找到各张图。

# %% tags=["prose-values"]
{"takeaways": {"worst_error": worst_error(peer_errors),
               "gelu_error": worst_logit_error(trap_errors["gelu_new"])}} if HAVE_TRANSFORMERS else {}

# %% [markdown] lang="en"
# **Exercise 1: a fourth trap.** Suppose the Q and K matrices were swapped when building `c_attn`:
# `torch.cat([k, q, v])` instead of `torch.cat([q, k, v])`, in both layers. Does it load? Which columns
# of section 7's table go wrong, and is layer 0's cached V still right?
#
# <details><summary>Show the answer</summary>
#
# It loads: the shapes are unchanged. GPT-2 then computes its keys with our query matrix, so layer 0's
# cached K is wrong at once, while layer 0's V, computed by the unchanged third block, is right. The
# attention scores become $k_i \cdot q_j$ instead of $q_i \cdot k_j$, so the layer's output, layer 1's
# K and V and the logits are all wrong. The next cell builds this mapping and compares it on the first
# 64 positions of section 4's sequences.
#
# </details>

# %% [markdown] lang="zh"
# **练习 1：第四个陷阱。** 假设在构造 `c_attn` 时把 Q 和 K 的矩阵顺序弄反了：两层都写成了 `torch.cat([k, q, v])`，而不是 `torch.cat([q, k, v])`。它能加载吗？第 7 节表格中的哪些列会出错？第 0 层缓存的 V 还对吗？
#
# <details><summary>查看答案</summary>
#
# 能加载：形状没有变。这时 GPT-2 用我们的查询矩阵来计算键，所以第 0 层缓存的 K 立刻就错了；而第 0 层的 V 由没有改动的第三部分算出，仍然正确。注意力分数变成了 $k_i \cdot q_j$，而不是 $q_i \cdot k_j$，所以这一层的输出、第 1 层的 K 和 V 以及 logits 全都错了。下一个单元格构造这种映射，并在第 4 节序列的前 64 个位置上做比较。
#
# </details>

# %%
if HAVE_TRANSFORMERS:
    swapped = gpt2_state_dict(ours64)
    for i, block in enumerate(ours64.blocks):
        attn = block.attn
        swapped[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat([attn.k.weight, attn.q.weight, attn.v.weight]).T.detach().clone()
        swapped[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat([attn.k.bias, attn.q.bias, attn.v.bias]).detach().clone()
    swap_errors = compare_with_gpt2(ours64, build_gpt2(ours64, state_dict=swapped), peer_ids[:, :64], [40, 1, 23])
    error_table({"q_k_swapped": swap_errors})
    right = TOLERANCE[torch.float64]
    assert (swap_errors["k"][0] > right, swap_errors["v"][0] <= right, min(swap_errors["k"][1], swap_errors["v"][1]) > right,
            worst_logit_error(swap_errors) > right) == (True, True, True, True)
    say(en="Exercise 1 checked: the swapped mapping loads; layer 0's K is wrong and its V right; layer 1 and the "
           "logits are wrong.",
        zh="练习 1 已核对：弄反顺序的映射能加载；第 0 层的 K 出错而 V 正确；第 1 层和 logits 都出错。")

# %% [markdown] lang="en"
# **Exercise 2: roll back rejected draft tokens.** In one round of assisted generation, the cache holds
# a 20-token prefix when a draft model proposes 5 tokens. GPT-2 checks all 5 in one call and accepts
# only the first 2. Which `crop` call prepares the cache for the next round, and how many positions does
# the cache hold afterwards? What must the next call give?
#
# <details><summary>Show the answer</summary>
#
# `crop(-3)`: it removes the 3 rejected positions and leaves $20 + 2 = 22$. The next call then sees
# exactly the cache of a 22-token prefix, so its logits must agree within $10^{-10}$ with those of one
# full call over the 22 tokens plus the new one, whatever that token is (in assisted decoding it is the
# token GPT-2 itself chose in place of the first rejected one). The next cell replays the round with an
# arbitrary token.
#
# </details>

# %% [markdown] lang="zh"
# **练习 2：回滚被拒绝的草稿 token。** 在辅助生成的某一轮中，缓存里已有 20 个 token 的前缀，这时草稿模型提出 5 个 token。GPT-2 在一次调用中把这 5 个 token 全部验证一遍，只接受了前 2 个。应当怎样调用 `crop`，才能让缓存为下一轮做好准备？之后缓存里有多少个位置？下一次调用必须给出什么结果？
#
# <details><summary>查看答案</summary>
#
# 调用 `crop(-3)`：它去掉 3 个被拒绝的位置，留下 $20 + 2 = 22$ 个。这样，下一次调用看到的恰好是 22 个 token 的前缀所对应的缓存，所以无论新 token 是哪一个，它的 logits 都必须与对这 22 个 token 加上新 token 做一次完整调用的结果在 $10^{-10}$ 以内一致（在辅助生成中，这个新 token 是 GPT-2 自己选出、用来替换第一个被拒绝 token 的那个）。下一个单元格用一个任意的 token 重演这一轮。
#
# </details>

# %%
if HAVE_TRANSFORMERS:
    # [en] Indices 0-19: the prefix; 20-24: the 5 drafts; 25: the next token (any token would do), fed at position 22.
    # [zh] 下标 0–19 是前缀，20–24 是 5 个草稿 token，25 是下一个 token（任取一个即可），它将送入位置 22。
    round_ids = peer_ids[:1, :26]                                  # [1, 26]
    with torch.inference_mode():
        draft_cache = DynamicCache(config=gpt2_64.config)
        gpt2_64(input_ids=round_ids[:, :20], past_key_values=draft_cache, use_cache=True)
        gpt2_64(input_ids=round_ids[:, 20:25], past_key_values=draft_cache, use_cache=True)
        draft_cache.crop(-3)
        kept = draft_cache.get_seq_length()
        after_rollback = gpt2_64(input_ids=round_ids[:, 25:26], past_key_values=draft_cache, use_cache=True).logits
        one_call = gpt2_64(input_ids=torch.cat([round_ids[:, :22], round_ids[:, 25:26]], dim=1)).logits[:, -1:]
    assert kept == 22 and max_abs_err(after_rollback, one_call) <= TOLERANCE[torch.float64]
    say(en=f"Exercise 2 checked: after `crop(-3)` the cache held 22 positions, and the next token's logits match "
           f"one full call (largest difference {max_abs_err(after_rollback, one_call):.1e}).",
        zh=f"练习 2 已核对：执行 `crop(-3)` 之后缓存里有 22 个位置，下一个 token 的 logits 与一次完整调用的结果一致"
           f"（最大绝对误差 {max_abs_err(after_rollback, one_call):.1e}）。")

# %% [markdown] lang="en"
# **Exercise 3: how large is the cache?** Section 10's race prefilled a 256-token prompt into a
# `DynamicCache`. How many bytes do its keys and values hold, in FP32? And how many bytes per token
# would the cache of the released GPT-2 small take (12 layers, 12 heads of 64 dimensions) in FP16,
# and for a full context of 1,024 tokens?
#
# <details><summary>Show the answer</summary>
#
# Per token, the cache holds one K and one V vector per layer and head:
# $2 \cdot L \cdot H \cdot D_h \cdot s$ bytes, the formula of `kv_bytes_per_token`. For our decoder in FP32,
# $2 \cdot 2 \cdot 4 \cdot 16 \cdot 4 = 1{,}024$ bytes per token, so 262,144 bytes (256 KiB) for 256
# tokens. For GPT-2 small in FP16, $2 \cdot 12 \cdot 12 \cdot 64 \cdot 2 = 36{,}864$ bytes per token, and
# 37,748,736 bytes (36 MiB) for 1,024 tokens. The next cell counts the bytes of the race's cache
# tensors and compares them with the formula.
#
# </details>

# %% [markdown] lang="zh"
# **练习 3：缓存有多大？** 第 10 节的比赛把 256 个 token 的提示预填充进了一个 `DynamicCache`。在 FP32 下，它的键和值共占多少字节？公开发布的最小的 GPT-2（124M；12 层，12 个头，每头 64 维）在 FP16 下，每个 token 的缓存占多少字节？整个 1,024 个 token 的上下文又占多少？
#
# <details><summary>查看答案</summary>
#
# 每个 token 在每一层、每个头上各缓存一个 K 向量和一个 V 向量：共 $2 \cdot L \cdot H \cdot D_h \cdot s$ 字节，也就是 `kv_bytes_per_token` 的公式。我们的解码器在 FP32 下每个 token 占 $2 \cdot 2 \cdot 4 \cdot 16 \cdot 4 = 1{,}024$ 字节，256 个 token 共 262,144 字节（256 KiB）。最小的 GPT-2（124M）在 FP16 下每个 token 占 $2 \cdot 12 \cdot 12 \cdot 64 \cdot 2 = 36{,}864$ 字节，1,024 个 token 共 37,748,736 字节（36 MiB）。下一个单元格统计比赛所用缓存中各张量的字节数，并与公式比较。
#
# </details>

# %%
if HAVE_TRANSFORMERS:
    race_cache_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in gpt2_prefix.layers)
    ours_per_token = kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, 4)
    gpt2_small_per_token = kv_bytes_per_token(12, 12, 64, 2)
    assert race_cache_bytes == PEER_PROMPT * ours_per_token == 262_144
    assert (gpt2_small_per_token, 1024 * gpt2_small_per_token) == (36_864, 37_748_736)
    say(en=f"Exercise 3 checked: {race_cache_bytes:,} bytes in the race's cache, {ours_per_token:,} per token; GPT-2 small "
           f"in FP16 needs {gpt2_small_per_token:,} bytes per token, {1024 * gpt2_small_per_token / 2**20:.0f} MiB "
           f"for 1,024 tokens.",
        zh=f"练习 3 已核对：比赛所用的缓存共 {race_cache_bytes:,} 字节，每个 token {ours_per_token:,} 字节；最小的 GPT-2（124M）"
           f"在 FP16 下每个 token 需要 {gpt2_small_per_token:,} 字节，1,024 个 token 共 {1024 * gpt2_small_per_token / 2**20:.0f} MiB。")
