# %% [markdown] lang="en"
# ## 9. Memory and cost of the variants at 7–8B scale
#
# Our model is tiny, but the payload formula is the same at any size, and sections 4 and 7 checked it
# (and the quantized layout) against the bytes of real caches. So we can apply it to a 7–8B-class
# configuration with confidence. The constants below are typed from the published configuration files
# named in the comments: Llama 3 8B has 32 layers, 32 query heads, 8 K/V heads and $D_h = 128$; Mistral
# 7B v0.1 has the same shape and a sliding window of 4,096 positions. K/V are FP16 (2 bytes) unless
# quantized. For each variant the table gives the positions kept, the bytes per position kept, and their
# product: the cache of one 32k-token context (32,768 positions, batch 1). A decode step at that length reads the whole cache once, so the last
# column is also the K/V traffic of every generated token (for the int8 and int4 rows, with a kernel that reads the
# packed codes; section 7's cache unpacks every group on every call instead): this is why decoding at long contexts tends
# to be bound by memory traffic, and why a smaller cache means less traffic per token.
#
# The variants: MHA (each of the 32 heads keeps K/V), GQA-8 (Llama 3 8B itself), MQA, GQA-8 with a 4k
# sliding window (only $W - 1$ positions kept, as in section 6), and GQA-8 with int8 and int4 caches laid
# out as in section 7, with FP16 scales and KIVI's published settings $G = 32$, $R = 128$.

# %% [markdown] lang="zh"
# ## 9. 7B 到 8B 规模下各变体的内存与开销
#
# 我们的模型很小，但数据量公式与规模无关，而且第 4、7 节已经用真实缓存的字节数验证过这个公式（以及量化后的存储布局）。因此可以放心地把它用到 7B 到 8B 量级的配置上。下面的常数取自注释中注明的公开配置文件：Llama 3 8B 有 32 层、32 个查询头、8 个 K/V 头，$D_h = 128$；Mistral 7B v0.1 的形状相同，滑动窗口为 4,096 个位置。除量化外，K/V 均为 FP16（2 字节）。对每种变体，表中给出保留的位置数、每个保留位置的字节数，以及两者的乘积，即一个 32k token 的上下文（32,768 个位置，batch 为 1）的缓存大小。在这个长度下，每个解码步都要把整个缓存读一遍，所以最后一列也是每生成一个 token 的 K/V 访存量（int8 和 int4 两行要求内核直接读取打包的编码；第 7 节的缓存则在每次调用时把每一组都解包）：这正是长上下文下的解码往往受限于内存带宽的原因；缓存越小，每个 token 的访存量也就越少。
#
# 各变体如下：MHA（32 个头各自保存 K/V）、GQA-8（即 Llama 3 8B 本身）、MQA、带 4k 滑动窗口的 GQA-8（与第 6 节一样，只保留 $W - 1$ 个位置），以及采用 int8 和 int4 缓存的 GQA-8（存储布局同第 7 节，缩放因子为 FP16，取 KIVI 论文公布的设置 $G = 32$、$R = 128$）。

# %%
# [en] Llama 3 8B, config.json of meta-llama/Meta-Llama-3-8B on the Hugging Face Hub.
# [zh] Llama 3 8B，取自 Hugging Face Hub 上 meta-llama/Meta-Llama-3-8B 的 config.json。
LLAMA3_8B = ArchConfig(vocab=128256, width=4096, heads=32, kv_heads=8, layers=32, mlp=14336, max_positions=8192)
# [en] Mistral 7B v0.1, config.json of mistralai/Mistral-7B-v0.1: the same shape, sliding_window = 4096.
# [zh] Mistral 7B v0.1，取自 mistralai/Mistral-7B-v0.1 的 config.json：形状相同，sliding_window = 4096。
MISTRAL_WINDOW = 4096
CONTEXT, FP16, KIVI_GROUP, KIVI_RESIDUAL = 32 * 1024, 2, 32, 128
GiB, KiB = 2 ** 30, 2 ** 10


def variant_row(name: str, kv_heads: int, positions: int, cache_bytes: float) -> dict:
    return {"variant": name, "kv_heads": kv_heads, "positions_kept": positions, "bytes_per_token": cache_bytes / CONTEXT,
            "cache_bytes_32k": cache_bytes}


def fp16_cache(kv_heads: int, positions: int) -> int:
    return kv_bytes_per_token(LLAMA3_8B.layers, kv_heads, LLAMA3_8B.head_dim, FP16) * positions


MEMORY_TABLE = [
    variant_row("MHA", 32, CONTEXT, fp16_cache(32, CONTEXT)),
    variant_row("GQA-8", 8, CONTEXT, fp16_cache(8, CONTEXT)),
    variant_row("MQA", 1, CONTEXT, fp16_cache(1, CONTEXT)),
    variant_row(f"GQA-8, W = {MISTRAL_WINDOW:,}", 8, MISTRAL_WINDOW - 1, fp16_cache(8, MISTRAL_WINDOW - 1)),
] + [variant_row(f"GQA-8, int{bits}", 8, CONTEXT, quant_bytes(CONTEXT, bits, LLAMA3_8B, KIVI_RESIDUAL, KIVI_GROUP, FP16))
     for bits in (8, 4)]
say_table([[f"`{r['variant']}`", str(r["kv_heads"]), f"{r['positions_kept']:,}", f"{r['cache_bytes_32k'] / r['positions_kept'] / KiB:.1f}",
            f"{r['cache_bytes_32k'] / GiB:.2f}"] for r in MEMORY_TABLE],
          en=["variant", "K/V heads", "positions kept", "per position kept (KiB)", "one 32k context (GiB)"],
          zh=["变体", "K/V 头数", "保留的位置数", "每个保留位置的大小（KiB）", "一个 32k 上下文（GiB）"])

# %% [markdown] lang="en"
# The rows, asserted. MHA needs {{run:memory.mha_kib_per_token:.0f}} KiB per token and
# {{run:memory.mha_gib:.0f}} GiB for one 32k context, more than all the FP16 weights of Llama 3 8B itself
# ({{run:memory.weights_gib:.1f}} GiB for this GQA-8 model, computed from the same configuration). GQA-8 divides both by 4 and MQA by
# 32. The window of 4,096 caps the cache at 4,095 positions, {{run:memory.window_gib:.2f}} GiB however long the
# context. int8 and int4 keep {{run:memory.int8_fraction:.1%}} and {{run:memory.int4_fraction:.1%}} of GQA-8's
# cache: half and a quarter, plus a few percent for the scales and the full-precision window.

# %% [markdown] lang="zh"
# 用断言核对各行。MHA 每个 token 需要 {{run:memory.mha_kib_per_token:.0f}} KiB，一个 32k 上下文需要 {{run:memory.mha_gib:.0f}} GiB，比 Llama 3 8B 本身的全部 FP16 权重（这个 GQA-8 模型为 {{run:memory.weights_gib:.1f}} GiB，用同一份配置算出）还多。GQA-8 把两者都缩小到 1/4，MQA 缩小到 1/32。4,096 的窗口把缓存限制在 4,095 个位置，无论上下文多长，都只有 {{run:memory.window_gib:.2f}} GiB。int8 和 int4 缓存的大小分别是 GQA-8 的 {{run:memory.int8_fraction:.1%}} 和 {{run:memory.int4_fraction:.1%}}，即一半和四分之一，再加上缩放因子和全精度窗口所占的几个百分点。

# %%
def llama_parameters(c: ArchConfig) -> int:
    # [en] Embeddings + per layer (q, k, v, o, gate, up, down, two RMSNorms) + final RMSNorm + untied lm_head.
    # [zh] 嵌入 + 每层（q、k、v、o、gate、up、down 以及两个 RMSNorm）+ 最后的 RMSNorm + 不共享权重的 lm_head。
    attention = c.width * c.heads * c.head_dim * 2 + c.width * c.n_kv * c.head_dim * 2
    return c.vocab * c.width + c.layers * (attention + 3 * c.width * c.mlp + 2 * c.width) + c.width + c.width * c.vocab


rows = {r["variant"]: r["cache_bytes_32k"] for r in MEMORY_TABLE}
weights_gib = llama_parameters(LLAMA3_8B) * FP16 / GiB
MEMORY = {"mha_kib_per_token": rows["MHA"] / CONTEXT / KiB, "mha_gib": rows["MHA"] / GiB, "weights_gib": weights_gib,
          "window_gib": rows[f"GQA-8, W = {MISTRAL_WINDOW:,}"] / GiB,
          "int8_fraction": rows["GQA-8, int8"] / rows["GQA-8"], "int4_fraction": rows["GQA-8, int4"] / rows["GQA-8"]}
assert rows["GQA-8"] * 4 == rows["MHA"] == rows["MQA"] * 32 and rows["MHA"] / GiB > weights_gib
assert 0.5 < MEMORY["int8_fraction"] < 0.55 and 0.25 < MEMORY["int4_fraction"] < 0.3

# %% [markdown] lang="en"
# The same numbers as a figure, one bar per variant: the cache of one 32k-token context.

# %% [markdown] lang="zh"
# 同样的数字画成图，每种变体一根柱子：一个 32k token 的上下文的缓存大小。

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 3.4))
bars = ax.barh([r["variant"] for r in MEMORY_TABLE][::-1], [r["cache_bytes_32k"] / GiB for r in MEMORY_TABLE][::-1], color="tab:blue")
ax.bar_label(bars, fmt="%.2f GiB", padding=3, fontsize=8)
ax.axvline(weights_gib, color="gray", linestyle=":", label="weights, FP16")
ax.set_xlim(0, 1.3 * max(weights_gib, max(r["cache_bytes_32k"] for r in MEMORY_TABLE) / GiB))
ax.set_xlabel("GiB")
ax.set_title("Llama 3 8B, 32k-token context: K/V cache", fontsize=9)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
MEMORY_PNG = OUT / "memory.png"
fig.savefig(MEMORY_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: the K/V cache of one 32k-token context (32,768 positions, batch 1) for each variant of the table, on
# Llama 3 8B's shape (title), one bar per row of the table (`GQA-8` is Llama 3 8B itself), in GiB. The dotted line
# ("weights, FP16") marks Llama 3 8B's FP16 weights: MHA's cache alone is larger.*

# %% [markdown] lang="zh"
# *图：以 Llama 3 8B 的形状（见标题）为例，表中每种变体在一个 32k token 的上下文（32,768 个位置，batch 为 1）下的 K/V 缓存大小。表格每一行对应一根柱子（`GQA-8` 即 Llama 3 8B 本身），单位为 GiB。点线（图例 weights, FP16）标出 Llama 3 8B 的 FP16 权重大小：单是 MHA 的缓存就比它还大。*

# %% tags=["prose-values"]
{"memory": MEMORY}
