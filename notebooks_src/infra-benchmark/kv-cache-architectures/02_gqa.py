# %% [markdown] lang="en"
# ## 4. Grouped-query and multi-query attention
#
# In the decoder of section 3 every one of the $H = 4$ heads projects its own keys and values, so the
# cache holds $H$ K/V heads per layer. Grouped-query attention (GQA; Ainslie et al., 2023) keeps all $H$ query heads but only
# $H_{kv}$ K/V heads, each shared by a group of $g = H / H_{kv}$ consecutive query heads: query head $h$
# reads K/V head $\lfloor h / g \rfloor$. Multi-query attention (MQA; Shazeer, 2019) is the extreme case $H_{kv} = 1$,
# and $H_{kv} = H$ is ordinary multi-head attention (MHA). The K and V projections shrink to
# $H_{kv} D_h$ outputs, and so does the cache: each layer keeps `[B, H_kv, T, D_h]`, a factor $g$ less
# than MHA. Llama 3 8B, for one, has 32 query heads and 8 K/V heads.
#
# The section has two parts:
#
# * **4.1** builds a generalized decoder next to the first notebook's, one option per design change (later
#   sections reuse it), and the check every exact variant must pass. **Skip on a first read** what serves only
#   later parts: the configuration's RoPE, RMSNorm, gated-MLP and bias fields (the Llama-shaped model of section
#   5, which also shows the rotation `Rotary`), and the `caches` argument of `new_cache` and the helper `distinct`
#   (the compression notebook's layers that share a cache). In this section they change nothing.
# * **4.2** proves GQA and MQA by four criteria: (1) with $H_{kv} = H$ the decoder is section 3's; (2) with
#   $H_{kv} = 2$ and $1$ the cached path equals full recomputation; (3) the cache holds $H_{kv}$ heads, as the
#   payload formula says; (4) query head $h$ reads K/V head $\lfloor h / g \rfloor$, checked head by head.
#
# ### 4.1 The decoder we vary, and its check
#
# First the functions every attention layer shares.

# %% [markdown] lang="zh"
# ## 4. 分组查询注意力与多查询注意力
#
# 在第 3 节的解码器里，$H = 4$ 个头各自投影出自己的 K 和 V，所以每层缓存中有 $H$ 个 K/V 头。分组查询注意力（GQA；Ainslie 等人，2023）保留全部 $H$ 个查询头，但只有 $H_{kv}$ 个 K/V 头，每 $g = H / H_{kv}$ 个相邻的查询头组成一组，共用一个 K/V 头：查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头。多查询注意力（MQA；Shazeer，2019）是 $H_{kv} = 1$ 的极端情形，$H_{kv} = H$ 则是普通的多头注意力（MHA）。K 和 V 的投影输出缩小到 $H_{kv} D_h$ 维，缓存也随之缩小：每层保存 `[B, H_kv, T, D_h]`，只有 MHA 的 $1/g$。以 Llama 3 8B 为例，它有 32 个查询头、8 个 K/V 头。
#
# 本节分两部分：
#
# * **4.1** 在第一份笔记本的解码器旁边另建一个通用的解码器，每种设计改动对应一个选项（后面各节都沿用它），并给出每个精确变体都必须通过的检查。**初读时可以略过**只为后文准备的部分：配置中的 RoPE、RMSNorm、门控 MLP 和偏置这几个字段（供第 5 节的 Llama 结构模型使用，旋转 `Rotary` 的代码也在第 5 节给出），以及 `new_cache` 的参数 `caches` 和辅助函数 `distinct`（供压缩笔记本中共享缓存的层使用）。它们在本节不起任何作用。
# * **4.2** 用四条判据证明我们实现的 GQA 和 MQA 是正确的：(1) $H_{kv} = H$ 时，这个解码器就是第 3 节的解码器；(2) $H_{kv} = 2$ 和 $1$ 时，缓存路径与完整重算一致；(3) 缓存中保存的是 $H_{kv}$ 个头，与数据量公式相符；(4) 查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头，逐头检查。
#
# ### 4.1 要改动的解码器及其检查
#
# 先看每个注意力层都要用到的几个函数。
