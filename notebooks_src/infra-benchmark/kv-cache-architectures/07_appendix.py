# %% [markdown] lang="en"
# ## Appendix (optional): two rounding findings
#
# Two rounding effects behind choices made above; the main text does not depend on them.
#
# **A. Why criterion 1 of section 4 asks for a tolerance.** Section 3's decoder and `Decoder` run the same
# operations in the same order, but hand the kernel keys in different memory layouts, and the logits may differ
# in their last bits. Here is that rounding difference on the product itself:
# `q @ k.T` for a batch of 2, with `k` a transposed view of a projection (as section 3's decoder passes it on a
# call with no cache; once `torch.cat` has joined a cache, its keys are contiguous) and with its contiguous copy (as `repeat_interleave` passes it), for every length from 1 to 24. The two
# hold the same values in different layouts. On the machine that ran this notebook,
# {{run:gqa.layout_lengths_differing}} of the 24 lengths rounded differently, by up to
# {{run:gqa.layout_max_diff:.1e}}; every length agrees within the tolerance. Asserting bit-for-bit equality
# here would assert a property of the machine, not of the code.

# %% [markdown] lang="zh"
# ## 附录（可选）：两处舍入现象
#
# 上文有些做法源于下面两种舍入现象；正文并不依赖它们。
#
# **A. 第 4 节的判据 1 为什么要用容差。** 第 3 节的解码器和 `Decoder` 按相同的顺序执行相同的运算，但交给内核的键内存布局不同，logits 可能在最后几个比特上不同。下面直接在乘积上展示这种舍入差异：batch 为 2 的 `q @ k.T`，`k` 分别取投影结果转置后的视图（第 3 节的解码器在没有缓存的调用中就这样传递；一旦 `torch.cat` 拼接了缓存，它的键就是连续存储的）和它的连续副本（`repeat_interleave` 传递的就是副本），长度从 1 取到 24。两者的数值相同，只是内存布局不同。在运行本笔记本的机器上，24 个长度中有 {{run:gqa.layout_lengths_differing}} 个的舍入结果不同，最大绝对误差为 {{run:gqa.layout_max_diff:.1e}}；每个长度上两者都在容差内一致。如果在这里断言逐比特相同，断言的其实是机器的性质，而不是代码的性质。

# %% tags=["hide-input"]
def by_view_and_by_copy(length: int):
    # [en] q @ k.T with k a transposed view of a projection, and with its contiguous copy.
    # [zh] q @ k.T：k 分别取投影结果转置后的视图和它的连续副本。
    gen = torch.Generator().manual_seed(SEED + length)
    q, k = (torch.randn(2, length, cfg.heads, cfg.head_dim, generator=gen).transpose(1, 2) for _ in range(2))   # [2, H, T, D]
    return q @ k.transpose(-2, -1), q @ k.contiguous().transpose(-2, -1)


def runs(values: list[int]) -> list[tuple[int, int]]:
    # [en] Consecutive integers grouped: [5, 6, 7, 9] -> [(5, 7), (9, 9)].
    # [zh] 把连续的整数归为一段：[5, 6, 7, 9] -> [(5, 7), (9, 9)]。
    spans = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], v)
        else:
            spans.append((v, v))
    return spans


with torch.inference_mode():
    LAYOUT_PAIRS = {length: by_view_and_by_copy(length) for length in range(1, STREAM_LEN + 1)}
LAYOUT_DIFF = {length: max_abs_err(*pair) for length, pair in LAYOUT_PAIRS.items()}
LAYOUT = {"lengths_differing": [t for t, d in LAYOUT_DIFF.items() if d > 0], "max_abs_diff": max(LAYOUT_DIFF.values())}
DIFFERING = runs(LAYOUT["lengths_differing"])
say(en=f"`q @ k.T` by view and by copy, lengths 1 to {STREAM_LEN}, on this machine: "
       + (f"rounded differently at lengths {', '.join(str(a) if a == b else f'{a} to {b}' for a, b in DIFFERING)}"
          if DIFFERING else "bit-identical at every length")
       + f" (largest difference {LAYOUT['max_abs_diff']:.1e}).",
    zh=f"`k` 取视图和取连续副本时的 `q @ k.T`，长度 1 到 {STREAM_LEN}，在这台机器上："
       + (f"长度为 {'、'.join(str(a) if a == b else f'{a} 到 {b}' for a, b in DIFFERING)} 时两者的舍入结果不同"
          if DIFFERING else "每个长度上两者都逐比特相同")
       + f"（最大绝对误差 {LAYOUT['max_abs_diff']:.1e}）。")
assert all(close(*pair) for pair in LAYOUT_PAIRS.values())

# %% tags=["prose-values"]
{"gqa": {"layout_lengths_differing": len(LAYOUT["lengths_differing"]), "layout_max_diff": float(LAYOUT["max_abs_diff"])}}


# %% [markdown] lang="en"
# **B. Which of Hugging Face's FP32 steps matter (section 5.1).** Even after `.double()`, Hugging Face's Llama
# computes its RMSNorms and its rotary angles in FP32 (`.to(torch.float32)` in `LlamaRMSNorm.forward`, `.float()`
# in `LlamaRotaryEmbedding.forward`). The cell adds these two steps to our FP64 model, each alone and then both, and
# compares a full call with the referee: only with both does the difference fall below $10^{-10}$, which is why section 5.1
# compares the referee with `with_hf_precision`. The FP32 norms also explain how section 5.1's match can be bit for
# bit although our explicit softmax and Hugging Face's SDPA differ on the same FP64 inputs (the cell measures
# by how much): everything that reads the residual stream (the next layer's projections, hence its cache, and
# `lm_head`) reads it through an RMSNorm, which rounds its input to FP32 here and so can erase differences that small.

# %% [markdown] lang="zh"
# **B. Hugging Face 的哪几个 FP32 步骤起作用（第 5.1 节）。** 即使调用了 `.double()`，Hugging Face 的 Llama 仍在 FP32 下计算 RMSNorm 和旋转角（`LlamaRMSNorm.forward` 中的 `.to(torch.float32)`，`LlamaRotaryEmbedding.forward` 中的 `.float()`）。下面的单元格先把这两步分别加进我们的 FP64 模型，再把两步一起加进去，每次都与裁判比较一次完整调用：只有两步都复现时，最大绝对误差才降到 $10^{-10}$ 以下。这就是第 5.1 节拿 `with_hf_precision` 与裁判比较的原因。FP32 的 RMSNorm 也解释了第 5.1 节的结果为什么可能逐比特相同，尽管在同一组 FP64 输入上，我们的显式 softmax 与 Hugging Face 的 SDPA 结果并不相同（相差多少由下面的单元格测出）：凡是读取残差流的部分（下一层的各个投影及其缓存，以及 `lm_head`）都要先经过 RMSNorm，而这里每个 RMSNorm 都先把输入舍入到 FP32，这么小的差异就可能被抹掉。

# %%
LLAMA_FP32_STEPS = None
if HAVE_HF:
    steps_model = build(LLAMA_CFG).double()
    steps_referee = hf_llama(steps_model)
    with torch.inference_mode():
        LLAMA_FP32_STEPS = {" + ".join(steps) or "none": max_abs_err(with_hf_precision(steps_model, steps)(STREAM)[0],
                                                                      steps_referee(input_ids=STREAM).logits)
                            for steps in ((), ("angles",), ("norms",), ("angles", "norms"))}
    say_table([["–" if steps == "none" else f"`{steps}`", f"{error:.1e}"] for steps, error in LLAMA_FP32_STEPS.items()],
              en=["steps in FP32", "full call: max abs logit error against Hugging Face's Llama (FP64)"],
              zh=["改用 FP32 的步骤", "完整调用：与 Hugging Face Llama 之间 logits 的最大绝对误差（FP64）"])
    assert LLAMA_FP32_STEPS["angles + norms"] < 1e-10 < min(LLAMA_FP32_STEPS[steps] for steps in ("none", "angles", "norms"))
    # [en] Our explicit softmax against SDPA on the same random FP64 inputs: [2, H, 24, D_h] queries, [2, H_kv, 24, D_h] K/V.
    # [zh] 在同一组随机 FP64 输入上比较我们的显式 softmax 与 SDPA：查询形状 [2, H, 24, D_h]，K/V 形状 [2, H_kv, 24, D_h]。
    gen = torch.Generator().manual_seed(SEED)
    q64, k64, v64 = (torch.randn(2, heads, STREAM_LEN, LLAMA_CFG.head_dim, generator=gen, dtype=torch.float64)
                     for heads in (LLAMA_CFG.heads, LLAMA_CFG.n_kv, LLAMA_CFG.n_kv))
    allowed64 = causal(torch.arange(STREAM_LEN), torch.arange(STREAM_LEN))
    ATTENTION_GAP = max_abs_err(softmax_attention(q64, k64, v64, allowed64),
                                F.scaled_dot_product_attention(q64, k64, v64, attn_mask=allowed64, enable_gqa=True))
    say(en=f"The two attentions alone differ by {ATTENTION_GAP:.0e} on the same FP64 inputs; section 5.1's referee "
           + ("matched bit for bit." if llama_err == 0 else f"differed by {llama_err:.0e}."),
        zh=f"单看注意力，两种实现在同一组 FP64 输入上相差 {ATTENTION_GAP:.0e}；"
           + ("而第 5.1 节与裁判比较的结果逐比特相同。" if llama_err == 0 else f"而第 5.1 节与裁判比较，相差 {llama_err:.0e}。"))
else:
    say(en=f"Appendix B is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"附录 B 已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
