# %% [markdown] lang="en"
# ## 4. A Llama-shaped decoder with one cache object per layer
#
# The decoder of section 3 is GPT-2-shaped: learned positions, LayerNorm, a GELU MLP. The models whose caches
# this notebook studies (DeepSeek-V3, Gemma, Ministral) are shaped like Llama instead: RMSNorm, a gated SiLU
# MLP, rotary position embeddings (RoPE), no biases, and grouped-query attention. The
# [architectures notebook]({{colab:infra-benchmark/kv-cache-architectures}}) built that decoder from section 3's,
# one design change at a time, and proved it against full recomputation and against Hugging Face's Llama and
# Mistral. This section includes its cells unchanged: the attention functions, the layer cache, the rotary
# embedding, the decoder and the check every exact variant must pass. The later sections only add attention
# layers of their own.
#
# One design choice makes that possible. Each attention layer owns a **cache object** with one method,
# `update(k, v, positions)`, and the decoder does not know what a cache keeps: it asks each attention layer for
# a new cache (`new_cache`), and a layer may even answer with the cache of a layer below it (section 6). Every
# key carries its position, so masks are computed from positions, as section 2 derived them.

# %% [markdown] lang="zh"
# ## 4. 每层一个缓存对象的 Llama 结构解码器
#
# 第 3 节的解码器是 GPT-2 的结构：可学习的位置嵌入、LayerNorm、GELU MLP。而本笔记本研究其缓存的那些模型（DeepSeek-V3、Gemma、Ministral）都采用 Llama 的结构：RMSNorm、带门控的 SiLU MLP、旋转位置编码（RoPE）、不带偏置，以及分组查询注意力。[架构笔记本]({{colab:infra-benchmark/kv-cache-architectures}})从第 3 节的解码器出发，一次改动一处，搭建了这种解码器，并用完整重算以及 Hugging Face 的 Llama 和 Mistral 证明了它。本节原样包含那份笔记本的单元格：注意力函数、单层缓存、旋转位置编码、解码器，以及每种精确变体都必须通过的检查。后面各节只添加它们自己的注意力层。
#
# 做到这一点靠的是一个设计：每个注意力层拥有一个**缓存对象**，它只有一个方法 `update(k, v, positions)`；解码器并不知道缓存保留了什么。它请每个注意力层创建一个新缓存（`new_cache`），某一层甚至可以拿它下面某一层的缓存来充当自己的缓存（第 6 节）。每个键都带着自己的位置，所以掩码由位置算出，正如第 2 节推导的那样。
