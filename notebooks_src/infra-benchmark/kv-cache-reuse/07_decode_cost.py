# %% [markdown] lang="en"
# ## 8. What a decode step reads and computes
#
# Count what one decode step does, for a batch of $B$ sequences that each have $T$ keys to read (their
# cache and the new token itself). Every weight matrix is read from memory once and used by all $B$ new
# tokens: one multiply-add per weight and token. The embedding tables are the exception: a step reads only
# the $B$ rows it looks up. Each sequence's cache is read once and used by that sequence alone: per layer
# and query head, $D_h$ multiply-adds per key for the scores and $D_h$ per value for the output, so
# $2 \cdot L \cdot H \cdot D_h \cdot T$ per sequence. The **arithmetic intensity** is the work per byte read:
#
# $$I = \frac{2 \cdot (\text{multiply-adds})}{\text{bytes read}} \ \text{FLOP/byte}.$$
#
# With $s$ bytes per element, the weights contribute $2B / s$ FLOP/byte: batching raises it, because the
# same bytes serve more tokens. The cache contributes $2 \cdot 2 H D_h T / (2 H_{kv} D_h T s) = 2g/s$ with
# $g = H / H_{kv}$ query heads per K/V head: batching does not change it, because every sequence brings its
# own cache (shared-prefix kernels aside, section 6). Grouped-query attention (GQA) raises it $g$-fold.
#
# **Multi-head latent attention** (MLA, used by DeepSeek-V2) raises it further: for DeepSeek-V2-Lite, its cache
# part does {{run:cost.mla_factor:.1f}} times as many FLOPs per byte as multi-head attention's. The derivation is
# optional for the rest of this notebook.
#
# <details><summary>Where MLA's factor comes from (optional)</summary>
#
# Per layer and token MLA caches
# not a key and a value per head but two vectors that all heads share:
#
# * a **latent vector** of $r$ numbers (`kv_lora_rank` in the configuration: $r = 512$ in DeepSeek-V2-Lite), from
#   which up-projections compute every head's key and value;
# * a **decoupled RoPE key** of $d_R$ numbers that carries the position (`qk_rope_head_dim`: $d_R = 64$).
#
# MLA decode kernels **absorb** the up-projections: the key's is folded into the query, the value's is applied
# after attention, so every head works on the cached numbers themselves. Per cached position and head, the
# score then costs $r$ multiply-adds for the latent part plus $d_R$ for the RoPE part, and the output $r$ more:
# $2r + d_R$. Over the $H$ query heads ($H = 16$ in DeepSeek-V2-Lite), that is $H (2r + d_R)$ multiply-adds for
# the $r + d_R$ numbers read, so the cache part's intensity is $2H(2r + d_R) / ((r + d_R)\, s)$: a factor
# $H(2r + d_R) / (r + d_R)$ above multi-head attention's $2/s$ ({{run:cost.mla_factor:.1f}} for DeepSeek-V2-Lite).
# (Another notebook of this series, on [compressing the cache]({{colab:infra-benchmark/kv-cache-compression}}),
# builds MLA and its absorbed form with the same notation.)
#
# </details>
#
# The next cell, folded, is bookkeeping to skip on a first read: `ModelShape` holds the fields of a configuration that
# matter here, and `parameters` counts its parameters matrix by matrix, with biases, tied embeddings, MLA and
# mixtures of experts (MoE). The ideas of this section are in `decode_step_cost`, the cell after it.

# %% [markdown] lang="zh"
# ## 8. 一个解码步读了什么、算了什么
#
# 先来数一数一个解码步做了什么。设 batch 中有 $B$ 条序列，每条都要读取 $T$ 个键（它的缓存，加上新 token 自己）。每个权重矩阵从内存读出一次，供全部 $B$ 个新 token 使用：每个权重、每个 token 一次乘加。嵌入表是例外：一步只读取查到的那 $B$ 行。每条序列的缓存也读一次，但只供这条序列自己使用：每层每个查询头，算分数时每个键 $D_h$ 次乘加，算输出时每个值 $D_h$ 次乘加，所以每条序列共 $2 \cdot L \cdot H \cdot D_h \cdot T$ 次。**算术强度**就是每读一个字节所做的运算量：
#
# $$I = \frac{2 \cdot (\text{乘加次数})}{\text{读取的字节数}} \ \text{FLOP/字节}.$$
#
# 每个元素占 $s$ 字节时，权重部分的算术强度为 $2B / s$ FLOP/字节：batch 越大，同样的字节服务的 token 越多，强度就越高。缓存部分的算术强度为 $2 \cdot 2 H D_h T / (2 H_{kv} D_h T s) = 2g/s$，其中 $g = H / H_{kv}$ 是每个 K/V 头对应的查询头数：batch 大小改变不了它，因为每条序列都带着自己的缓存（专为共享前缀设计的内核除外，见第 6 节）。分组查询注意力（GQA）把它提高到原来的 $g$ 倍。
#
# **多头潜在注意力**（MLA，DeepSeek-V2 采用）提得更高：对 DeepSeek-V2-Lite，它的缓存部分每个字节的浮点运算次数是多头注意力的 {{run:cost.mla_factor:.1f}} 倍。后文不依赖下面的推导，可以跳过。
#
# <details><summary>MLA 的这个倍数从何而来（可选）</summary>
#
# MLA 在每层为每个 token 缓存的不是每个头各自的键和值，而是所有头共用的两个向量：
#
# * 一个 $r$ 维的**潜向量**（配置中的 `kv_lora_rank`，DeepSeek-V2-Lite 中 $r = 512$），每个头的键和值都由上投影从它算出；
# * 一个 $d_R$ 维的**解耦的 RoPE 键**，它携带位置信息（`qk_rope_head_dim`，$d_R = 64$）。
#
# MLA 的解码内核会**吸收**上投影：键的上投影并入查询，值的上投影在注意力之后再乘，于是每个头直接在缓存的数上计算。对每个缓存位置、每个头，算分数时潜向量部分要 $r$ 次乘加，RoPE 部分要 $d_R$ 次，算输出还要 $r$ 次：共 $2r + d_R$ 次。乘上 $H$ 个查询头（DeepSeek-V2-Lite 中 $H = 16$），就是读取 $r + d_R$ 个数、做 $H (2r + d_R)$ 次乘加，所以缓存部分的算术强度为 $2H(2r + d_R) / ((r + d_R)\, s)$：是多头注意力的 $2/s$ 的 $H(2r + d_R) / (r + d_R)$ 倍（DeepSeek-V2-Lite 为 {{run:cost.mla_factor:.1f}} 倍）。（本系列中讲[压缩缓存]({{colab:infra-benchmark/kv-cache-compression}})的那份笔记本用同样的记号实现了 MLA 及其吸收形式。）
#
# </details>
#
# 下一个单元格已折叠，只是记账，初读时可以跳过：`ModelShape` 记录配置中与这里有关的字段，`parameters` 逐个矩阵数出参数量，偏置、共享嵌入权重、MLA 和混合专家（MoE）都考虑在内。本节的要点在它之后的 `decode_step_cost` 里。

# %% tags=["hide-input"]
@dataclass
class ModelShape:
    name: str
    source: str
    vocab: int
    width: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    # [en] SwiGLU MLP (gate, up, down) or GELU MLP (two matrices); GPT-2 style biases and LayerNorms, tied embeddings.
    # [zh] SwiGLU MLP（gate、up、down 三个矩阵）或 GELU MLP（两个矩阵）；GPT-2 式的偏置和 LayerNorm；共享嵌入权重。
    gated_mlp: bool = True
    biases: bool = False
    tied: bool = False
    positions: int = 0
    # [en] MLA: kv_lora_rank and qk_rope_head_dim. MoE: routed experts, experts per token, shared experts, expert MLP width, dense first layers.
    # [zh] MLA：kv_lora_rank 和 qk_rope_head_dim。MoE：路由专家数、每个 token 选用的专家数、共享专家数、专家 MLP 宽度、开头几层稠密层。
    latent: int = 0
    rope_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_mlp: int = 0
    dense_layers: int = 0


def attention_matrices(s: ModelShape) -> int:
    if s.latent:
        # [en] MLA without query compression: q, kv_a (latent + rope key), kv_b (latent -> per-head key and value), o.
        # [zh] 不压缩查询的 MLA：q、kv_a（潜向量加 RoPE 键）、kv_b（潜向量 → 每个头的键和值）、o。
        return (s.width * s.heads * (s.head_dim + s.rope_dim) + s.width * (s.latent + s.rope_dim)
                + s.latent * s.heads * 2 * s.head_dim + s.heads * s.head_dim * s.width)
    return s.width * (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim * s.width


def mlp_matrices(s: ModelShape, hidden: int) -> int:
    return (3 if s.gated_mlp else 2) * s.width * hidden


def vectors(s: ModelShape) -> int:
    # [en] Norm weights (and biases): two norms per layer (MLA adds one on the latent), one final norm.
    # [zh] 归一化层的权重（以及偏置）：每层两个归一化层（MLA 在潜向量上再加一个），最后还有一个。
    per_layer = 2 * s.width * (2 if s.biases else 1) + s.latent
    if s.biases:
        per_layer += (s.heads + 2 * s.kv_heads) * s.head_dim + s.width + s.mlp + s.width
    return s.layers * per_layer + s.width * (2 if s.biases else 1)


def parameters(s: ModelShape) -> dict:
    moe_layers = s.layers - s.dense_layers if s.experts else 0
    expert = mlp_matrices(s, s.expert_mlp) if s.experts else 0
    # [en] Matrices every token multiplies by: attention, dense MLPs, routers, shared experts, the vocabulary projection.
    # [zh] 每个 token 都要乘的矩阵：注意力、稠密 MLP、路由器、共享专家、词表投影。
    common = (s.layers * attention_matrices(s) + (s.layers - moe_layers) * mlp_matrices(s, s.mlp)
              + moe_layers * (s.experts * s.width + s.shared_experts * expert) + s.width * s.vocab)
    tables = s.vocab * s.width * (0 if s.tied else 1) + s.positions * s.width
    return {"total": common + moe_layers * s.experts * expert + vectors(s) + tables,
            "per_token": common + moe_layers * s.experts_per_token * expert, "common": common,
            "expert": expert, "moe_layers": moe_layers}

# %% [markdown] lang="en"
# `decode_step_cost` applies the counts above to one decode step: the bytes it reads (the weight matrices a
# batch uses, the norm vectors, the embedding rows it looks up, and every sequence's cache) and the
# multiply-adds it does (weights and attention), and from them the intensities of the whole step, of its
# weight part and of its cache part.

# %% [markdown] lang="zh"
# `decode_step_cost` 把上面的计数用到一个解码步上：它读取的字节（一个 batch 用到的权重矩阵、归一化层的向量、查到的嵌入行，以及每条序列的缓存）和它做的乘加次数（权重部分和注意力部分），再由此算出整步、权重部分和缓存部分各自的算术强度。

# %%
# [en] One decode step: B new tokens, each reading `context` keys (its cache plus itself).
# [zh] 一个解码步：B 个新 token，每个读取 `context` 个键（它的缓存加上它自己）。
def decode_step_cost(s: ModelShape, batch: int, context: int, bytes_per_element: int) -> dict:
    p = parameters(s)
    # [en] MoE: the experts a batch touches, expected under uniform routing; dense models read every matrix.
    # [zh] MoE：一个 batch 用到的专家数，按均匀路由取期望；稠密模型读取每个矩阵。
    experts_read = s.experts * (1 - (1 - s.experts_per_token / s.experts) ** batch) if s.experts else 0
    matrices_read = p["common"] + p["moe_layers"] * experts_read * p["expert"]
    embedding_rows = batch * s.width * (2 if s.positions else 1)
    if s.latent:
        kv_per_token = s.layers * (s.latent + s.rope_dim) * bytes_per_element
        attention_macs = s.layers * s.heads * (2 * s.latent + s.rope_dim) * context
    else:
        kv_per_token = kv_bytes_per_token(s.layers, s.kv_heads, s.head_dim, bytes_per_element)
        attention_macs = 2 * s.layers * s.heads * s.head_dim * context
    cost = {"weight_bytes": bytes_per_element * (matrices_read + vectors(s) + embedding_rows),
            "kv_bytes": batch * context * kv_per_token,
            "weight_macs": batch * p["per_token"], "attention_macs": batch * attention_macs}
    cost["intensity"] = 2 * (cost["weight_macs"] + cost["attention_macs"]) / (cost["weight_bytes"] + cost["kv_bytes"])
    cost["weight_intensity"] = 2 * cost["weight_macs"] / cost["weight_bytes"]
    cost["cache_intensity"] = 2 * cost["attention_macs"] / cost["kv_bytes"]
    return cost

# %% [markdown] lang="en"
# Before applying these counts to published models, we check them on a real decode step of our decoder.
# PyTorch's `FlopCounterMode` records the floating-point operations of every matrix multiplication the step
# runs; they must equal twice our count of multiply-adds, exactly, for several batch sizes and cache lengths,
# and the bytes of the cache after the step must equal the formula's. The negative control counts only the
# cached positions as keys, forgetting that the new token attends to itself too; it must disagree. The same
# functions also count our decoder's parameters, which must come to the {{run:cost.our_parameters:,}} of section 3.

# %% [markdown] lang="zh"
# 把这些计数用到公开模型上之前，先在我们解码器的真实解码步上核对一遍。PyTorch 的 `FlopCounterMode` 会记录这一步中每次矩阵乘法的浮点运算次数；对几种 batch 大小和缓存长度，它都必须恰好等于我们所数乘加次数的两倍，这一步之后缓存的字节数也必须等于公式给出的值。负对照只把缓存中的位置算作键，忘了新 token 也要读取它自己的键；它必须与统计结果不符。同样几个函数还能数出我们解码器的参数量，结果必须是第 3 节的 {{run:cost.our_parameters:,}}。

# %%
from torch.utils.flop_counter import FlopCounterMode

OURS = ModelShape("our decoder", "DecoderConfig()", cfg.vocab, cfg.width, cfg.layers, cfg.heads, cfg.heads, cfg.head_dim,
                  cfg.mlp, gated_mlp=False, biases=True, positions=cfg.max_positions)


@torch.inference_mode()
def counted_step(batch, cached):
    ids = torch.randint(0, cfg.vocab, (batch, cached + 1), generator=torch.Generator().manual_seed(SEED + 40))
    _, cache = model(ids[:, :-1])
    with FlopCounterMode(display=False) as counter:
        _, cache = model(ids[:, -1:], cache)
    return counter.get_total_flops(), sum(t.numel() * t.element_size() for pair in cache for t in pair)


COUNT_GRID = []
for batch, cached in ((1, 15), (1, 255), (4, 255), (16, 100)):
    flops, kv_bytes = counted_step(batch, cached)
    ours, keys_only = decode_step_cost(OURS, batch, cached + 1, 4), decode_step_cost(OURS, batch, cached, 4)
    COUNT_GRID.append({"batch": batch, "keys": cached + 1, "flops": flops, "formula": 2 * (ours["weight_macs"] + ours["attention_macs"]),
                       "control": 2 * (keys_only["weight_macs"] + keys_only["attention_macs"]),
                       "kv_bytes": kv_bytes, "kv_formula": ours["kv_bytes"]})
say_table([[str(r["batch"]), str(r["keys"]), f"{r['flops']:,}", f"{r['formula']:,}", f"{r['control']:,}", f"{r['kv_bytes']:,}", f"{r['kv_formula']:,}"]
           for r in COUNT_GRID],
          en=["batch B", "keys per token", "FLOPs counted by PyTorch", "2 x our multiply-adds", "control: cache only",
              "K/V bytes of the cache", "K/V bytes, formula"],
          zh=["batch $B$", "每个 token 的键数", "PyTorch 统计的浮点运算次数", "2 × 我们数的乘加次数", "负对照：只数缓存",
              "缓存的 K/V 字节数", "K/V 字节数（公式）"])
assert all(r["flops"] == r["formula"] and r["kv_bytes"] == r["kv_formula"] for r in COUNT_GRID)
assert parameters(OURS)["total"] == N_PARAMS
COUNT_CONTROL_CAUGHT = all(r["control"] != r["flops"] for r in COUNT_GRID)
assert COUNT_CONTROL_CAUGHT

# %% [markdown] lang="en"
# **Published configurations.** The shapes below are typed from each model's `config.json` on the Hugging Face
# Hub (the source of every number is named in the code; nothing is downloaded): GPT-2 (multi-head attention,
# $g = 1$), Llama 2 7B (the same, at 7B scale), Llama 3.1 8B and 70B (grouped-query attention, $g = 4$ and $g = 8$),
# and DeepSeek-V2-Lite (MLA, and a mixture of experts: each token uses 6 of 64 routed experts plus 2 shared
# ones in 26 of its 27 layers). As a check on the typing, the parameters counted from each shape must match
# the size the model's Hugging Face page reports, to 0.5%; as a control, Llama 3.1 8B counted with 32 K/V
# heads instead of 8 must not. The table then gives, at a context of {{run:cost.context:,}} tokens and 16-bit
# weights and cache (2 bytes), what one decode step reads and its arithmetic intensity at batch 1 and 64;
# for the mixture of experts, a larger batch touches more experts (a batch of 64 reads nearly all 64 of
# DeepSeek-V2-Lite's). GPT-2 has only 1,024 positions: its row at 4,096 is what the formulas give.
#
# <details><summary>How many experts a batch reads (optional)</summary>
#
# With $E$ routed experts per layer, of which each token picks $e$, and uniform routing, one token misses a given
# expert with probability $1 - e/E$ and all $B$ tokens miss it with probability $(1 - e/E)^B$, so a batch reads
# $E\,(1 - (1 - e/E)^B)$ experts per layer on average.
#
# </details>

# %% [markdown] lang="zh"
# **公开模型的配置**：下面的尺寸取自各模型在 Hugging Face Hub 上的 `config.json`（每个数的出处都写在代码里；不下载任何东西）：GPT-2（多头注意力，$g = 1$），Llama 2 7B（同样是多头注意力，规模 7B），Llama 3.1 8B 和 70B（分组查询注意力，$g$ 分别为 4 和 8），以及 DeepSeek-V2-Lite（MLA，同时是混合专家模型：在 27 层中的 26 层里，每个 token 使用 64 个路由专家中的 6 个，外加 2 个共享专家）。为了核对录入是否有误，按每组尺寸数出的参数量必须与该模型 Hugging Face 页面上给出的规模相差不超过 0.5%；作为负对照，把 Llama 3.1 8B 的 K/V 头数从 8 改成 32 再数，结果必须对不上。随后的表格给出上下文为 {{run:cost.context:,}} 个 token、权重和缓存都用 16 位（2 字节）时，一个解码步读取的数据量，以及 batch 为 1 和 64 时的算术强度；对混合专家模型，batch 越大，用到的专家越多（64 个 token 的 batch 几乎会用到 DeepSeek-V2-Lite 的全部 64 个专家）。GPT-2 只有 1,024 个位置：它在 4,096 个 token 下的那一行只是公式算出的结果。
#
# <details><summary>一个 batch 会读取多少个专家（可选）</summary>
#
# 设每层有 $E$ 个路由专家，每个 token 从中选 $e$ 个，且路由是均匀的：一个 token 没有选中某个专家的概率为 $1 - e/E$，$B$ 个 token 都没有选中它的概率为 $(1 - e/E)^B$，所以一个 batch 平均每层读取 $E\,(1 - (1 - e/E)^B)$ 个专家。
#
# </details>

# %%
PUBLISHED = [
    (ModelShape("GPT-2", "openai-community/gpt2 config.json: vocab_size 50257, n_positions 1024, n_embd 768, n_layer 12, "
                "n_head 12, n_inner null (4 * n_embd), tie_word_embeddings true", 50257, 768, 12, 12, 12, 64, 3072,
                gated_mlp=False, biases=True, tied=True, positions=1024), 124e6),
    (ModelShape("Llama 2 7B", "meta-llama/Llama-2-7b-hf config.json: vocab_size 32000, hidden_size 4096, intermediate_size 11008, "
                "num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 32", 32000, 4096, 32, 32, 32, 128, 11008), 6.74e9),
    (ModelShape("Llama 3.1 8B", "meta-llama/Llama-3.1-8B config.json: vocab_size 128256, hidden_size 4096, intermediate_size 14336, "
                "num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8, head_dim 128", 128256, 4096, 32, 32, 8, 128, 14336), 8.03e9),
    (ModelShape("Llama 3.1 70B", "meta-llama/Llama-3.1-70B config.json: vocab_size 128256, hidden_size 8192, intermediate_size 28672, "
                "num_hidden_layers 80, num_attention_heads 64, num_key_value_heads 8", 128256, 8192, 80, 64, 8, 128, 28672), 70.6e9),
    (ModelShape("DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V2-Lite config.json: vocab_size 102400, hidden_size 2048, intermediate_size 10944, "
                "num_hidden_layers 27, num_attention_heads 16, q_lora_rank null, kv_lora_rank 512, qk_nope_head_dim 128, "
                "qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 64, num_experts_per_tok 6, n_shared_experts 2, "
                "moe_intermediate_size 1408, first_k_dense_replace 1", 102400, 2048, 27, 16, 16, 128, 10944,
                latent=512, rope_dim=64, experts=64, experts_per_token=6, shared_experts=2, expert_mlp=1408, dense_layers=1), 15.7e9),
]
SHAPES = [shape for shape, _ in PUBLISHED]
COST_CONTEXT, BF16 = 4096, 2
llama_8b = SHAPES[2]
mha_8b = ModelShape(**{**vars(llama_8b), "kv_heads": llama_8b.heads})
SIZE_CHECK = [{"name": s.name, "counted": parameters(s)["total"], "published": published,
               "matches": abs(parameters(s)["total"] / published - 1) < 0.005} for s, published in PUBLISHED]
SIZE_CONTROL = {"counted": parameters(mha_8b)["total"], "published": PUBLISHED[2][1]}
SIZE_CONTROL["caught"] = abs(SIZE_CONTROL["counted"] / SIZE_CONTROL["published"] - 1) >= 0.005
COSTS = {s.name: {batch: decode_step_cost(s, batch, COST_CONTEXT, BF16) for batch in (1, 64)} for s in SHAPES}
GB = 1e9
say_table([[s.name, f"{c['counted'] / 1e9:.3f}", f"{c['published'] / 1e9:.3g}", f"{parameters(s)['per_token'] / 1e9:.2f}",
            f"{COSTS[s.name][1]['weight_bytes'] / GB:.2f}", f"{COSTS[s.name][1]['kv_bytes'] / COST_CONTEXT / 1024:.1f}",
            f"{COSTS[s.name][1]['kv_bytes'] / GB:.3f}", f"{COSTS[s.name][1]['intensity']:.2f}", f"{COSTS[s.name][64]['intensity']:.1f}",
            f"{COSTS[s.name][1]['cache_intensity']:.1f}"] for s, c in zip(SHAPES, SIZE_CHECK)],
          en=["model", "parameters counted (billions)", "published (billions)", "matrix parameters per token (billions)",
              "weights read, B = 1 (GB)", "K/V per token (KiB)",
              "K/V read, B = 1 (GB)", "intensity B = 1", "intensity B = 64", "cache-part intensity"],
          zh=["模型", "数出的参数量（十亿）", "公开的规模（十亿）", "每个 token 用到的矩阵参数量（十亿）",
              "读取的权重，$B = 1$（GB）", "每个 token 的 K/V（KiB）",
              "读取的 K/V，$B = 1$（GB）", "算术强度，$B = 1$", "算术强度，$B = 64$", "缓存部分的算术强度"])
say_table([[s.name, f"`{s.source}`"] for s in SHAPES], en=["model", "source"], zh=["模型", "出处"])
say(en=f"Control, Llama 3.1 8B with 32 K/V heads: counted {SIZE_CONTROL['counted'] / 1e9:.2f}B against the published "
       f"{SIZE_CONTROL['published'] / 1e9:.2f}B: {'caught' if SIZE_CONTROL['caught'] else 'NOT caught'}.",
    zh=f"负对照，K/V 头数改为 32 的 Llama 3.1 8B：数出的参数量为 {SIZE_CONTROL['counted'] / 1e9:.2f}（十亿），公开的规模为 "
       f"{SIZE_CONTROL['published'] / 1e9:.2f}（十亿）：{'已查出' if SIZE_CONTROL['caught'] else '未查出'}。")
assert all(c["matches"] for c in SIZE_CHECK) and SIZE_CONTROL["caught"]
assert all(0.5 < COSTS[s.name][1]["intensity"] < 2 for s in SHAPES)

# %% [markdown] lang="en"
# At batch 1 every model does between {{run:cost.min_intensity_b1:.2f}} and {{run:cost.max_intensity_b1:.2f}} FLOP
# per byte it reads: about one multiply-add per 16-bit weight. At batch 64 the weights serve 64 tokens, and
# the intensity rises, but by very different amounts: Llama 2 7B reaches only {{run:cost.llama2_b64:.1f}}, because
# its cache, read by one sequence each at {{run:cost.llama2_cache:.0f}} FLOP/byte, now outweighs its weights, while
# Llama 3.1 70B, whose cache part runs at {{run:cost.llama70_cache:.0f}} FLOP/byte, reaches {{run:cost.llama70_b64:.1f}}.
# DeepSeek-V2-Lite's MLA cache is the smallest per token and the most reused ({{run:cost.deepseek_cache:.0f}}
# FLOP/byte), but a batch of 64 tokens also reads {{run:cost.deepseek_experts_b64:.1f}} of its 64 experts per layer,
# nearly all of them.
#
# The same split on our own decoder, counted by the functions just checked: the weights' intensity grows
# with the batch, the cache's does not.

# %% [markdown] lang="zh"
# batch 为 1 时，每个模型每读一个字节只做 {{run:cost.min_intensity_b1:.2f}} 到 {{run:cost.max_intensity_b1:.2f}} 次浮点运算：大约每个 16 位权重一次乘加。batch 为 64 时，权重要服务 64 个 token，算术强度随之上升，但升幅相差很大：Llama 2 7B 只升到 {{run:cost.llama2_b64:.1f}}，因为它的缓存每条序列各读一份、强度只有 {{run:cost.llama2_cache:.0f}} FLOP/字节，batch 为 64 时缓存的字节数已超过权重。Llama 3.1 70B 的缓存部分强度为 {{run:cost.llama70_cache:.0f}} FLOP/字节，总强度达到 {{run:cost.llama70_b64:.1f}}。DeepSeek-V2-Lite 的 MLA 缓存每个 token 最小、被复用的程度最高（{{run:cost.deepseek_cache:.0f}} FLOP/字节），但 64 个 token 的 batch 平均每层也要读取 64 个专家中的 {{run:cost.deepseek_experts_b64:.1f}} 个，几乎是全部。
#
# 在我们自己的解码器上做同样的拆分，仍用刚刚核对过的函数来数：权重部分的算术强度随 batch 增大，缓存部分则不变。

# %%
OUR_BATCHES = (1, 4, 16, 64)
OUR_COSTS = [decode_step_cost(OURS, batch, 256, 4) for batch in OUR_BATCHES]
say_table([[str(b), f"{c['weight_bytes']:,}", f"{c['kv_bytes']:,}", f"{c['weight_intensity']:.2f}", f"{c['cache_intensity']:.2f}",
            f"{c['intensity']:.2f}"] for b, c in zip(OUR_BATCHES, OUR_COSTS)],
          en=["batch B", "weight bytes", "K/V bytes", "weights' intensity", "cache's intensity", "step's intensity"],
          zh=["batch $B$", "权重字节数", "K/V 字节数", "权重部分的算术强度", "缓存部分的算术强度", "整步的算术强度"])
assert all(a["weight_intensity"] < b["weight_intensity"] and a["cache_intensity"] == b["cache_intensity"]
           for a, b in zip(OUR_COSTS, OUR_COSTS[1:]))
