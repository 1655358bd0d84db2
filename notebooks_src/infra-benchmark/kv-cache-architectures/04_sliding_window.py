# %% [markdown] lang="en"
# ## 6. Sliding-window attention
#
# With a sliding window of $W$ positions (Mistral 7B v0.1 uses $W = 4{,}096$), a query reads only itself and the
# $W - 1$ positions before it. In the notation of section 2, query $i$ of a chunk at absolute position
# $P + i$ reads key $j$ when
#
# $$P + i - W < j \le P + i,$$
#
# a band below the diagonal instead of the whole lower triangle. That is the definition Hugging Face's
# `MistralForCausalLM` implements (its mask is `kv_idx > q_idx - sliding_window`). The Mistral 7B paper words it
# differently: position $i$ attends to the positions "between $i - W$ and $i$" of the layer below, which read
# inclusively is $W + 1$ keys. Both are called "a window of 4,096", and they differ by one key. An off-by-one
# between a paper and its most used implementation is exactly the mistake a cache check must be able to see,
# so the first negative control below widens the window by one key.
#
# The band changes what a cache must keep. Once a call has consumed positions up to $p$, the next query sits
# at $p + 1$ or later and can never read position $p - W + 1$ or anything older. So the last $W - 1$ positions
# are all a cache needs, however long the sequence (Hugging Face's `DynamicSlidingWindowLayer` keeps the same
# $W - 1$ positions).

# %% [markdown] lang="zh"
# ## 6. 滑动窗口注意力
#
# 采用 $W$ 个位置的滑动窗口时（Mistral 7B v0.1 取 $W = 4{,}096$），每个查询只读取它自己和前面的 $W - 1$ 个位置。沿用第 2 节的记号，分块中的第 $i$ 个查询位于绝对位置 $P + i$，它能读取键 $j$ 的条件是
#
# $$P + i - W < j \le P + i,$$
#
# 也就是对角线下方的一条带，而不是整个下三角。Hugging Face 的 `MistralForCausalLM` 实现的就是这个定义（它的掩码是 `kv_idx > q_idx - sliding_window`）。Mistral 7B 论文的说法却不一样：位置 $i$ 关注下一层中“从 $i - W$ 到 $i$ 之间”的位置，如果两端都算在内，就是 $W + 1$ 个键。两者都叫“4,096 的窗口”，却差了一个键。论文与它最常用的实现之间差一，正是缓存检查必须能够发现的错误，所以下面的第一个负对照把窗口放宽一个键。
#
# 这条带改变了缓存需要保留的内容。一次调用处理完位置 $p$ 之后，下一个查询位于 $p + 1$ 或更靠后的位置，再也读不到位置 $p - W + 1$ 及更早的位置。因此，无论序列多长，缓存只需保留最后 $W - 1$ 个位置（Hugging Face 的 `DynamicSlidingWindowLayer` 保留的也是这 $W - 1$ 个位置）。
