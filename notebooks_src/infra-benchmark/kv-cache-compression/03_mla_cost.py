# %% [markdown] lang="en"
# ### 5.2 What MLA stores, and what it computes
#
# **Memory, measured.** Per token and layer, the naive form caches $H(d_C + d_R)$ numbers of keys and $H d_v$ of
# values; the latent and absorbed forms cache $r + d_R$. For comparison, the GQA model of section 4 caches
# $2 H_{kv} D_h$ (the series' `kv_bytes_per_token` formula). The cell measures `numel() * element_size()` over the
# real caches after the 24-token stream (batch 2, FP32) and divides by batch, tokens and layers; it must equal
# the formula exactly.

# %% [markdown] lang="zh"
# ### 5.2 MLA 存了什么，又算了什么
#
# **内存，实测。** 每个 token 在每一层，朴素形式缓存 $H(d_C + d_R)$ 个键的数和 $H d_v$ 个值的数；潜向量形式和吸收形式缓存 $r + d_R$ 个数。作为对照，第 4 节的 GQA 模型缓存 $2 H_{kv} D_h$ 个数（即本系列的 `kv_bytes_per_token` 公式）。下面的单元格在 24 个 token 的序列（batch 2，FP32）之后，对真实缓存统计 `numel() * element_size()`，再除以 batch、token 数和层数；结果必须与公式完全相等。

# %%
def mla_elements(c: MLAConfig) -> int:
    return c.latent + c.rope_dim                                        # r + d_R


def expanded_elements(c: MLAConfig) -> int:
    return c.heads * (c.nope_dim + c.rope_dim + c.value_dim)           # H (d_C + d_R) + H d_v


with torch.inference_mode():
    measured = {name: sum(c.nbytes() for c in build(mla_cfg, lambda i: form(mla_cfg))(STREAM)[1])
                for name, form in MLA_FORMS.items()}
    measured["gqa"] = sum(c.nbytes() for c in build(llama_cfg)(STREAM)[1])
per_token_layer = 2 * STREAM_LEN * mla_cfg.layers * 4
MLA_MEMORY = {
    "naive": {"formula_elements": expanded_elements(mla_cfg), "measured_elements": measured["naive"] / per_token_layer},
    "latent": {"formula_elements": mla_elements(mla_cfg), "measured_elements": measured["latent"] / per_token_layer},
    "absorbed": {"formula_elements": mla_elements(mla_cfg), "measured_elements": measured["absorbed"] / per_token_layer},
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
# 128k tokens (131,072) across all layers.

# %% [markdown] lang="zh"
# **放到 DeepSeek-V3 的规模。** 这些公式与规模无关，所以可以把它们用到 DeepSeek-V3 的注意力上。数值取自它的 `config.json`（Hugging Face Hub 上的 deepseek-ai/DeepSeek-V3）：61 层，128 个头，`kv_lora_rank` $r = 512$，`qk_rope_head_dim` $d_R = 64$，`qk_nope_head_dim` $d_C = 128$，`v_head_dim` $d_v = 128$，精度为 BF16（2 字节）。如果安装了 transformers，单元格还会用它的 `DeepseekV3Config` 的默认值（第二个来源）核对这些数值。作为对照，表中还列出：头数同为 128、每头 128 维的 MHA、8 个 K/V 头的 GQA 和 MQA 各自要缓存的量，以及一个 128k token（131,072 个）的上下文在所有层上的缓存大小。

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
MEMORY_LABELS = {"mha": "MHA", "gqa_8": "GQA-8", "mqa": "MQA", "mla_naive": "MLA `naive`", "mla_latent": "MLA `latent`, `absorbed`"}
assert DEEPSEEK_MEMORY["mha"] * d.layers * BF16 == kv_bytes_per_token(d.layers, d.heads, d.value_dim, BF16)
say_table([[MEMORY_LABELS[name], f"{n:,}", f"{n * d.layers * BF16 / KiB:,.1f}", f"{n * d.layers * BF16 * CONTEXT_128K / GiB:,.1f}"]
           for name, n in DEEPSEEK_MEMORY.items()],
          en=["cache (DeepSeek-V3 attention)", "numbers per token and layer", "KiB per token (61 layers, BF16)", "GiB per 128k context"],
          zh=["缓存（DeepSeek-V3 的注意力）", "每个 token 每层的数", "每 token（KiB，61 层，BF16）", "128k 上下文（GiB）"])

# %% [markdown] lang="en"
# **Compute, counted.** Absorption does not make attention cheaper in arithmetic; it moves it. Per decode step
# and layer, with $T$ keys and one new token, the three forms do these multiply-adds beyond the projections they
# share ($q$, `kv_down`, $o$):
#
# * naive: expand the new token ($r \cdot H(d_C + d_v)$), then scores and values over the cached keys,
#   $T \cdot H(d_C + d_R + d_v)$;
# * latent: the same attention, but every call expands *all* $T$ cached latents: $T \cdot r \cdot H(d_C + d_v)$ more;
# * absorbed: fold the query ($H d_C r$), score the latents and RoPE keys ($T \cdot H(r + d_R)$), average the
#   latents ($T \cdot H r$), apply $W^{UV}$ ($H r d_v$).
#
# `decode_macs` writes these counts down; `counted_macs` runs one decode step of a real layer under PyTorch's
# `FlopCounterMode`, which counts the multiply-adds of every matrix product (two floating-point operations each).
# The two must be equal, for each form, at 16, 64 and 256 cached positions.

# %% [markdown] lang="zh"
# **计算量，实际统计。** 吸收并没有让注意力的算术运算变少，而是把它挪了个地方。对每个解码步、每一层，设有 $T$ 个键和一个新 token，除了三种形式共有的投影（$q$、`kv_down`、$o$）之外，它们各自的乘加次数如下：
#
# * 朴素形式：展开新 token（$r \cdot H(d_C + d_v)$），再在缓存的键上计算分数和加权求值，共 $T \cdot H(d_C + d_R + d_v)$；
# * 潜向量形式：注意力部分相同，但每次调用都要展开**全部** $T$ 个缓存的潜向量，多出 $T \cdot r \cdot H(d_C + d_v)$；
# * 吸收形式：并入查询（$H d_C r$），对潜向量和 RoPE 键打分（$T \cdot H(r + d_R)$），对潜向量加权平均（$T \cdot H r$），再乘上 $W^{UV}$（$H r d_v$）。
#
# `decode_macs` 把这些次数写成公式；`counted_macs` 在 PyTorch 的 `FlopCounterMode` 下让一个真实的注意力层跑一个解码步，它会统计每个矩阵乘积的乘加次数（每次乘加算两次浮点运算）。对每种形式，在缓存 16、64、256 个位置时，两者都必须相等。

# %%
def decode_macs(c: MLAConfig, form: str, keys: int) -> int:
    H, r, dc, dr, dv, W = c.heads, c.latent, c.nope_dim, c.rope_dim, c.value_dim, c.width
    shared = W * H * (dc + dr) + W * (r + dr) + H * dv * W                       # q, kv_down, o
    attention = keys * H * (dc + dr + dv)                                          # scores + values over expanded K/V
    return shared + {
        "naive": r * H * (dc + dv) + attention,
        "latent": keys * r * H * (dc + dv) + attention,
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

# %% [markdown] lang="en"
# Now the counts at DeepSeek-V3's size, per layer and decode step, next to the bytes each form reads from its
# cache (BF16). The naive form does about one multiply-add per cached number it reads: its attention is bound by
# memory traffic. The absorbed form does about {{run:mla.absorbed_vs_naive_macs:.1f}} times the attention arithmetic of
# the naive one per key, but reads {{run:mla.naive_vs_latent_bytes:.0f}} times fewer bytes: it behaves like
# multi-query attention with one K/V head of $r + d_R$ dimensions shared by all 128 heads. The latent form, what
# transformers does, reads little but recomputes every key and value at every step. The figure shows both
# quantities as the context grows.

# %% [markdown] lang="zh"
# 下面把这些次数放到 DeepSeek-V3 的规模上（每层、每个解码步），并列出每种形式从缓存中读取的字节数（BF16）。朴素形式每读一个缓存的数只做大约一次乘加：它的注意力受访存限制。吸收形式每个键的注意力算术量约为朴素形式的 {{run:mla.absorbed_vs_naive_macs:.1f}} 倍，读取的字节却少 {{run:mla.naive_vs_latent_bytes:.0f}} 倍：它就像一个多查询注意力，128 个头共享一个 $r + d_R$ 维的 K/V 头。潜向量形式（即 transformers 的做法）读得少，却在每一步都重算每个键和值。下图画出这两个量随上下文增长的情况。

# %%
def cache_bytes_read(c: MLAConfig, form: str, keys: int, bytes_per_element: int = BF16) -> int:
    return keys * (expanded_elements(c) if form == "naive" else mla_elements(c)) * bytes_per_element


CONTEXTS = [2 ** k for k in range(8, 18)]
fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
for form, style in (("naive", "-o"), ("latent", "-s"), ("absorbed", "-^")):
    axes[0].plot(CONTEXTS, [cache_bytes_read(DEEPSEEK_V3, form, t) / 2 ** 20 for t in CONTEXTS], style, markersize=3, label=form)
    axes[1].plot(CONTEXTS, [decode_macs(DEEPSEEK_V3, form, t) / 1e9 for t in CONTEXTS], style, markersize=3, label=form)
for ax, label in zip(axes, ("cache read per step (MiB, BF16)", "multiply-adds per step (billions)")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context: cached keys T")
    ax.set_ylabel(label)
    ax.legend(fontsize=8)
fig.suptitle("DeepSeek-V3 attention, one layer, one decode step", fontsize=10)
fig.tight_layout()
MLA_COST_PNG = OUT / "mla_cost.png"
fig.savefig(MLA_COST_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: one DeepSeek-V3 attention layer, one decode step, against the number of cached keys (both axes
# logarithmic). Left: bytes read from the cache; the latent and absorbed forms coincide (both read the latents and
# RoPE keys). Right: multiply-adds; "latent" climbs fastest because it re-expands every cached latent.*

# %% [markdown] lang="zh"
# *图：DeepSeek-V3 的一个注意力层在一个解码步中的开销，横轴是缓存的键数（两个坐标轴都是对数刻度）。左图：从缓存读取的字节数；latent（潜向量形式）和 absorbed（吸收形式）两条线重合（两者读的都是潜向量和 RoPE 键），naive 为朴素形式。右图：乘加次数；latent 增长最快，因为它要把每个缓存的潜向量重新展开。*

# %%
d, T = DEEPSEEK_V3, 32 * 1024
per_key_naive = d.heads * (d.nope_dim + d.rope_dim + d.value_dim)
per_key_absorbed = d.heads * (2 * d.latent + d.rope_dim)
MLA_TRADE = {"context": T, "forms": {form: {"macs": decode_macs(d, form, T), "cache_bytes_read": cache_bytes_read(d, form, T)}
                                     for form in MLA_FORMS}}
say_table([[f"`{form}`", f"{v['macs'] / 1e9:.2f}", f"{v['cache_bytes_read'] / 2 ** 20:,.1f}", f"{v['macs'] / v['cache_bytes_read']:,.1f}"]
           for form, v in MLA_TRADE["forms"].items()],
          en=["form (T = 32,768)", "multiply-adds (billions)", "cache read (MiB)", "multiply-adds per byte read"],
          zh=["形式（T = 32,768）", "乘加次数（十亿）", "读取的缓存（MiB）", "每读一个字节的乘加次数"])
assert MLA_TRADE["forms"]["naive"]["macs"] < MLA_TRADE["forms"]["absorbed"]["macs"] < MLA_TRADE["forms"]["latent"]["macs"]

# %% tags=["prose-values"]
{"mla": {"absorbed_vs_naive_macs": per_key_absorbed / per_key_naive,
         "naive_vs_latent_bytes": expanded_elements(d) / mla_elements(d)}}
