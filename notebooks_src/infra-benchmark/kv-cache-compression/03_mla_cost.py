# %% [markdown] lang="en"
# ## 4. The cost of MLA: memory, arithmetic and memory traffic
#
# Section 3 proved the three forms exact. This section counts what each one stores, computes and moves, first on
# our small model, then at DeepSeek-V3's size. The result in one sentence: the absorbed form moves the fewest bytes
# and does more arithmetic per key; the expand-on-read form stores as little, but moves more bytes per
# step than the naive form reads.
#
# **Memory, measured.** Per token and layer, the naive form caches $H(d_C + d_R)$ numbers of keys and $H d_v$ of
# values; the expand-on-read and absorbed forms cache $r + d_R$. For comparison, the GQA model of section 2 caches
# $2 H_{kv} D_h$ (the series' `kv_bytes_per_token` formula). The cell measures `numel() * element_size()` over the
# real caches after the 24-token stream (batch 2, FP32) and divides by batch, tokens and layers; it must equal
# the formula exactly.

# %% [markdown] lang="zh"
# ## 4. MLA 的开销：内存、算术与访存
#
# 第 3 节证明了三种形式都是精确的。本节统计每种形式存了什么、算了什么、搬运了什么：先在我们的小模型上，再放到 DeepSeek-V3 的规模。结论一句话：吸收形式搬运的字节最少，对每个键做的算术更多；读时展开形式存得同样少，但每一步搬运的字节比朴素形式读取的还多。
#
# **内存，实测。** 每个 token 在每一层，朴素形式为键缓存 $H(d_C + d_R)$ 个数，为值缓存 $H d_v$ 个数；读时展开形式和吸收形式缓存 $r + d_R$ 个数。作为对照，第 2 节的 GQA 模型缓存 $2 H_{kv} D_h$ 个数（即本系列的 `kv_bytes_per_token` 公式）。下面的单元格在 24 个 token 的序列（batch 为 2，FP32）之后，对真实缓存统计 `numel() * element_size()`，再除以 batch、token 数和层数；结果必须与公式完全相等。

# %%
def mla_elements(c: MLAConfig) -> int:
    return c.latent + c.rope_dim                                        # r + d_R


def expanded_elements(c: MLAConfig) -> int:
    return c.heads * (c.nope_dim + c.rope_dim + c.value_dim)           # H (d_C + d_R) + H d_v


with torch.inference_mode():
    measured = {name: sum(c.nbytes() for c in build(mla_cfg, lambda i: form(mla_cfg))(STREAM)[1])
                for name, form in MLA_FORMS.items()}
    measured["gqa"] = sum(c.nbytes() for c in build(llama_cfg)(STREAM)[1])
# [en] Dividing a cache's bytes by this gives numbers per token and layer.
# [zh] 缓存的字节数除以它，就得到每个 token 每层的数的个数。
BATCH, FP32_BYTES = STREAM.shape[0], 4
per_token_layer = BATCH * STREAM_LEN * mla_cfg.layers * FP32_BYTES
MLA_MEMORY = {
    "naive": {"formula_elements": expanded_elements(mla_cfg), "measured_elements": measured["naive"] / per_token_layer},
    "expand_on_read": {"formula_elements": mla_elements(mla_cfg), "measured_elements": measured["expand_on_read"] / per_token_layer},
    "absorbed": {"formula_elements": mla_elements(mla_cfg), "measured_elements": measured["absorbed"] / per_token_layer},
    # [en] The series' formula with 1 byte per number and 1 layer counts numbers per token and layer.
    # [zh] 本系列的公式取每个数 1 字节、1 层，得到的就是每个 token 每层的数的个数。
    "gqa": {"formula_elements": kv_bytes_per_token(1, llama_cfg.kv_heads, llama_cfg.head_dim, 1),
            "measured_elements": measured["gqa"] / per_token_layer},
}
say_table([[f"`{name}`", str(m["formula_elements"]), f"{m['measured_elements']:g}"] for name, m in MLA_MEMORY.items()],
          en=["cache", "formula: numbers per token and layer", "measured"],
          zh=["缓存", "公式：每个 token 每层的数", "实测"])
assert all(m["formula_elements"] == m["measured_elements"] for m in MLA_MEMORY.values())

# %% [markdown] lang="en"
# **At DeepSeek-V3's size.** The formulas hold at any size, so we apply them to DeepSeek-V3's attention, with the
# values typed from its `config.json` (deepseek-ai/DeepSeek-V3 on the Hugging Face Hub): 61 layers, 128 heads,
# `kv_lora_rank` $r = 512$, `qk_rope_head_dim` $d_R = 64$, `qk_nope_head_dim` $d_C = 128$, `v_head_dim`
# $d_v = 128$, in BF16 (2 bytes). When transformers is installed, the cell also checks these values against the
# defaults of its `DeepseekV3Config`, a second source. For comparison the table adds what an MHA, a GQA with 8
# K/V heads and an MQA model with the same 128 heads of 128 dimensions would cache, and the cache of one context of
# 128k tokens (131,072) across all layers. MLA `naive` caches more than MHA because its keys are $d_C + d_R$ wide and
# every head keeps its own copy of the RoPE key. MQA caches less than MLA's latent, but gives all heads one key and one
# value; MLA rebuilds a different key and value for every head from the latent (a low-rank MHA), and the DeepSeek-V2
# paper's ablations report MLA at or above MHA, and MHA above GQA and MQA.

# %% [markdown] lang="zh"
# **放到 DeepSeek-V3 的规模。** 这些公式与规模无关，所以可以把它们用到 DeepSeek-V3 的注意力上。数值取自它的 `config.json`（Hugging Face Hub 上的 deepseek-ai/DeepSeek-V3）：61 层，128 个头，`kv_lora_rank` $r = 512$，`qk_rope_head_dim` $d_R = 64$，`qk_nope_head_dim` $d_C = 128$，`v_head_dim` $d_v = 128$，精度为 BF16（2 字节）。如果安装了 transformers，单元格还会用它的 `DeepseekV3Config` 的默认值（第二个来源）核对这些数值。作为对照，表中还列出：头数同为 128、每头 128 维的 MHA、8 个 K/V 头的 GQA 和 MQA 各自要缓存的量，以及一个 128K token（131,072 个）的上下文在所有层上的缓存大小。MLA `naive` 比 MHA 缓存得还多，因为它的键有 $d_C + d_R$ 维，而且每个头都保存一份自己的 RoPE 键副本。MQA 缓存的比 MLA 的潜向量还少，但所有头共用同一个键和同一个值；MLA 则从潜向量为每个头重建各自不同的键和值（相当于低秩的 MHA）。DeepSeek-V2 论文的消融实验显示，MLA 的效果不低于 MHA，而 MHA 又优于 GQA 和 MQA。

# %%
# [en] DeepSeek-V3, config.json of deepseek-ai/DeepSeek-V3 (attention fields only).
# [zh] DeepSeek-V3，取自 deepseek-ai/DeepSeek-V3 的 config.json（只取注意力相关的字段）。
DEEPSEEK_V3 = MLAConfig(vocab=129280, width=7168, heads=128, layers=61, latent=512, rope_dim=64, nope_dim=128, value_dim=128)
BF16, CONTEXT_128K, GiB, KiB = 2, 128 * 1024, 2 ** 30, 2 ** 10
if HAVE_HF:
    defaults = DeepseekV3Config()
    assert (defaults.num_hidden_layers, defaults.num_attention_heads, defaults.kv_lora_rank, defaults.qk_rope_head_dim,
            defaults.qk_nope_head_dim, defaults.v_head_dim, defaults.hidden_size) == (61, 128, 512, 64, 128, 128, 7168)

d = DEEPSEEK_V3
DEEPSEEK_MEMORY = {
    "mha": 2 * d.heads * d.value_dim,
    "gqa_8": 2 * 8 * d.value_dim,
    "mqa": 2 * 1 * d.value_dim,
    "mla_naive": expanded_elements(d),
    "mla_latent": mla_elements(d),
}
MEMORY_LABELS = {"mha": "MHA", "gqa_8": "GQA-8", "mqa": "MQA", "mla_naive": "MLA `naive`", "mla_latent": "MLA `expand_on_read`, `absorbed`"}
assert DEEPSEEK_MEMORY["mha"] * d.layers * BF16 == kv_bytes_per_token(d.layers, d.heads, d.value_dim, BF16)
say_table([[MEMORY_LABELS[name], f"{n:,}", f"{n * d.layers * BF16 / KiB:,.1f}", f"{n * d.layers * BF16 * CONTEXT_128K / GiB:,.1f}"]
           for name, n in DEEPSEEK_MEMORY.items()],
          en=["cache (DeepSeek-V3 attention)", "numbers per token and layer", "KiB per token (61 layers, BF16)", "GiB per 128k context"],
          zh=["缓存（DeepSeek-V3 的注意力）", "每个 token 每层的数", "每个 token（KiB，61 层，BF16）", "128K 上下文（GiB）"])

# %% [markdown] lang="en"
# **The latent under tensor parallelism.** Tensor parallelism splits attention by heads: on 8 GPUs, each takes 16 of
# the 128 query heads, and for MHA or GQA the K/V heads those queries read, so each GPU caches an eighth of the
# keys and values ({{run:mla.tp8_mha_per_gpu:,}} numbers per token and layer for MHA). MLA's latent and RoPE key
# belong to no head: every head reads all $r + d_R$ numbers of every token, so every GPU must hold the whole latent
# cache of every request it serves, all {{run:takeaways.deepseek_latent}} numbers per token and layer: the latent is
# replicated, not split. That is why SGLang and vLLM serve DeepSeek's attention *data-parallel* ("DP attention" in
# SGLang's documentation; vLLM's data-parallel deployment guide says it can be advantageous for MLA models): each GPU runs the
# attention of its own requests, with their latents only, and the GPUs share the work again in the mixture-of-experts
# layers.

# %% [markdown] lang="zh"
# **张量并行下的潜向量。** 张量并行按头切分注意力：在 8 块 GPU 上，每块负责 128 个查询头中的 16 个；对 MHA 或 GQA 来说，也负责这些查询所读取的 K/V 头，所以每块 GPU 只缓存八分之一的键和值（MHA 为每个 token 每层 {{run:mla.tp8_mha_per_gpu:,}} 个数）。MLA 的潜向量和 RoPE 键不属于任何一个头：每个头都要读取每个 token 的全部 $r + d_R$ 个数，所以每块 GPU 都必须保存它所服务的每个请求的完整潜向量缓存，即每个 token 每层全部 {{run:takeaways.deepseek_latent}} 个数。也就是说，潜向量在各块 GPU 上是复制的，而不是切分的。这就是 SGLang 和 vLLM 以**数据并行注意力**的方式运行 DeepSeek 注意力层的原因（SGLang 文档中称为 DP attention；vLLM 的数据并行部署指南也说，对 MLA 模型这样做可能更有利）：每块 GPU 只为自己的请求计算注意力，只保存这些请求的潜向量，到了混合专家层，各块 GPU 再分担计算。

# %% [markdown] lang="en"
# **Compute, counted.** Absorption does not make attention cheaper in arithmetic; it moves it. Per decode step
# and layer, with $T$ keys and one new token, the three forms do these multiply-adds beyond the projections they
# share ($q$, `kv_down`, $o$):
#
# * naive: expand the new token ($r \cdot H(d_C + d_v)$), then scores and values over the cached keys,
#   $T \cdot H(d_C + d_R + d_v)$;
# * expand-on-read: the same attention, but every call expands *all* $T$ cached latents: $T \cdot r \cdot H(d_C + d_v)$ more;
# * absorbed: fold the query ($H d_C r$), score the latents and RoPE keys ($T \cdot H(r + d_R)$), average the
#   latents ($T \cdot H r$), apply $W^{UV}$ ($H r d_v$).
#
# `decode_macs` writes these counts down, plus the shared projections, so its totals are a whole step's;
# `counted_macs` runs one decode step of a real layer under PyTorch's `FlopCounterMode`, which counts the
# floating-point operations of every matrix product (two per multiply-add, so the cell halves them).
# The two must be equal, for each form, at 16, 64 and 256 cached positions.

# %% [markdown] lang="zh"
# **计算量，实际统计。** 吸收并没有让注意力的算术运算变少，而是把它挪了个地方。对每个解码步、每一层，设有 $T$ 个键和一个新 token，除了三种形式共有的投影（$q$、`kv_down`、$o$）之外，它们各自的乘加次数如下：
#
# * 朴素形式：展开新 token（$r \cdot H(d_C + d_v)$），再在缓存的键上计算分数和对值的加权和，共 $T \cdot H(d_C + d_R + d_v)$；
# * 读时展开形式：注意力部分相同，但每次调用都要展开**全部** $T$ 个缓存的潜向量，多出 $T \cdot r \cdot H(d_C + d_v)$；
# * 吸收形式：并入查询（$H d_C r$），对潜向量和 RoPE 键打分（$T \cdot H(r + d_R)$），对潜向量求加权和（$T \cdot H r$），再乘上 $W^{UV}$（$H r d_v$）。
#
# `decode_macs` 把这些次数写成公式，并加上共有的投影，所以它给出的是整个解码步的总数；`counted_macs` 在 PyTorch 的 `FlopCounterMode` 下让一个真实的注意力层跑一个解码步，它统计每个矩阵乘积的浮点运算次数（一次乘加算两次浮点运算），除以 2 即乘加次数。对每种形式，在缓存 16、64、256 个位置时，两者都必须相等。

# %%
def decode_macs(c: MLAConfig, form: str, keys: int) -> int:
    H, r, dc, dr, dv, W = c.heads, c.latent, c.nope_dim, c.rope_dim, c.value_dim, c.width
    shared = W * H * (dc + dr) + W * (r + dr) + H * dv * W                       # q, kv_down, o
    # [en] Scores and the weighted sum of values, over the expanded K/V.
    # [zh] 在展开后的 K/V 上计算分数和对值的加权求和。
    attention = keys * H * (dc + dr + dv)
    return shared + {
        "naive": r * H * (dc + dv) + attention,
        "expand_on_read": keys * r * H * (dc + dv) + attention,
        "absorbed": H * dc * r + keys * H * (r + dr) + keys * H * r + H * r * dv,
    }[form]


@torch.inference_mode()
def counted_macs(form: str, keys: int) -> int:
    attn = build(mla_cfg, lambda i: MLA_FORMS[form](mla_cfg)).blocks[0].attn
    x = torch.randn(1, keys, mla_cfg.width, generator=torch.Generator().manual_seed(SEED))
    cache = attn.new_cache([])
    attn(x[:, :-1], torch.arange(keys - 1), cache)
    with FlopCounterMode(display=False) as counter:
        attn(x[:, -1:], torch.tensor([keys - 1]), cache)
    return counter.get_total_flops() // 2


MACS = {form: {keys: {"formula": decode_macs(mla_cfg, form, keys), "counted": counted_macs(form, keys)} for keys in (16, 64, 256)}
        for form in MLA_FORMS}
say_table([[f"`{form}`"] + [f"{v['counted']:,}" for v in by_keys.values()] for form, by_keys in MACS.items()],
          en=["form", "16 keys", "64 keys", "256 keys"], zh=["形式", "16 个键", "64 个键", "256 个键"])
assert all(v["formula"] == v["counted"] for by_keys in MACS.values() for v in by_keys.values())

