# %% [markdown] lang="en"
# ## 4. A Llama-shaped decoder with one cache object per layer
#
# The decoder of section 3 is GPT-2-shaped: learned positions, LayerNorm, a GELU MLP. The models whose caches
# this notebook studies (DeepSeek-V3, Gemma, Ministral) are shaped like Llama instead: RMSNorm, a gated SiLU
# MLP, rotary position embeddings (RoPE), no biases, and grouped-query attention. We build that decoder once
# here, with the same sizes as section 3 (width 64, 4 query heads of 16 dimensions, vocabulary 97, MLP width
# 256), and every later section only swaps its attention layers.
#
# One design choice makes that possible. Each attention layer owns a **cache object** with one method,
# `update(k, v, positions)`: it stores what the layer hands it and returns everything the new queries may
# read, together with the absolute position of every returned key. The decoder does not know what a cache
# keeps; it asks each attention layer for a new cache (`new_cache`), and a layer may even answer with the cache
# of a layer below it (section 6). Every key carries its position, so masks are computed from positions, as
# section 2 derived them.
#
# The configuration extends section 3's `DecoderConfig` with the number of K/V heads, the RoPE base and the
# RMSNorm epsilon (1e-6, DeepSeek-V3's value).

# %% [markdown] lang="zh"
# ## 4. 每层一个缓存对象的 Llama 结构解码器
#
# 第 3 节的解码器是 GPT-2 的结构：可学习的位置嵌入、LayerNorm、GELU MLP。而本笔记本研究其缓存的那些模型（DeepSeek-V3、Gemma、Ministral）都采用 Llama 的结构：RMSNorm、带门控的 SiLU MLP、旋转位置编码（RoPE）、不带偏置，以及分组查询注意力。我们在这里把这种解码器搭建一次，尺寸与第 3 节相同（宽度 64，4 个查询头、每头 16 维，词表大小 97，MLP 宽度 256），后面各节只替换其中的注意力层。
#
# 做到这一点靠的是一个设计：每个注意力层拥有一个**缓存对象**，它只有一个方法 `update(k, v, positions)`：存下注意力层交给它的内容，返回新查询可以读取的全部内容，以及每个返回的键的绝对位置。解码器并不知道缓存保留了什么；它请每个注意力层创建一个新缓存（`new_cache`），某一层甚至可以拿它下面某一层的缓存来充当自己的缓存（第 6 节）。每个键都带着自己的位置，所以掩码由位置算出，正如第 2 节推导的那样。
#
# 配置在第 3 节 `DecoderConfig` 的基础上增加了 K/V 头数、RoPE 的底数和 RMSNorm 的 epsilon（取 DeepSeek-V3 的 1e-6）。

# %%
@dataclass
class ModelConfig(DecoderConfig):
    # [en] K/V heads per layer (GQA: 2 K/V heads for 4 query heads).
    # [zh] 每层的 K/V 头数（GQA：4 个查询头共用 2 个 K/V 头）。
    kv_heads: int = 2
    rope_theta: float = 10000.0
    eps: float = 1e-6


llama_cfg = ModelConfig()
print(llama_cfg)
