# %% [markdown] lang="en"
# ## 7. Split-K decoding
#
# In a decode step each sequence has a single query per head, and it reads the whole cache. A GPU kernel
# that gives each (sequence, head) pair to one group of threads leaves most of the GPU idle when the batch
# is small and the cache long: a few groups walk through thousands of keys while the rest wait. By section 8's
# count decode is memory-bound, and a GPU reaches its full memory bandwidth only when many of its cores read
# at once; splitting one query's keys among many cores is what lets a long cache stream at that bandwidth.
# **Flash-Decoding** ([Dao, Haziza, Massa and Sizov, 2023](https://crfm.stanford.edu/2023/10/12/flashdecoding.html), a blog post) splits the keys of one query into $S$ **splits**, computes each split's
# attention in parallel, and merges the partial results. The merge must reproduce the softmax over *all*
# keys, although each split normalized over its own keys only. Each split reports three things about its
# scores $x_j$: the maximum $m_s$, the sum $l_s = \sum_{j \in s} e^{x_j - m_s}$, and its normalized output
# $o_s = \sum_{j \in s} e^{x_j - m_s} v_j / l_s$. Since $l_s e^{m_s} = \sum_{j \in s} e^{x_j}$ is the split's share
# of the softmax denominator,
#
# $$\mathrm{out} = \frac{\sum_s w_s\, o_s}{\sum_s w_s}, \qquad w_s = l_s\, e^{m_s - M}, \quad M = \max_s m_s.$$
#
# Subtracting $M$ keeps the exponentials from overflowing; the factor
# $e^{m_s - M}$ is the **rescaling** that makes splits with different maxima comparable. A split whose keys are all masked (padding, or slots past the end of a
# sequence) has no maximum: its weight must be 0 and its output must not be $0/0$.
#
# <details><summary>How FlashAttention and Flash-Decoding carry these numbers (optional)</summary>
#
# FlashAttention's inner loop (in both its first and second versions) keeps $m$ and $l$ as two running numbers while it walks over blocks of keys,
# rescaling its partial output whenever $m$ grows. FlashAttention-1 stored $m$ and $l$ for the backward pass; FlashAttention-2 stores one
# number per query instead, the log-sum-exp $\mathrm{LSE} = m + \log l$, and that is also what each split of
# Flash-Decoding emits next to its output: $e^{\mathrm{LSE}_s - \max_s \mathrm{LSE}_s}$ is the weight $w_s$ above up
# to a factor common to all splits.
#
# </details>

# %% [markdown] lang="zh"
# ## 7. split-K 解码
#
# 在一个解码步里，每条序列的每个头只有一个查询，而它要读取整个缓存。如果 GPU 内核把每个（序列，头）对交给一组线程，那么在 batch 小、缓存长的时候，GPU 的大部分都闲着：少数几组线程逐个走过成千上万个键，其余的都在等待。按第 8 节的计数，解码受限于内存带宽，而 GPU 只有在许多核心同时读取时才能达到全部内存带宽；把一个查询面对的键分给许多核心，长缓存才能以这个带宽读完。Dao、Haziza、Massa 和 Sizov 在 2023 年的一篇[博客文章](https://crfm.stanford.edu/2023/10/12/flashdecoding.html)中提出的 **Flash-Decoding** 把一个查询面对的键分成 $S$ **段**，并行地计算每一段的注意力，再把部分结果合并起来。合并必须还原出对**全部**键做的 softmax，尽管每一段只在自己的键上做了归一化。每一段就自己的分数 $x_j$ 报告三样东西：最大值 $m_s$、指数和 $l_s = \sum_{j \in s} e^{x_j - m_s}$，以及归一化后的输出 $o_s = \sum_{j \in s} e^{x_j - m_s} v_j / l_s$。由于 $l_s e^{m_s} = \sum_{j \in s} e^{x_j}$ 正是这一段在 softmax 分母中所占的部分，
#
# $$\mathrm{out} = \frac{\sum_s w_s\, o_s}{\sum_s w_s}, \qquad w_s = l_s\, e^{m_s - M}, \quad M = \max_s m_s.$$
#
# 减去 $M$ 是为了防止指数溢出；因子 $e^{m_s - M}$ 就是让最大值不同的各段可以相互比较的**重新缩放**。如果某一段的键全部被掩码遮住（填充，或序列末尾之后的槽位），它就没有最大值：它的权重必须为 0，它的输出也不能是 $0/0$。
#
# <details><summary>FlashAttention 和 Flash-Decoding 如何传递这些数（可选）</summary>
#
# FlashAttention 的内层循环（第一版和第二版都是如此）逐段遍历键时，把 $m$ 和 $l$ 作为两个滚动更新的数分开保存，每当 $m$ 变大，就重新缩放已累积的部分输出。FlashAttention-1 为反向传播保存 $m$ 和 $l$ 两个数；FlashAttention-2 则改为每个查询只保存一个数，即指数和的对数（log-sum-exp，LSE）$\mathrm{LSE} = m + \log l$；Flash-Decoding 的每一段在输出之外给出的也是它：$e^{\mathrm{LSE}_s - \max_s \mathrm{LSE}_s}$ 与上面的权重 $w_s$ 只差一个各段共有的因子。
#
# </details>

# %%
# [en] One split: its normalized output, its maximum score and its sum (q: [..., 1, Dh]; k, v: [..., n, Dh]).
# [zh] 一段：归一化后的输出、最大分数和指数和（q：[..., 1, Dh]；k、v：[..., n, Dh]）。
def attend_split(q, k, v, allowed):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))   # [..., 1, n]
    m = scores.amax(dim=-1, keepdim=True)                                                              # [..., 1, 1]
    # [en] A fully masked split has no maximum (-inf): shift by 0 instead, which gives exp(-inf) = 0 everywhere.
    # [zh] 全部被遮住的一段没有最大值（-inf）：改为平移 0，这样处处得到 exp(-inf) = 0。
    p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    l = p.sum(dim=-1, keepdim=True)
    return (p @ v) / torch.where(l > 0, l, torch.ones_like(l)), m, l                                   # o: [..., 1, Dh]


def merge_splits(outputs, maxima, sums):
    o, m, l = torch.stack(outputs), torch.stack(maxima), torch.stack(sums)                             # [S, ..., 1, Dh|1]
    w = l * torch.exp(m - m.amax(dim=0))
    return (w * o).sum(dim=0) / w.sum(dim=0)


def split_k_attention(q, k, v, allowed, num_splits, merge=merge_splits):
    parts = [attend_split(q, k_s, v_s, a_s) for k_s, v_s, a_s in
             zip(k.tensor_split(num_splits, dim=-2), v.tensor_split(num_splits, dim=-2), allowed.tensor_split(num_splits, dim=-1))]
    return merge(*zip(*parts))


# %% [markdown] lang="en"
# **The criterion.** One query per head against a cache of {{run:splitk.keys:,}} keys, for two sequences: the
# second is left-padded with {{run:splitk.padding}} masked slots, so that with many splits the first ones are
# entirely masked. For $S$ from 1 (no split at all) to one key per split, split-K must equal plain attention
# within the tolerance, in FP32 and in FP64 (plain attention is `masked_attention` of section 2). The data first:
# random queries, keys and values in FP64, and the mask of the padded sequence.

# %% [markdown] lang="zh"
# **判据**：两条序列的每个头都只有一个查询，面对一个含 {{run:splitk.keys:,}} 个键的缓存；第二条序列左侧有 {{run:splitk.padding}} 个被遮住的填充位，所以段数多时，前面几段会完全被遮住。段数 $S$ 从 1（根本不切分）一直到每段一个键，split-K 都必须在容差内等于普通注意力（第 2 节的 `masked_attention`），FP32 和 FP64 都要满足。先准备数据：FP64 的随机查询、键和值，以及带填充的那条序列的掩码。

# %%
SPLIT_KEYS, SPLIT_PADDING, SPLIT_PROMPT = 1000, 300, 400
SPLIT_COUNTS = (1, 2, 3, 4, 8, 16, 64, SPLIT_KEYS)
gen = torch.Generator().manual_seed(SEED + 30)
split_q, split_k, split_v = (torch.randn(2, cfg.heads, n, cfg.head_dim, generator=gen, dtype=torch.float64) for n in (1, SPLIT_KEYS, SPLIT_KEYS))
split_allowed = torch.ones(2, 1, 1, SPLIT_KEYS, dtype=torch.bool)
split_allowed[1, ..., :SPLIT_PADDING] = False

# %% [markdown] lang="en"
# **Inside our decoder.** The table also runs the same code on real data: layer 0's cache after a
# {{run:splitk.prompt}}-token prompt and the query of the next token, compared with the output of the decoder's own
# `SelfAttention` for that token. `in_layer` applies the layer's output projection to a merged result.

# %% [markdown] lang="zh"
# **放进我们的解码器**：表中还有一列，用真实数据运行同一段代码：取第 0 层在一个 {{run:splitk.prompt}} 个 token 的提示之后的缓存，以及下一个 token 的查询，与解码器自己的 `SelfAttention` 对这个 token 的输出比较。`in_layer` 把这一层的输出投影作用在合并结果上。

# %%
with torch.inference_mode():
    # [en] Layer 0 of our decoder at position SPLIT_PROMPT: its cache, the new token's query, its own output.
    # [zh] 我们的解码器第 0 层在位置 SPLIT_PROMPT 处：它的缓存、新 token 的查询，以及它自己的输出。
    ids = torch.randint(0, cfg.vocab, (1, SPLIT_PROMPT + 1), generator=gen)
    _, prompt_cache = model(ids[:, :-1])
    attn, h = model.blocks[0].attn, model.blocks[0].ln_1(model.wte(ids[:, -1:]) + model.wpe(torch.tensor([SPLIT_PROMPT])))
    layer_output, (layer_k, layer_v) = attn(h, causal_mask(SPLIT_PROMPT, 1), prompt_cache[0])         # [1, 1, W]; [1, H, P + 1, Dh]
    layer_q = attn.split_heads(attn.q(h))                                                              # [1, H, 1, Dh]


def in_layer(context):                                                                                 # [1, H, 1, Dh] -> [1, 1, W]
    return attn.proj(context.transpose(1, 2).reshape(1, 1, cfg.width))

# %% [markdown] lang="en"
# `split_k_row` computes one row of the table for $S$ splits: the number of fully masked splits, the error
# against plain attention in FP32 and in FP64, and the error inside layer 0 (there with no more splits than
# keys, since that cache is shorter). Its `merge` argument lets the control below swap in another merge.

# %% [markdown] lang="zh"
# `split_k_row` 计算表中 $S$ 段对应的一行：完全被遮住的段数，FP32 和 FP64 下与普通注意力相比的误差，以及第 0 层中的误差（那里的缓存更短，所以段数不超过键数）。它的参数 `merge` 让下面的负对照换用另一种合并方式。

# %%
@torch.inference_mode()
def split_k_row(num_splits, merge=merge_splits) -> dict:
    row = {"splits": num_splits, "fully_masked": sum(not a.any() for a in split_allowed[1].tensor_split(num_splits, dim=-1))}
    for dtype in TOLERANCE:
        q, k, v = (t.to(dtype) for t in (split_q, split_k, split_v))
        ours, reference = split_k_attention(q, k, v, split_allowed, num_splits, merge), masked_attention(q, k, v, split_allowed)
        row[DTYPE_NAME[dtype]] = {"max_abs_err": max_abs_err(ours, reference), "close": close(ours, reference)}
    # [en] The layer's cache is shorter than SPLIT_KEYS: no more splits than keys, so at least one key per split there.
    # [zh] 这一层的缓存比 SPLIT_KEYS 短：段数不超过键数，所以在那里每段至少一个键。
    layer_splits = min(num_splits, layer_k.shape[-2])
    layer = in_layer(split_k_attention(layer_q, layer_k, layer_v, torch.ones(1, 1, 1, layer_k.shape[-2], dtype=torch.bool), layer_splits, merge))
    row["decoder"] = {"max_abs_err": max_abs_err(layer, layer_output), "close": close(layer, layer_output)}
    return row

# %% [markdown] lang="en"
# **Negative control: merging without rescaling.** `merge_without_rescaling` weights each split by its sum
# $l_s$ alone, forgetting $e^{m_s - M}$. It is right only when every split has the same maximum, as with a
# single split.

# %% [markdown] lang="zh"
# **负对照：合并时不做重新缩放**。`merge_without_rescaling` 只用指数和 $l_s$ 给每一段加权，漏掉了 $e^{m_s - M}$。只有各段的最大值都相同时（例如只有一段时），它才是对的。

# %%
def merge_without_rescaling(outputs, maxima, sums):
    # [en] WRONG on purpose: the sums of splits with different maxima are added as if comparable.
    # [zh] 故意写错：把最大值不同的各段的指数和当作可比的直接相加。
    o, l = torch.stack(outputs), torch.stack(sums)
    return (l * o).sum(dim=0) / l.sum(dim=0)

# %% [markdown] lang="en"
# **The sweep**: every $S$, with the correct merge and with the control. The checks: the correct merge is within
# the tolerance everywhere and some split is fully masked; the control passes with one split and is caught
# with every larger $S$.

# %% [markdown] lang="zh"
# **扫描**：每个 $S$ 都用正确的合并和负对照各算一遍。检查的内容是：正确的合并处处都在容差之内，且至少有一段完全被遮住；负对照只有一段时能通过，段数更多时每次都被查出。

# %%
SPLIT_K = [split_k_row(n) for n in SPLIT_COUNTS]
SPLIT_K_CONTROL = [split_k_row(n, merge_without_rescaling) for n in SPLIT_COUNTS]
say_table([[f"{r['splits']:,}", str(r["fully_masked"])] + [f"{r[name]['max_abs_err']:.1e}" for name in ("fp32", "fp64", "decoder")]
           + [f"{c['fp32']['max_abs_err']:.1e}"] for r, c in zip(SPLIT_K, SPLIT_K_CONTROL)],
          en=["splits S", "fully masked splits", "max abs error, fp32", "max abs error, fp64", "max abs error in layer 0 (fp32)",
              "without rescaling (fp32)"],
          zh=["段数 $S$", "完全被遮住的段数", "最大绝对误差（FP32）", "最大绝对误差（FP64）", "第 0 层中的最大绝对误差（FP32）",
              "不做重新缩放（FP32）"])
assert all(r[name]["close"] for r in SPLIT_K for name in ("fp32", "fp64", "decoder")) and max(r["fully_masked"] for r in SPLIT_K) > 0
SPLIT_K_CAUGHT = {r["splits"]: not all(r[name]["close"] for name in ("fp32", "fp64", "decoder")) for r in SPLIT_K_CONTROL}
assert not SPLIT_K_CAUGHT[1] and all(SPLIT_K_CAUGHT[n] for n in SPLIT_COUNTS if n > 1)

# %% [markdown] lang="en"
# With one split, split-K *is* plain attention computed by another route, and so is the control, which is
# why it passes there. From two splits on, the control is off: by {{run:splitk.control_err_s2:.2f}} at $S = 2$, and
# by {{run:splitk.control_err_min:.2f}} to {{run:splitk.control_err_max:.2f}} for more splits, while
# the correct merge stays within {{run:splitk.max_err_fp32:.1e}} in FP32 and {{run:splitk.max_err_fp64:.1e}} in FP64
# for every $S$, fully masked splits included. Each split needs only its own keys, so the splits can be
# computed by different workers at the same time; a second, small step merges them, which is what a GPU
# kernel does. On our one CPU
# thread there is nothing to run in parallel, so this notebook checks split-K's exactness only, not its speed.

# %% [markdown] lang="zh"
# 只有一段时，split-K **就是**换了一条路计算的普通注意力，负对照也一样，所以它在这种情况下能通过。从两段起，负对照就出错了：$S = 2$ 时最大绝对误差为 {{run:splitk.control_err_s2:.2f}}，段数更多时在 {{run:splitk.control_err_min:.2f}} 到 {{run:splitk.control_err_max:.2f}} 之间；而正确的合并对每个 $S$（包括有完全被遮住的段时）都保持在 FP32 下 {{run:splitk.max_err_fp32:.1e}}、FP64 下 {{run:splitk.max_err_fp64:.1e}} 以内。每一段只需要自己的键，所以各段可以同时交给不同的工作单元计算，再用一个很小的步骤把它们合并起来：GPU 内核正是这样做的。我们只用一个 CPU 线程，没有什么可以并行，所以本笔记本只检验 split-K 是否精确，不测它的速度。
