# %% [markdown] lang="en"
# **The configuration.** `ArchConfig` holds the first notebook's `DecoderConfig` sizes, with the same defaults,
# and adds one field per design change. With every field at its default it describes the first notebook's
# GPT-2-shaped decoder: learned
# positions, LayerNorm, the GELU `MLP`, biases, one K/V head per query head. Llama 3 changes five of
# them: fewer K/V heads (`kv_heads`; Llama 1 and Llama 2 7B/13B still had one per query head), rotary position embeddings instead of a position table (`rope`), RMSNorm
# (`norm="rms"`), the gated SiLU MLP $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$
# (`mlp_kind="swiglu"`) and no biases. Only the first two touch the cache; the others are there so that
# Hugging Face models can check ours weight for weight.

# %% [markdown] lang="zh"
# **配置。** `ArchConfig` 沿用第一份笔记本 `DecoderConfig` 的各项尺寸（默认值相同），再为每种设计改动增加一个字段。所有字段都取默认值时，它描述的就是第一份笔记本中 GPT-2 结构的解码器：可学习的位置嵌入、LayerNorm、GELU `MLP`、带偏置、每个查询头各有一个 K/V 头。Llama 3 改动了其中五处：更少的 K/V 头（`kv_heads`；Llama 1 和 Llama 2 7B/13B 仍是每个查询头各有一个 K/V 头）、用旋转位置编码代替位置嵌入表（`rope`）、RMSNorm（`norm="rms"`）、带门控的 SiLU MLP $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$（`mlp_kind="swiglu"`），以及不带偏置。只有前两处涉及缓存；其余几处是为了让 Hugging Face 模型能载入与我们相同的权重，以便用它核对我们的模型。

# %%
@dataclass
class ArchConfig:
    # [en] The first notebook's sizes (DecoderConfig's fields, same defaults).
    # [zh] 第一份笔记本的各项尺寸（即 DecoderConfig 的字段，默认值相同）。
    vocab: int = 97
    width: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 256
    max_positions: int = 512
    # [en] K/V heads per layer; None: one per query head (MHA).
    # [zh] 每层的 K/V 头数；None 表示每个查询头各有一个（MHA）。
    kv_heads: int | None = None
    # [en] Rotary position embeddings (`Rotary`) in every attention layer instead of a learned position table.
    # [zh] 在每个注意力层中使用旋转位置编码（`Rotary`），代替可学习的位置嵌入表。
    rope: bool = False
    rope_theta: float = 10000.0
    # [en] The rest never touches the cache (ignore on a first read): they let Hugging Face referees load our weights.
    # [en] "layer" (LayerNorm, GPT-2) or "rms" (RMSNorm, Llama); eps of either.
    # [zh] 以下几项与缓存无关（初读可略过），只为让 Hugging Face 的参照模型能载入我们的权重。
    # [zh] "layer"（LayerNorm，GPT-2）或 "rms"（RMSNorm，Llama）；eps 对两者都适用。
    norm: str = "layer"
    eps: float = 1e-5
    # [en] "gelu" (GPT-2's MLP) or "swiglu" (Llama's gated SiLU MLP).
    # [zh] "gelu"（GPT-2 的 MLP）或 "swiglu"（Llama 带门控的 SiLU MLP）。
    mlp_kind: str = "gelu"
    bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def n_kv(self) -> int:
        return self.kv_heads or self.heads


def norm_layer(c: ArchConfig) -> nn.Module:
    return nn.RMSNorm(c.width, eps=c.eps) if c.norm == "rms" else nn.LayerNorm(c.width, eps=c.eps)

# %% [markdown] lang="en"
# **The attention layer.** `Attention` projects $H$ query heads and $H_{kv}$ K/V heads, rotates Q and K at the
# tokens' absolute positions with `Rotary` when the model uses RoPE, hands the new K/V to
# its layer cache, and attends to what the cache returns under the mask that
# its `mask` method computes from positions. A variant is a subclass that overrides what it changes:
# `new_cache` (what the layer keeps), `mask` (which keys a query may read), `rotate` (how positions enter),
# `attend` (how the scores and the weighted sum are computed), or `forward` itself.

# %% [markdown] lang="zh"
# **注意力层。** `Attention` 投影出 $H$ 个查询头和 $H_{kv}$ 个 K/V 头；如果模型使用 RoPE，就用 `Rotary` 按 token 的绝对位置旋转 Q 和 K；然后把新的 K/V 交给本层的缓存，再用 `mask` 方法由位置算出掩码，对缓存返回的内容计算注意力。每种变体都是一个子类，只重写它要改动的部分：`new_cache`（这一层保留什么）、`mask`（查询可以读取哪些键）、`rotate`（位置怎样进入计算）、`attend`（怎样计算分数和加权和），或者 `forward` 本身。

# %%
class Attention(nn.Module):
    def __init__(self, c: ArchConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.heads, c.n_kv, c.head_dim
        self.q = nn.Linear(c.width, c.heads * c.head_dim, bias=c.bias)
        self.k = nn.Linear(c.width, c.n_kv * c.head_dim, bias=c.bias)
        self.v = nn.Linear(c.width, c.n_kv * c.head_dim, bias=c.bias)
        self.proj = nn.Linear(c.heads * c.head_dim, c.width, bias=c.bias)
        # [en] None unless rope=True; Rotary, the RoPE code, is defined before any model that sets rope is built.
        # [zh] 只有 rope=True 时才不为 None；RoPE 的代码 Rotary 会在构造任何设了 rope 的模型之前定义。
        self.rotary = Rotary(c.head_dim, c.max_positions, c.rope_theta) if c.rope else None

    # [en] The four override points: a variant subclass overrides those it changes (GQA overrides none).
    # [zh] 下面四个方法可供重写：每种变体的子类只重写它要改动的那些（GQA 一个都不用重写）。

    def new_cache(self, caches: list):
        # [en] The cache of this layer. `caches` holds those of the layers below, for a layer that reuses a lower
        # [en] layer's cache.
        # [zh] 本层的缓存。`caches` 中是下面各层的缓存，供复用下面某一层缓存的层使用。
        return FullKV()

    def mask(self, query_pos, key_pos):
        return causal(query_pos, key_pos)

    def rotate(self, x, positions):
        return x if self.rotary is None else self.rotary(x, positions)

    def attend(self, q, keys, values, allowed):
        return softmax_attention(q, keys, values, allowed)

    def forward(self, x, positions, cache):                                      # x: [B, T_new, width]
        q = self.rotate(split_heads(self.q(x), self.heads), positions)           # [B, H, T_new, D]
        k = self.rotate(split_heads(self.k(x), self.kv_heads), positions)        # [B, H_kv, T_new, D]
        v = split_heads(self.v(x), self.kv_heads)
        keys, values, key_pos = cache.update(k, v, positions)                    # [B, H_kv, T_keys, D]
        context = self.attend(q, keys, values, self.mask(positions, key_pos))    # [B, H, T_new, D]
        return self.proj(merge_heads(context))

# %% [markdown] lang="en"
# **The decoder.** The gated MLP, a pre-norm layer (an attention residual, then an MLP residual), and the
# decoder. `Decoder(config, attention)` calls `attention(i)` to build layer $i$'s attention (by default an
# `Attention` in every layer), so a model whose layers differ is described by one function. The parameter
# names are the first notebook's (`wte`, `wpe`, `blocks`, `ln_1`, `attn.q`, `attn.k`, `attn.v`, `attn.proj`,
# `ln_2`, `mlp`, `ln_f`, `lm_head`), so that decoder's weights load into this one unchanged. `new_cache()` asks
# the layers in order for their caches, passing each the list made so far; `forward(ids, cache)` numbers the
# new tokens from `cache[0].seen`, where the cache ends (a caller may pass other `positions`), and returns
# the logits and the cache. The code is folded: it does only what this paragraph says, and can be skipped on a
# first read.

# %% [markdown] lang="zh"
# **解码器。** 下面依次是带门控的 MLP、前置归一化的 Transformer 块（先是注意力残差，再是 MLP 残差）和解码器本身。`Decoder(config, attention)` 调用 `attention(i)` 构造第 $i$ 层的注意力（默认每层都是 `Attention`），因此各层不同的模型也只需一个函数就能描述。参数名沿用第一份笔记本（`wte`、`wpe`、`blocks`、`ln_1`、`attn.q`、`attn.k`、`attn.v`、`attn.proj`、`ln_2`、`mlp`、`ln_f`、`lm_head`），所以那个解码器的权重可以原样加载进来。`new_cache()` 依次请各层创建自己的缓存，并把已经创建好的列表传给每一层；`forward(ids, cache)` 从 `cache[0].seen` 开始为新 token 编号（即紧接在缓存末尾之后；调用方也可以传入别的 `positions`），返回 logits 和缓存。代码已折叠：它只做这一段所说的事，初读时可以跳过。

# %% tags=["hide-input"]
class SwiGLU(nn.Module):
    def __init__(self, c: ArchConfig):
        super().__init__()
        self.gate = nn.Linear(c.width, c.mlp, bias=c.bias)
        self.up = nn.Linear(c.width, c.mlp, bias=c.bias)
        self.down = nn.Linear(c.mlp, c.width, bias=c.bias)

    def forward(self, x):                                                        # [B, T, width] -> [B, T, width]
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, c: ArchConfig, attn: nn.Module):
        super().__init__()
        self.ln_1, self.attn = norm_layer(c), attn
        # [en] MLP, the first notebook's GELU MLP, is looked up only when mlp_kind is "gelu".
        # [zh] 只有 mlp_kind 为 "gelu" 时才会用到 MLP（第一份笔记本中的 GELU MLP）。
        self.ln_2, self.mlp = norm_layer(c), SwiGLU(c) if c.mlp_kind == "swiglu" else MLP(c)

    def forward(self, x, positions, cache):
        x = x + self.attn(self.ln_1(x), positions, cache)
        return x + self.mlp(self.ln_2(x))


class Decoder(nn.Module):
    def __init__(self, c: ArchConfig, attention=None):
        super().__init__()
        self.config = c
        attention = attention or (lambda i: Attention(c))
        self.wte = nn.Embedding(c.vocab, c.width)
        self.wpe = None if c.rope else nn.Embedding(c.max_positions, c.width)
        self.blocks = nn.ModuleList(Layer(c, attention(i)) for i in range(c.layers))
        self.ln_f = norm_layer(c)
        self.lm_head = nn.Linear(c.width, c.vocab, bias=False)

    def new_cache(self) -> list:
        caches = []
        for block in self.blocks:
            caches.append(block.attn.new_cache(caches))
        return caches

    def forward(self, ids, cache=None, positions=None):                          # ids: [B, T_new]
        cache = self.new_cache() if cache is None else cache
        if positions is None:
            positions = cache[0].seen + torch.arange(ids.shape[1])               # [T_new]
        x = self.wte(ids) if self.wpe is None else self.wte(ids) + self.wpe(positions)    # [B, T_new, width]
        for block, layer_cache in zip(self.blocks, cache):
            x = block(x, positions, layer_cache)
        return self.lm_head(self.ln_f(x)), cache                                 # [B, T_new, vocab]


def build(c: ArchConfig, attention=None, seed: int = SEED) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(c, attention).eval()
