# %% [markdown] lang="en"
# ### 8.3 The cache of published models
#
# The same payload formula, per token: $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ bytes. The sizes of
# three published models are typed in below from their configuration files on the Hugging Face Hub
# (nothing is downloaded; the source of every number is named in the code). GPT-2 and Llama 2 7B give
# every attention head its own K and V. Llama 3.1 8B uses **grouped-query attention** (GQA): its 32
# query heads share 8 K/V heads, so its cache per token is a quarter of Llama 2 7B's, although the two
# models have the same number of layers and the same width (the companion notebook
# `infra-benchmark/kv-cache-architectures` builds GQA into our decoder). Before applying the formula to them, the
# cell checks it on our own decoder, in FP32 and in FP16, against real caches.

# %% [markdown] lang="zh"
# ### 8.3 公开模型的缓存有多大
#
# 还是同一个数据量公式，按每个 token 计算：$2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ 字节。下面录入了三个公开模型的尺寸，取自它们在 Hugging Face Hub 上的配置文件（不下载任何东西；每个数的出处都写在代码里）。GPT-2 和 Llama 2 7B 的每个注意力头都有自己的 K 和 V。Llama 3.1 8B 使用**分组查询注意力**（grouped-query attention，GQA）：32 个查询头共用 8 个 K/V 头，所以尽管它与 Llama 2 7B 层数相同、宽度相同，每个 token 的缓存却只有后者的四分之一（配套笔记本 `infra-benchmark/kv-cache-architectures` 会把 GQA 加进我们的解码器）。在把公式用到这些模型之前，这个单元格先在我们自己的解码器上，分别用 FP32 和 FP16 的真实缓存核对它。

# %%
@dataclass
class PublishedConfig:
    name: str
    source: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    max_positions: int


# [en] Typed from each model's config.json on the Hugging Face Hub (the field names are theirs).
# [zh] 取自各模型在 Hugging Face Hub 上的 config.json（字段名沿用原文件）。
PUBLISHED = [
    PublishedConfig("GPT-2 (124M)", "openai-community/gpt2 config.json: n_layer 12, n_head 12, n_embd 768, n_positions 1024",
                    layers=12, heads=12, kv_heads=12, head_dim=768 // 12, max_positions=1024),
    PublishedConfig("Llama 2 7B", "meta-llama/Llama-2-7b-hf config.json: num_hidden_layers 32, num_attention_heads 32, "
                    "num_key_value_heads 32, hidden_size 4096, max_position_embeddings 4096",
                    layers=32, heads=32, kv_heads=32, head_dim=4096 // 32, max_positions=4096),
    PublishedConfig("Llama 3.1 8B", "meta-llama/Llama-3.1-8B config.json: num_hidden_layers 32, num_attention_heads 32, "
                    "num_key_value_heads 8, head_dim 128, max_position_embeddings 131072",
                    layers=32, heads=32, kv_heads=8, head_dim=128, max_positions=131072),
]
CONTEXTS = (4096, 32768)
FP16_BYTES = 2


def binary_size(n_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:,.4g} {unit}"
    return f"{n_bytes} B"


# [en] The formula on our decoder, against real caches of 256 tokens in FP32 and in FP16.
# [zh] 先在我们的解码器上核对公式：FP32 和 FP16 下各取 256 个 token 的真实缓存。
FORMULA_CHECK = []
for dtype in (torch.float32, torch.float16):
    with torch.inference_mode():
        _, real_cache = with_dtype(model, dtype)(COST_STREAM)
    size = torch.empty((), dtype=dtype).element_size()
    FORMULA_CHECK.append({"dtype": str(dtype).removeprefix("torch."), "real": cache_bytes(real_cache),
                          "formula": COST_STREAM.shape[1] * kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, size)})
say_table([[f"`{r['dtype']}`", f"{r['real']:,}", f"{r['formula']:,}"] for r in FORMULA_CHECK],
          en=["dtype", "real cache of 256 tokens, bytes", "256 × `kv_bytes_per_token`"],
          zh=["精度", "256 个 token 的真实缓存（字节）", "256 × `kv_bytes_per_token`"])
assert all(r["real"] == r["formula"] for r in FORMULA_CHECK)

KV_TABLE = [{"name": "`DecoderConfig()`", "layers": cfg.layers, "heads": cfg.heads, "kv_heads": cfg.heads,
             "head_dim": cfg.head_dim, "max_positions": cfg.max_positions, "source": "DecoderConfig()"}]
KV_TABLE += [{"name": p.name, "layers": p.layers, "heads": p.heads, "kv_heads": p.kv_heads, "head_dim": p.head_dim,
              "max_positions": p.max_positions, "source": p.source} for p in PUBLISHED]
for row in KV_TABLE:
    row["fp16_bytes_per_token"] = kv_bytes_per_token(row["layers"], row["kv_heads"], row["head_dim"], FP16_BYTES)
    row["fp16_bytes_per_context"] = {str(n): n * row["fp16_bytes_per_token"] for n in CONTEXTS}
say_table(
    [[row["name"], str(row["layers"]), f"{row['heads']} / {row['kv_heads']}", str(row["head_dim"]),
      binary_size(row["fp16_bytes_per_token"])]
     + [binary_size(row["fp16_bytes_per_context"][str(n)]) + ("" if n <= row["max_positions"] else " *") for n in CONTEXTS]
     for row in KV_TABLE],
    en=["model", "layers $L$", "query heads / K/V heads", "head size $D_h$", "K/V per token (fp16)",
        "4,096-token context", "32,768-token context"],
    zh=["模型", "层数 $L$", "查询头 / K/V 头", "每头维度 $D_h$", "每个 token 的 K/V（FP16）",
        "4,096 个 token 的上下文", "32,768 个 token 的上下文"],
)
say_table([[row["name"], f"`{row['source']}`"] for row in KV_TABLE[1:]],
          en=["model", "sizes typed from (Hugging Face Hub)"], zh=["模型", "尺寸的出处（Hugging Face Hub）"])
llama2, llama3 = (next(row for row in KV_TABLE if row["name"] == name) for name in ("Llama 2 7B", "Llama 3.1 8B"))
# [en] Same layers, query heads and head size; a quarter of the cache (8 K/V heads instead of 32).
# [zh] 层数、查询头数和每头维度都相同；缓存只有四分之一（8 个 K/V 头，而不是 32 个）。
assert all(llama2[key] == llama3[key] for key in ("layers", "heads", "head_dim"))
assert llama2["fp16_bytes_per_token"] == 4 * llama3["fp16_bytes_per_token"]

# %% [markdown] lang="en"
# An asterisk marks a context longer than the largest number of positions the model supports (GPT-2's
# learned position table has 1,024 rows, our decoder's 512; Llama 2, which uses RoPE and has no position
# table, was trained with a context of 4,096): the formula still gives the size such a cache would have. For one
# sequence of 32,768 tokens, Llama 3.1 8B keeps {{run:published.llama31_32k}} of K and V in FP16, per
# sequence, on top of its weights; without GQA it would be {{run:published.llama31_32k_mha}}. GQA also
# settles the second question of 8.2 the other way for this model: one token's K and V in one layer are
# $2 \cdot H_{kv} \cdot D_h$ numbers, {{run:published.llama31_kv_numbers:,}} here, fewer than the
# {{run:published.llama31_hidden:,}} of its hidden state. As a general remark (nothing here measures it):
# at such sizes serving systems manage the cache as carefully as the weights, and reading the whole cache
# on every step, the growth with $T$ of 8.2, becomes a large part of what a decode step costs.

# %% [markdown] lang="zh"
# 星号表示上下文长度超出了模型支持的最大位置数（GPT-2 学到的位置嵌入表有 1,024 行，我们的解码器有 512 行；Llama 2 使用 RoPE，没有位置嵌入表，它训练时的上下文长度是 4,096）：公式给出的仍是这样一份缓存应有的大小。对于一条 32,768 个 token 的序列，Llama 3.1 8B 在 FP16 下要为它保存 {{run:published.llama31_32k}} 的 K/V，这还不算权重；如果不用 GQA，则要 {{run:published.llama31_32k_mha}}。对这个模型来说，GQA 也让 8.2 的第二个问题有了相反的答案：一个 token 在一层中的 K/V 是 $2 \cdot H_{kv} \cdot D_h$ 个数，这里是 {{run:published.llama31_kv_numbers:,}} 个，比它的隐藏状态的 {{run:published.llama31_hidden:,}} 个数还少。顺带一提（这里并未实测）：到了这样的规模，推理服务系统管理缓存就要像管理权重一样精打细算；而每一步都要把整个缓存读一遍（也就是 8.2 中随 $T$ 的增长），这会成为解码一步的开销中很大的一部分。

# %% tags=["prose-values"]
{"published": {"llama31_32k": binary_size(llama3["fp16_bytes_per_context"]["32768"]),
               "llama31_32k_mha": binary_size(llama3["fp16_bytes_per_context"]["32768"] * llama3["heads"] // llama3["kv_heads"]),
               "llama31_kv_numbers": 2 * llama3["kv_heads"] * llama3["head_dim"],
               "llama31_hidden": llama3["heads"] * llama3["head_dim"]}}
