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
# Rather than edit the first notebook's decoder, we build a generalized one next to it, with one small
# option per design change, and prove each option as it comes. This section needs only the number of K/V
# heads; the later sections reuse the same decoder. First the functions every attention layer shares.

# %% [markdown] lang="zh"
# ## 4. 分组查询注意力与多查询注意力
#
# 在第 3 节的解码器里，$H = 4$ 个头各自投影出自己的 K 和 V，所以每层缓存中有 $H$ 个 K/V 头。分组查询注意力（GQA；Ainslie 等人，2023）保留全部 $H$ 个查询头，但只有 $H_{kv}$ 个 K/V 头，每 $g = H / H_{kv}$ 个相邻的查询头组成一组，共用一个 K/V 头：查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头。多查询注意力（MQA；Shazeer，2019）是 $H_{kv} = 1$ 的极端情形，$H_{kv} = H$ 则是普通的多头注意力（MHA）。K 和 V 的投影输出缩小到 $H_{kv} D_h$ 维，缓存也随之缩小：每层保存 `[B, H_kv, T, D_h]`，只有 MHA 的 $1/g$。以 Llama 3 8B 为例，它有 32 个查询头、8 个 K/V 头。
#
# 我们不改动第一份笔记本的解码器，而是在它旁边另建一个通用的版本：每种设计改动对应一个小选项，每个选项引入时就给出证明。本节只用到 K/V 头数，后面各节沿用同一个解码器。先看每个注意力层都要用到的几个函数。
