# %% [markdown] lang="en"
# ## 2. A Llama-shaped decoder with one cache object per layer
#
# > *Mostly a shared section:* most of its code comes from the
# > [architectures notebook]({{colab:infra-benchmark/kv-cache-architectures}}), where it is taught, and is folded here.
# > If you have read that notebook, skim the configuration and the negative control at the end, then go on to section 3.
#
# Three facts from the [first notebook]({{colab:infra-benchmark/kv-cache}}) carry everything below. Every layer
# caches its own keys and values, because it projects them from its own input. A chunk of $C$ new tokens that
# follows $P$ cached ones sits at positions $P, \dots, P + C - 1$: numbering continues where the cache ends. And the
# query at position $P + i$ may read key $j$ exactly when $j \le P + i$ (the offset causal mask; the upper-left
# triangle, which forgets the offset, is the classic bug).
#
# The models whose caches this notebook studies are *roughly* Llama-shaped: RMSNorm, a gated MLP, rotary position
# embeddings (RoPE), no biases. Roughly, because each departs from Llama in parts that our caches do not depend on:
# Gemma's gated MLP uses GELU where Llama uses SiLU, and DeepSeek-V3
# replaces grouped-query attention with MLA (section 3) and most of its MLPs with a mixture of experts. The
# architectures notebook proved this decoder against full recomputation and Hugging Face's Llama and Mistral. Every
# model here is built with `LLAMA_SHAPE` (the configuration below), and the later sections only add attention layers
# of their own.
#
# One design choice makes that possible. Each attention layer owns a **cache object** with one method,
# `update(k, v, positions)`, and the decoder does not know what a cache keeps: it asks each attention layer for
# a new cache (`new_cache`), and a layer may even answer with the cache of a layer below it (section 5). Every
# key carries its position, so masks are computed from positions.

# %% [markdown] lang="zh"
# ## 2. 每层一个缓存对象的 Llama 结构解码器
#
# > *本节大部分是共用内容：* 大部分代码取自[架构笔记本]({{colab:infra-benchmark/kv-cache-architectures}})，讲解在那里，这里把代码折叠了起来。如果已经读过那份笔记本，只需浏览本节末尾的配置和负对照，然后进入第 3 节。
#
# 下文的一切都建立在[第一份笔记本]({{colab:infra-benchmark/kv-cache}})的三个事实之上。每一层都缓存自己的键和值，因为它是从自己的输入投影出键和值的。跟在 $P$ 个已缓存 token 之后的 $C$ 个新 token 位于位置 $P, \dots, P + C - 1$：编号紧接在缓存末尾之后。位于位置 $P + i$ 的查询可以读取键 $j$，当且仅当 $j \le P + i$（带偏移的因果掩码；漏掉偏移的左上角三角形是最经典的错误）。
#
# 本笔记本所研究的这些模型，结构**大致**与 Llama 相同：RMSNorm、带门控的 MLP、旋转位置编码（RoPE）、不带偏置。说“大致”，是因为它们各自在缓存不依赖的部分与 Llama 不同：Gemma 带门控的 MLP 用的是 GELU，而 Llama 用的是 SiLU；DeepSeek-V3 用 MLA（第 3 节）取代了分组查询注意力，并把大部分 MLP 换成了混合专家（MoE）。架构笔记本已用完整重算以及 Hugging Face 的 Llama 和 Mistral 验证了这个解码器。这里的每个模型都用 `LLAMA_SHAPE` 构建（配置见本节下文），后面各节只添加它们自己的注意力层。
#
# 做到这一点靠的是一个设计：每个注意力层拥有一个**缓存对象**，它只有一个方法 `update(k, v, positions)`；解码器并不知道缓存保留了什么。它请每个注意力层创建一个新缓存（`new_cache`），某一层甚至可以拿它下面某一层的缓存来充当自己的缓存（第 5 节）。每个键都带着自己的位置，所以掩码由位置算出。
