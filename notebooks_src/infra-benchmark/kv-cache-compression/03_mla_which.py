# %% [markdown] lang="en"
# ### 4.1 Which form, when
#
# The absorbed form's attention does $H(2r + d_R)$ multiply-adds per cached key and decode step
# and reads $r + d_R$ numbers, if one kernel reads each latent once for both products (section 4): {{run:mla.absorbed_flop_per_byte:.0f}} FLOP per byte in BF16 for DeepSeek-V3, counting
# attention only (the layer's projections, paid once per token rather than per cached key, are left out), close to
# the ridge point of an NVIDIA H100 ({{run:mla.h100_ridge:.0f}} FLOP per byte: 989 TFLOP/s of dense BF16 over
# 3.35 TB/s, from its datasheet), where a kernel stops waiting for memory and starts waiting for arithmetic (the
# [reuse notebook]({{colab:infra-benchmark/kv-cache-reuse}}) measures this roofline on its machine, section 9). The
# naive form's attention sits at {{run:mla.naive_flop_per_byte:.0f}} FLOP per byte, deep in the memory-bound region.
# Prefill is different: every key meets many queries, the expansion of a key ($r \cdot H(d_C + d_v)$ multiply-adds)
# is paid once and shared by all of them, and what counts is the work per (query, key) pair, $H(d_C + d_R + d_v)$
# multiply-adds with expanded keys and values against $H(2r + d_R)$ absorbed, {{run:mla.absorbed_vs_naive_macs:.1f}}
# times as many. So serving systems prefill with the expanded form and decode with the absorbed one; vLLM's MLA backend
# says so in its docstring (a "compute friendly" path for prefill, a "data-movement friendly" one for decode), at the
# top of `vllm/v1/attention/backends/mla/common.py`, in recent versions
# `vllm/model_executor/layers/attention/mla_attention.py`.

# %% [markdown] lang="zh"
# ### 4.1 什么时候用哪种形式
#
# 吸收形式的注意力对每个缓存的键、每个解码步做 $H(2r + d_R)$ 次乘加，读取 $r + d_R$ 个数（前提是由一个内核把每个潜向量读一次、同时用于两次乘法，见第 4 节）：对 DeepSeek-V3，在 BF16 下是每字节 {{run:mla.absorbed_flop_per_byte:.0f}} 次浮点运算（只计注意力本身；该层的各个投影每个 token 只做一次，与缓存的键数无关，不计在内），接近 NVIDIA H100 的拐点（每字节 {{run:mla.h100_ridge:.0f}} 次：稠密 BF16 算力 989 TFLOP/s 除以带宽 3.35 TB/s，见其数据手册）。过了拐点，内核就不再等内存，而是等算术单元（[复用笔记本]({{colab:infra-benchmark/kv-cache-reuse}})第 9 节在运行它的机器上实测了 Roofline 模型，即屋顶线模型）。朴素形式的注意力每字节只有 {{run:mla.naive_flop_per_byte:.0f}} 次浮点运算，远在受限于内存带宽的区域之内。预填充（prefill）则不同：每个键都要被许多查询读取，展开一个键的代价（$r \cdot H(d_C + d_v)$ 次乘加）只付一次，由所有查询分摊；起决定作用的是每一对（查询，键）的工作量：用展开后的键和值是 $H(d_C + d_R + d_v)$ 次乘加，吸收形式是 $H(2r + d_R)$ 次，是前者的 {{run:mla.absorbed_vs_naive_macs:.1f}} 倍。所以推理服务系统用展开形式做预填充，用吸收形式做解码；vLLM 的 MLA 后端在文档字符串里就是这样说的（预填充走“计算友好”的路径，解码走“数据搬运友好”的路径），见 `vllm/v1/attention/backends/mla/common.py` 开头，较新的版本在 `vllm/model_executor/layers/attention/mla_attention.py`。

# %%
# [en] NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s HBM3 (the reuse notebook uses the same figures).
# [zh] NVIDIA H100 SXM 数据手册：稠密 BF16 算力 989 TFLOP/s，HBM3 带宽 3.35 TB/s（复用笔记本用的是同样的数字）。
H100_RIDGE = 989e12 / 3.35e12
per_key_naive = d.heads * (d.nope_dim + d.rope_dim + d.value_dim)         # H (d_C + d_R + d_v)
per_key_absorbed = d.heads * (2 * d.latent + d.rope_dim)                   # H (2r + d_R)
MLA_INTENSITY = {"naive_flop_per_byte": 2 * per_key_naive / (expanded_elements(d) * BF16),
                 "absorbed_flop_per_byte": 2 * per_key_absorbed / (mla_elements(d) * BF16), "h100_ridge": H100_RIDGE}
say_table([[f"`{form}`", f"{MLA_INTENSITY[f'{form}_flop_per_byte']:.1f}", f"{H100_RIDGE:.0f}"] for form in ("naive", "absorbed")],
          en=["form (decode, DeepSeek-V3, BF16)", "attention FLOP per byte of cache read (scores and values)", "H100 ridge point (FLOP per byte)"],
          zh=["形式（解码，DeepSeek-V3，BF16）", "每读一个缓存字节的注意力浮点运算次数（分数与对值的加权和）", "H100 的拐点（每字节浮点运算次数）"])
assert MLA_INTENSITY["naive_flop_per_byte"] < 2 and 0.5 * H100_RIDGE < MLA_INTENSITY["absorbed_flop_per_byte"] < H100_RIDGE
