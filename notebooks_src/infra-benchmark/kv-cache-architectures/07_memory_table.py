# %% [markdown] lang="en"
# ## 9. Memory and cost of the variants at 7–8B scale
#
# Our model is tiny, but the payload formula is the same at any size, and sections 4 and 7 checked it
# (and the quantized layout) against the bytes of real caches. So we can apply it to a 7–8B-class
# configuration with confidence. The constants below are typed from the published configuration files
# named in the comments: Llama 3 8B has 32 layers, 32 query heads, 8 K/V heads and $D_h = 128$; Mistral
# 7B v0.1 has the same shape and a sliding window of 4096 positions. K/V are FP16 (2 bytes) unless
# quantized. For each variant the table gives the bytes per token and the cache of one 32k-token context
# (32,768 positions, batch 1). A decode step at that length reads the whole cache once, so the last
# column is also the K/V traffic of every generated token: this is why decoding at long contexts tends
# to be bound by memory traffic, and why a smaller cache means less traffic per token.
#
# The variants: MHA (each of the 32 heads keeps K/V), GQA-8 (Llama 3 8B itself), MQA, GQA-8 with a 4k
# sliding window (only $W - 1$ positions kept, as in section 6), and GQA-8 with int8 and int4 caches laid
# out as in section 7, with FP16 scales and KIVI's published settings $G = 32$, $R = 128$.

# %% [markdown] lang="zh"
# ## 9. 7B 到 8B 规模下各变体的内存与开销
#
# 我们的模型很小，但数据量公式与规模无关，而且第 4、7 节已经用真实缓存的字节数验证过这个公式（以及量化后的存储布局）。因此可以放心地把它用到 7B 到 8B 量级的配置上。下面的常数取自注释中注明的公开配置文件：Llama 3 8B 有 32 层、32 个查询头、8 个 K/V 头，$D_h = 128$；Mistral 7B v0.1 的形状相同，滑动窗口为 4096 个位置。除量化外，K/V 均为 FP16（2 字节）。对每种变体，表中给出每个 token 的字节数，以及一个 32k token 上下文（32,768 个位置，batch 1）的缓存大小。在这个长度下，每个解码步都要把整个缓存读一遍，所以最后一列也是每生成一个 token 的 K/V 访存量：这正是长上下文下的解码往往受访存限制的原因，缓存越小，每个 token 的访存量也就越少。
#
# 各变体如下：MHA（32 个头各自保存 K/V）、GQA-8（即 Llama 3 8B 本身）、MQA、带 4k 滑动窗口的 GQA-8（与第 6 节一样，只保留 $W - 1$ 个位置），以及采用 int8 和 int4 缓存的 GQA-8（存储布局同第 7 节，缩放因子为 FP16，取 KIVI 论文公布的设置 $G = 32$、$R = 128$）。

# %%
# [en] Llama 3 8B, config.json of meta-llama/Meta-Llama-3-8B on the Hugging Face Hub.
# [zh] Llama 3 8B，取自 Hugging Face Hub 上 meta-llama/Meta-Llama-3-8B 的 config.json。
LLAMA3_8B = ArchConfig(vocab=128256, width=4096, heads=32, kv_heads=8, layers=32, mlp=14336, max_positions=8192)
# [en] Mistral 7B v0.1, config.json of mistralai/Mistral-7B-v0.1: same shape, sliding_window = 4096.
# [zh] Mistral 7B v0.1，取自 mistralai/Mistral-7B-v0.1 的 config.json：形状相同，sliding_window = 4096。
MISTRAL_WINDOW = 4096
CONTEXT = 32 * 1024
FP16 = 2
KIVI_GROUP, KIVI_RESIDUAL = 32, 128
assert LLAMA3_8B.head_dim == 128 and LLAMA3_8B.groups == 4


def variant_row(name: str, kv_heads: int, positions: int, bytes_per_token: float, cache_bytes: float) -> dict:
    return {"variant": name, "kv_heads": kv_heads, "positions_kept": positions,
            "bytes_per_token": bytes_per_token, "cache_bytes_32k": cache_bytes}


def per_token(kv_heads: int, bytes_per_element: float) -> float:
    return kv_bytes(1, 1, LLAMA3_8B.layers, kv_heads, LLAMA3_8B.head_dim, bytes_per_element)


MEMORY_TABLE = [
    variant_row("MHA", 32, CONTEXT, per_token(32, FP16), kv_bytes(1, CONTEXT, 32, 32, 128, FP16)),
    variant_row("GQA-8", 8, CONTEXT, per_token(8, FP16), kv_bytes(1, CONTEXT, 32, 8, 128, FP16)),
    variant_row("MQA", 1, CONTEXT, per_token(1, FP16), kv_bytes(1, CONTEXT, 32, 1, 128, FP16)),
    variant_row("GQA-8, W = 4096", 8, MISTRAL_WINDOW - 1, per_token(8, FP16), kv_bytes(1, MISTRAL_WINDOW - 1, 32, 8, 128, FP16)),
] + [
    variant_row(f"GQA-8, int{bits}", 8, CONTEXT,
                quant_bytes(CONTEXT, bits, LLAMA3_8B, KIVI_RESIDUAL, KIVI_GROUP, FP16) / CONTEXT,
                quant_bytes(CONTEXT, bits, LLAMA3_8B, KIVI_RESIDUAL, KIVI_GROUP, FP16))
    for bits in (8, 4)
]
GiB, KiB = 2 ** 30, 2 ** 10
say_table([[r["variant"], str(r["kv_heads"]), f"{r['positions_kept']:,}", f"{r['bytes_per_token'] / KiB:.1f}",
            f"{r['cache_bytes_32k'] / GiB:.2f}"] for r in MEMORY_TABLE],
          en=["variant", "K/V heads", "positions kept", "KiB per token", "GiB per 32k context"],
          zh=["变体", "K/V 头数", "保留的位置数", "每 token（KiB）", "32k 上下文的缓存（GiB）"])

# %% [markdown] lang="en"
# The rows, asserted: MHA needs 512 KiB per token and 16 GiB for one 32k context, more than the 8B
# model's own FP16 weights (about 15 GiB, computed from the same configuration below); GQA-8 divides both
# by 4 and MQA by 32; the 4k window caps the cache at 4095 positions, just under 0.5 GiB however long the
# context; int8 and int4 halve and quarter GQA-8's cache, plus a few percent for the scales and the
# full-precision window.

# %% [markdown] lang="zh"
# 用断言核对各行：MHA 每个 token 需要 512 KiB，一个 32k 上下文需要 16 GiB，比这个 8B 模型自身的 FP16 权重（约 15 GiB，下面用同一份配置算出）还多；GQA-8 把两者都缩小到 1/4，MQA 缩小到 1/32；4k 窗口把缓存限制在 4095 个位置，无论上下文多长，都不到 0.5 GiB；int8 和 int4 把 GQA-8 的缓存分别减到一半和四分之一，另加百分之几用于缩放因子和全精度窗口。

# %%
def llama_parameters(c: ArchConfig) -> int:
    # [en] Embeddings + per layer (q, k, v, o, gate, up, down, two RMSNorms) + final RMSNorm + untied lm_head.
    # [zh] 嵌入 + 每层（q、k、v、o、gate、up、down 以及两个 RMSNorm）+ 最后的 RMSNorm + 不共享权重的 lm_head。
    attention = c.width * c.heads * c.head_dim * 2 + c.width * c.n_kv * c.head_dim * 2
    return c.vocab * c.width + c.layers * (attention + 3 * c.width * c.mlp + 2 * c.width) + c.width + c.width * c.vocab


rows = {r["variant"]: r for r in MEMORY_TABLE}
weights_gib = llama_parameters(LLAMA3_8B) * FP16 / GiB
assert rows["MHA"]["bytes_per_token"] == 512 * KiB and rows["MHA"]["cache_bytes_32k"] == 16 * GiB
assert 14.5 < weights_gib < 15.5 < rows["MHA"]["cache_bytes_32k"] / GiB
assert rows["GQA-8"]["cache_bytes_32k"] * 4 == rows["MHA"]["cache_bytes_32k"] == rows["MQA"]["cache_bytes_32k"] * 32
assert rows["GQA-8, W = 4096"]["cache_bytes_32k"] == 4095 * rows["GQA-8"]["bytes_per_token"] < 0.5 * GiB
for bits, fraction in ((8, 0.5), (4, 0.25)):
    overhead = rows[f"GQA-8, int{bits}"]["cache_bytes_32k"] / rows["GQA-8"]["cache_bytes_32k"] - fraction
    assert 0 < overhead < 0.05, (bits, overhead)
say(en=f"Llama 3 8B weights in FP16, from the same configuration: {weights_gib:.1f} GiB.",
    zh=f"按同一份配置计算，Llama 3 8B 的 FP16 权重为 {weights_gib:.1f} GiB。")

# %% [markdown] lang="en"
# The same numbers as a figure (log scale), one bar per variant: the cache of one 32k-token context.

# %% [markdown] lang="zh"
# 同样的数字画成图（对数刻度），每种变体一根柱子：一个 32k token 上下文的缓存大小。

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.4))
ax.barh([r["variant"] for r in MEMORY_TABLE][::-1], [r["cache_bytes_32k"] / GiB for r in MEMORY_TABLE][::-1], color="tab:blue")
ax.axvline(weights_gib, color="gray", linestyle=":", label="FP16 weights of the 8B model")
ax.set_xscale("log")
ax.set_xlabel("K/V cache of one 32k-token context (GiB, log scale)")
ax.set_title("Llama-3-8B shape: 32 layers, 32 query heads, head_dim 128", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
MEMORY_PNG = OUT / "memory.png"
fig.savefig(MEMORY_PNG, dpi=120)
plt.show()
