# %% [markdown] lang="en"
# ## 4. Grouped-query and multi-query attention
#
# In the decoder of section 3 every one of the $H = 4$ heads projects its own keys and values, so the
# cache holds $H$ K/V heads per layer. Grouped-query attention (GQA) keeps all $H$ query heads but only
# $H_{kv}$ K/V heads, each shared by a group of $g = H / H_{kv}$ consecutive query heads: query head $h$
# reads K/V head $\lfloor h / g \rfloor$. Multi-query attention (MQA) is the extreme case $H_{kv} = 1$,
# and $H_{kv} = H$ is ordinary multi-head attention (MHA). The K and V projections shrink to
# $H_{kv} D_h$ outputs, and so does the cache: each layer keeps `[B, H_kv, T, D_h]`, a factor $g$ less
# than MHA. Only at the moment of attention are the K/V heads expanded to $H$ heads, with
# `repeat_interleave` along the head axis (heads 0, 0, 1, 1 for $H = 4$, $H_{kv} = 2$).
#
# Rather than edit the first notebook's decoder, we build a generalized one next to it, with one small
# option per design change. It reuses `DecoderConfig` (as a base class), the GELU `MLP` and
# `absolute_positions` of section 3 and keeps the same parameter names, so the weights of section 3's
# model load into it unchanged. The configuration comes first. Only `kv_heads` matters in this section;
# `norm`, `mlp_kind` and `bias` describe the Llama family's RMSNorm, gated SiLU MLP and bias-free
# projections, which change nothing about the cache but are needed for the cross-checks with Hugging
# Face models.

# %% [markdown] lang="zh"
# ## 4. 分组查询注意力与多查询注意力
#
# 在第 3 节的解码器里，$H = 4$ 个头各自投影出自己的 K 和 V，所以每层缓存中有 $H$ 个 K/V 头。分组查询注意力（GQA）保留全部 $H$ 个查询头，但只有 $H_{kv}$ 个 K/V 头，每个 K/V 头由 $g = H / H_{kv}$ 个相邻的查询头共享：查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头。多查询注意力（MQA）是 $H_{kv} = 1$ 的极端情形，而 $H_{kv} = H$ 就是普通的多头注意力（MHA）。K 和 V 的投影输出缩小到 $H_{kv} D_h$ 维，缓存也随之缩小：每层保存 `[B, H_kv, T, D_h]`，是 MHA 的 $1/g$。只有到了计算注意力的那一刻，才沿头所在的维度用 `repeat_interleave` 把 K/V 头扩展成 $H$ 个（$H = 4$、$H_{kv} = 2$ 时，扩展后依次是头 0、0、1、1）。
#
# 我们不去改动第一份笔记本的解码器，而是在它旁边另建一个通用版本，每种设计改动对应一个小选项。它复用第 3 节的 `DecoderConfig`（作为基类）、GELU `MLP` 和 `absolute_positions`，参数名也保持不变，因此第 3 节模型的权重可以原样加载进来。先看配置。本节只用到 `kv_heads`；`norm`、`mlp_kind` 和 `bias` 描述 Llama 系列的 RMSNorm、带门控的 SiLU MLP 和不带偏置的投影，它们对缓存毫无影响，但与 Hugging Face 模型交叉核对时要用到。

# %%
@dataclass
class ArchConfig(DecoderConfig):
    # [en] K/V heads per layer; None means one per query head (MHA).
    # [zh] 每层的 K/V 头数；None 表示每个查询头各有一个（MHA）。
    kv_heads: int | None = None
    # [en] "layer" (LayerNorm, GPT-2) or "rms" (RMSNorm, Llama).
    # [zh] "layer"（LayerNorm，GPT-2）或 "rms"（RMSNorm，Llama）。
    norm: str = "layer"
    # [en] "gelu" (GPT-2) or "swiglu" (Llama's gated SiLU MLP).
    # [zh] "gelu"（GPT-2）或 "swiglu"（Llama 带门控的 SiLU MLP）。
    mlp_kind: str = "gelu"
    bias: bool = True
    rope_theta: float = 10000.0

    @property
    def n_kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def groups(self) -> int:
        assert self.heads % self.n_kv == 0, "query heads must split evenly into groups"
        return self.heads // self.n_kv

# %% [markdown] lang="en"
# Expanding the K/V heads to the query heads. `repeat_kv` is the correct rule, the one Hugging Face's
# Llama uses (`repeat_kv` in `modeling_llama.py`, documented as equal to `repeat_interleave`).
# `tile_kv` is a realistic mistake kept for a negative control: `repeat` tiles the heads as 0, 1, 0, 1,
# so query head 1 reads K/V head 1 instead of 0.

# %% [markdown] lang="zh"
# 把 K/V 头扩展到查询头的数量。`repeat_kv` 是正确的规则，与 Hugging Face 的 Llama 相同（`modeling_llama.py` 中的 `repeat_kv`，其文档说明它等价于 `repeat_interleave`）。`tile_kv` 是现实中很容易犯的错误，留作负对照：`repeat` 会把头平铺成 0、1、0、1，于是查询头 1 读到的是 K/V 头 1，而不是头 0。

# %%
def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    # [B, H_kv, T, Dh] -> [B, H_kv * groups, T, Dh]; head h <- K/V head h // groups
    return x.repeat_interleave(groups, dim=1)


def tile_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    # [en] WRONG on purpose: query head h reads K/V head h % H_kv.
    # [zh] 故意写错：查询头 h 读到的是第 h % H_kv 个 K/V 头。
    return x.repeat(1, groups, 1, 1)


def heads_of(expand) -> list[int]:
    # [en] Which K/V head each of 4 query heads reads when there are 2 K/V heads.
    # [zh] 有 2 个 K/V 头时，4 个查询头各自读取哪个 K/V 头。
    return expand(torch.arange(2).view(1, 2, 1, 1), 2).flatten().tolist()


assert heads_of(repeat_kv) == [0, 0, 1, 1] and heads_of(tile_kv) == [0, 1, 0, 1]
assert torch.equal(repeat_kv(torch.arange(4).view(1, 4, 1, 1), 1), tile_kv(torch.arange(4).view(1, 4, 1, 1), 1))
print("repeat_kv:", heads_of(repeat_kv), " tile_kv:", heads_of(tile_kv))

# %% [markdown] lang="en"
# The cache of one layer becomes a small object with one method, `update(k, v, positions)`: store the new
# keys and values and return everything the new queries may read, together with the absolute position
# of every returned key. `FullKV` is the first notebook's cache (keep every position, grow with
# `torch.cat`); sections 6 and 7 add caches that evict or compress. Because every key carries its
# position, the mask is computed from positions, $\mathrm{allowed}_{i,j} = [\,p^k_j \le p^q_i\,]$, which
# for a `FullKV` is exactly section 2's `causal_mask(P, C)` (asserted below). `softmax_attention` is the
# explicit matmul, softmax, matmul of section 3.

# %% [markdown] lang="zh"
# 一层的缓存现在是一个小对象，只有一个方法 `update(k, v, positions)`：存入新的 K/V，返回新查询可以读取的全部 K/V，以及每个返回的键的绝对位置。`FullKV` 就是第一份笔记本的缓存（保留所有位置，用 `torch.cat` 增长）；第 6、7 节还会加入淘汰或压缩内容的缓存。由于每个键都带着自己的位置，掩码直接由位置算出：$\mathrm{allowed}_{i,j} = [\,p^k_j \le p^q_i\,]$。对 `FullKV` 而言，它恰好就是第 2 节的 `causal_mask(P, C)`（下面用断言验证）。`softmax_attention` 就是第 3 节中显式的“矩阵乘、softmax、矩阵乘”。

# %%
class FullKV:
    # [en] One layer's cache that keeps every position: K, V [B, H_kv, T, Dh].
    # [zh] 保留所有位置的单层缓存：K、V 形状为 [B, H_kv, T, Dh]。
    def __init__(self):
        self.k = self.v = None
        self.positions = torch.empty(0, dtype=torch.long)
        self.seen = 0

    def update(self, k, v, positions):
        self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=-2)
        self.positions = torch.cat((self.positions, positions))
        self.seen += k.shape[-2]
        return self.k, self.v, self.positions

    def stored(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def contents(self):
        # [en] The stored K, V [B, H_kv, T_stored, Dh] and their positions, oldest first.
        # [zh] 缓存中保存的 K、V（形状 [B, H_kv, T_stored, Dh]）及其位置，从旧到新。
        return self.k, self.v, self.positions

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v))


def position_causal_mask(query_pos, key_pos):
    # bool [T_new, T_keys]: allowed[i, j] = key_pos[j] <= query_pos[i]
    return key_pos[None, :] <= query_pos[:, None]


def softmax_attention(q, k, v, allowed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])    # [B, H, T_new, T_keys]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v


assert all(torch.equal(position_causal_mask(past + torch.arange(new), torch.arange(past + new)), causal_mask(past, new))
           for past in range(6) for new in range(1, 6))

# %% [markdown] lang="en"
# The attention layer. It projects $H$ query heads and $H_{kv}$ K/V heads, lets the rotary encoding of
# section 5 rotate Q and K (a no-op while positions are learned), hands the new K/V to its layer cache,
# builds the mask from positions, expands the K/V heads and attends. Everything that a later section or a
# negative control swaps out arrives in a `Step`, built once per call by the decoder: the positions of
# the new tokens, the rotation, the mask rule, the head expansion and the attention function.

# %% [markdown] lang="zh"
# 注意力层。它投影出 $H$ 个查询头和 $H_{kv}$ 个 K/V 头；让第 5 节的旋转位置编码旋转 Q 和 K（位置仍是可学习嵌入时，这一步什么也不做）；把新的 K/V 交给本层缓存；由位置构造掩码；扩展 K/V 头，然后计算注意力。后面的章节或负对照要替换的部分，都装在一个 `Step` 里，由解码器每次调用时构造一次：新 token 的位置、旋转方式、掩码规则、头的扩展方式和注意力函数。

# %%
@dataclass
class Step:
    # [en] Absolute positions of the new tokens, and the rotation of section 5 (None: learned positions).
    # [zh] 新 token 的绝对位置，以及第 5 节的旋转（None 表示可学习的位置嵌入）。
    positions: torch.Tensor            # [T_new]
    rotary: nn.Module | None
    mask_fn: object                    # (query_pos, key_pos) -> bool [T_new, T_keys]
    expand: object                     # (kv, groups) -> [B, H, T, Dh]
    attend: object                     # (q, k, v, allowed) -> [B, H, T_new, Dh]

    def rotate(self, x):
        return x if self.rotary is None else self.rotary(x, self.positions)


class GQAttention(nn.Module):
    def __init__(self, config: ArchConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.n_kv, config.head_dim
        self.q = nn.Linear(config.width, config.heads * config.head_dim, bias=config.bias)
        self.k = nn.Linear(config.width, config.n_kv * config.head_dim, bias=config.bias)
        self.v = nn.Linear(config.width, config.n_kv * config.head_dim, bias=config.bias)
        self.proj = nn.Linear(config.heads * config.head_dim, config.width, bias=config.bias)

    def forward(self, x, step: Step, layer_cache):
        batch, new_len, _ = x.shape                                            # x: [B, T_new, width]
        q = self.q(x).view(batch, new_len, self.heads, self.head_dim).transpose(1, 2)      # [B, H, T_new, Dh]
        k = self.k(x).view(batch, new_len, self.kv_heads, self.head_dim).transpose(1, 2)   # [B, H_kv, T_new, Dh]
        v = self.v(x).view(batch, new_len, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = step.rotate(q), step.rotate(k)
        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]
        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]
        groups = self.heads // self.kv_heads
        context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)
        return self.proj(context.transpose(1, 2).reshape(batch, new_len, self.heads * self.head_dim))

# %% [markdown] lang="en"
# The Llama-family options: RMSNorm (scale by the root mean square, no mean subtraction, no bias) and the
# gated MLP $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$. Then the block (the same pre-norm wiring
# as section 3) and the decoder. With positions learned, the decoder adds `wpe` to the token embeddings
# exactly as section 3 does; with a rotary encoding it has no position table at all.

# %% [markdown] lang="zh"
# Llama 系列的两个选项：RMSNorm（按均方根缩放，不减均值，也没有偏置），以及带门控的 MLP $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$。然后是 Transformer 块（与第 3 节一样采用前置归一化的接法）和解码器。位置是可学习嵌入时，解码器像第 3 节那样把 `wpe` 加到 token 嵌入上；使用旋转位置编码时，则根本没有位置嵌入表。

# %%
class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps
        # [en] None: the input's dtype; section 5 sets torch.float32 to match Hugging Face.
        # [zh] None 表示沿用输入的精度；第 5 节会设为 torch.float32，以便与 Hugging Face 一致。
        self.compute_dtype = None

    def forward(self, x):
        h = x if self.compute_dtype is None else x.to(self.compute_dtype)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


# [en] PyTorch ships the same normalization, torch.nn.RMSNorm, and ours must agree with it. The input is small,
# [en] so that eps matters: a norm with another eps must not agree.
# [zh] PyTorch 自带同样的归一化 torch.nn.RMSNorm，我们的实现必须与它一致。输入取得很小，
# [zh] 这样 eps 才起作用：换一个 eps 的归一化就不能与之一致。
small = 1e-3 * torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
with torch.inference_mode():
    assert torch.allclose(RMSNorm(64).double()(small), nn.RMSNorm(64, eps=1e-5).double()(small), atol=1e-12, rtol=0)
    assert not torch.allclose(RMSNorm(64).double()(small), nn.RMSNorm(64, eps=1e-6).double()(small), atol=1e-3, rtol=0)


class SwiGLU(nn.Module):
    def __init__(self, config: ArchConfig):
        super().__init__()
        self.gate = nn.Linear(config.width, config.mlp, bias=config.bias)
        self.up = nn.Linear(config.width, config.mlp, bias=config.bias)
        self.down = nn.Linear(config.mlp, config.width, bias=config.bias)

    def forward(self, x):                                                      # [B, T, width] -> [B, T, width]
        return self.down(F.silu(self.gate(x)) * self.up(x))


class ArchBlock(nn.Module):
    def __init__(self, config: ArchConfig):
        super().__init__()
        norm = {"layer": nn.LayerNorm, "rms": RMSNorm}[config.norm]
        self.ln_1, self.ln_2 = norm(config.width), norm(config.width)
        self.attn = GQAttention(config)
        self.mlp = {"gelu": MLP, "swiglu": SwiGLU}[config.mlp_kind](config)

    def forward(self, x, step: Step, layer_cache):
        x = x + self.attn(self.ln_1(x), step, layer_cache)
        return x + self.mlp(self.ln_2(x))


class ArchDecoder(nn.Module):
    def __init__(self, config: ArchConfig, rotary=None, new_cache=FullKV, mask_fn=position_causal_mask,
                 expand=repeat_kv, attend=softmax_attention, positions_fn=absolute_positions):
        super().__init__()
        self.config, self.rotary, self.new_cache = config, rotary, new_cache
        self.mask_fn, self.expand, self.attend, self.positions_fn = mask_fn, expand, attend, positions_fn
        self.wte = nn.Embedding(config.vocab, config.width)
        if rotary is None:
            self.wpe = nn.Embedding(config.max_positions, config.width)
        self.blocks = nn.ModuleList(ArchBlock(config) for _ in range(config.layers))
        self.ln_f = {"layer": nn.LayerNorm, "rms": RMSNorm}[config.norm](config.width)
        self.lm_head = nn.Linear(config.width, config.vocab, bias=False)

    def forward(self, ids, cache=None):
        batch, new_len = ids.shape                                             # ids: [B, T_new]
        if cache is None:
            # [en] One layer cache per block.
            # [zh] 每个 Transformer 块一个单层缓存。
            cache = [self.new_cache() for _ in self.blocks]
        positions = self.positions_fn(cache[0].seen, new_len)                  # [T_new]
        step = Step(positions, self.rotary, self.mask_fn, self.expand, self.attend)
        x = self.wte(ids) if self.rotary is not None else self.wte(ids) + self.wpe(positions)
        for block, layer_cache in zip(self.blocks, cache):
            x = block(x, step, layer_cache)
        return self.lm_head(self.ln_f(x)), cache                               # [B, T_new, vocab]

    @contextmanager
    def parts(self, **changes):
        # [en] Temporarily swap mask_fn, expand, attend or positions_fn (negative controls use it).
        # [zh] 临时替换 mask_fn、expand、attend 或 positions_fn（负对照用它注入错误）。
        saved = {name: getattr(self, name) for name in changes}
        for name, value in changes.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)


def build_arch(config: ArchConfig, seed: int = SEED, **parts) -> ArchDecoder:
    torch.manual_seed(seed)
    return ArchDecoder(config, **parts).eval()

# %% [markdown] lang="en"
# **Criterion 1: with $H_{kv} = H$ the generalized decoder is the decoder of section 3.** We load the
# weights of section 3's `model` into `ArchDecoder(ArchConfig(kv_heads=4))` with `strict=True` (every
# name must match) and compare the logits of a full call and of a chunked cached run (chunks of 5), and
# both layers' cached K and V, within the FP32 tolerance `1e-5`. The two models compute the same function
# with the same operations in the same order, but they do not hand those operations tensors of the same
# memory layout: with as many K/V heads as query heads, `repeat_kv` still passes attention a contiguous
# copy of the keys (`repeat_interleave` always copies), where section 3's decoder passes a transposed view
# of the projection. A matrix-multiply kernel may choose its blocking and its order of summation by layout
# and shape, so the same product can round differently in the last bits, on some CPUs and for some
# lengths. The second cell below shows it on the product itself, `q @ k.T` for a batch of 2, with `k` as a
# view and as a contiguous copy, for every length from 1 to 24: on the machine that ran this notebook,
# {{run:gqa.layout_lengths_differing}} of the 24 lengths rounded differently, by up to
# {{run:gqa.layout_max_diff:.1e}}. Bit-for-bit equality would be a statement about the machine, not about
# the code, so we ask for equality within the tolerance and report whether this run happened to be
# bit-exact. What does hold bit for bit, on any machine, is layer 0's cache: its keys and values are the
# same projection of the same inputs, concatenated the same way, before any attention has run.

# %% [markdown] lang="zh"
# **判据 1：$H_{kv} = H$ 时，通用解码器就是第 3 节的解码器。** 我们把第 3 节 `model` 的权重以 `strict=True`（参数名必须一一对应）加载进 `ArchDecoder(ArchConfig(kv_heads=4))`，比较一次完整调用和一次分块缓存运行（分块长度 5）的 logits，以及两层缓存的 K 和 V，要求它们在 FP32 容差 `1e-5` 内一致。两个模型用相同的运算、按相同的顺序计算同一个函数，但交给这些运算的张量内存布局不同：即使 K/V 头与查询头一样多，`repeat_kv` 交给注意力的仍是键的一份连续副本（`repeat_interleave` 总会复制），而第 3 节的解码器交出的是投影结果转置后的视图。矩阵乘法算子可能根据布局和形状选择矩阵的划分方式和求和顺序，所以同一个乘积的舍入结果可能在最后几个比特上不同：在某些 CPU 上、对某些长度如此。下面第二个单元格直接演示这个乘积本身：batch 为 2 的 `q @ k.T`，`k` 分别取视图和连续副本，长度从 1 取到 24。在运行本笔记本的机器上，24 个长度中有 {{run:gqa.layout_lengths_differing}} 个舍入结果不同，最大差异为 {{run:gqa.layout_max_diff:.1e}}。断言逐比特相同，断言的是机器的性质，而不是代码的性质；所以我们要求在容差内相等，并报告本次运行是否恰好逐比特相同。在任何机器上都逐比特相同的，是第 0 层的缓存：在任何注意力计算之前，它的 K 和 V 是同样的输入经过同样的投影、以同样的方式拼接得到的。

# %%
STREAM_LEN = 24
STREAM = torch.randint(0, cfg.vocab, (2, STREAM_LEN), generator=torch.Generator().manual_seed(SEED))

mha = ArchDecoder(ArchConfig(kv_heads=cfg.heads)).eval()
mha.load_state_dict(model.state_dict(), strict=True)
with torch.inference_mode():
    reference_full, _ = model(STREAM)
    ours_full, _ = mha(STREAM)
    reference_cache, ours_cache, reference_pieces, ours_pieces = None, None, [], []
    for start in range(0, STREAM_LEN, 5):
        logits, reference_cache = model(STREAM[:, start:start + 5], reference_cache)
        reference_pieces.append(logits)
        logits, ours_cache = mha(STREAM[:, start:start + 5], ours_cache)
        ours_pieces.append(logits)
MHA_PAIRS = {"full_logits": (reference_full, ours_full), "cached_logits": (torch.cat(reference_pieces, 1), torch.cat(ours_pieces, 1))}
MHA_PAIRS |= {f"layer{i}_{name}": pair for i, ((k, v), c) in enumerate(zip(reference_cache, ours_cache))
              for name, pair in (("k", (k, c.k)), ("v", (v, c.v)))}
MHA_SAME = {name: {"max_abs_err": max_abs_err(a, b), "close": close(a, b), "bit_exact": torch.equal(a, b)}
            for name, (a, b) in MHA_PAIRS.items()}
say_table([[f"`{name}`", f"{r['max_abs_err']:.1e}", f"`{r['close']}`", f"`{r['bit_exact']}`"] for name, r in MHA_SAME.items()],
          en=["section 3's decoder vs `ArchDecoder`", "max abs difference", "within tolerance", "bit-exact on this run"],
          zh=["第 3 节的解码器对照 `ArchDecoder`", "最大绝对差", "在容差之内", "本次运行逐比特相同"])
assert all(r["close"] for r in MHA_SAME.values()), MHA_SAME
# [en] Layer 0's cache: the same projection of the same inputs, concatenated the same way: bit for bit on any machine.
# [zh] 第 0 层的缓存：同样的输入、同样的投影、同样的拼接方式：在任何机器上都逐比特相同。
assert MHA_SAME["layer0_k"]["bit_exact"] and MHA_SAME["layer0_v"]["bit_exact"]

# %%
def layout_difference(length: int) -> float:
    # [en] q @ k.T for a batch of 2, with q and k transposed views of projections (as section 3's decoder passes them),
    # [en] against the same product with a contiguous copy of k (as repeat_kv passes it): the largest difference.
    # [zh] batch 为 2 的 q @ k.T：q 和 k 都是投影结果转置后的视图（第 3 节的解码器就是这样传递的），
    # [zh] 与把 k 换成连续副本（repeat_kv 传递的就是副本）的同一个乘积相比，最大差异是多少。
    gen = torch.Generator().manual_seed(SEED + length)
    q, k = (torch.randn(2, length, cfg.heads, cfg.head_dim, generator=gen).transpose(1, 2) for _ in range(2))   # [2, H, T, Dh]
    copy_of_k = k.contiguous()
    assert torch.equal(k, copy_of_k)
    by_view, by_copy = q @ k.transpose(-2, -1), q @ copy_of_k.transpose(-2, -1)
    assert close(by_view, by_copy)
    return max_abs_err(by_view, by_copy)


with torch.inference_mode():
    LAYOUT_DIFF = {length: layout_difference(length) for length in range(1, STREAM_LEN + 1)}
LAYOUT = {"lengths_differing": [t for t, d in LAYOUT_DIFF.items() if d > 0], "max_abs_diff": max(LAYOUT_DIFF.values())}
say(en=f"`q @ k.T` with `k` a view and with its contiguous copy, lengths 1 to {STREAM_LEN}: the two round differently at "
       f"lengths {LAYOUT['lengths_differing']} on this machine (largest difference {LAYOUT['max_abs_diff']:.1e}), and agree "
       f"within the tolerance at every length.",
    zh=f"`k` 取视图和取连续副本时的 `q @ k.T`，长度 1 到 {STREAM_LEN}：在这台机器上，长度为 {LAYOUT['lengths_differing']} "
       f"时两者的舍入结果不同（最大差异 {LAYOUT['max_abs_diff']:.1e}），而在每个长度上都在容差之内一致。")

# %% [markdown] lang="en"
# **Criterion 2: with $H_{kv} = 2$ (GQA) and $H_{kv} = 1$ (MQA), the cached path equals full
# recomputation.** The check is the one of the first notebook: every logit at every position and every
# layer's K and V (for every position the cache keeps, once caches start to evict), batch 1 and 2, chunks of 1, 2 and 5 tokens, FP32 and FP64, with `atol = rtol = 1e-5`
# in FP32 and `1e-10` in FP64: 12 configurations per model. The cached K/V must have the shape
# `[B, H_kv, T, D_h]`. `check_cached` is written once here and reused by every later section; it takes
# a `build` function so that the FP64 run rebuilds the same model and converts the same weights.

# %% [markdown] lang="zh"
# **判据 2：$H_{kv} = 2$（GQA）和 $H_{kv} = 1$（MQA）时，缓存路径与完整重算一致。** 检查方法与第一份笔记本相同：比较每个位置上的全部 logits 以及每一层的 K 和 V（当缓存开始淘汰内容时，比较它保留的每个位置）；batch 为 1 或 2，分块长度为 1、2 或 5 个 token，FP32 和 FP64；FP32 用 `atol = rtol = 1e-5`，FP64 用 `1e-10`。每个模型 12 种配置。缓存中的 K/V 形状必须是 `[B, H_kv, T, D_h]`。`check_cached` 在这里写好，后面各节都复用它；它接收一个 `build` 函数，这样 FP64 运行会重建同一个模型，并转换同一份权重。

# %%
def chunk_lengths(total: int, chunk) -> list[int]:
    if isinstance(chunk, int):
        return [min(chunk, total - start) for start in range(0, total, chunk)]
    assert sum(chunk) == total
    return list(chunk)


@torch.inference_mode()
def run_chunked(net, ids, chunk, after_call=None):
    # [en] The cached path: feed ids in chunks, each call with the cache returned by the previous one.
    # [zh] 缓存路径：把 ids 分块送入，每次调用都带上前一次返回的缓存。
    pieces, cache, start = [], None, 0
    for length in chunk_lengths(ids.shape[1], chunk):
        logits, cache = net(ids[:, start:start + length], cache)
        pieces.append(logits)
        start += length
        if after_call is not None:
            after_call(cache)
    return torch.cat(pieces, dim=1), cache


@torch.inference_mode()
def check_cached(build, stream, batch, chunk, dtype=torch.float32, reference=None, after_call=None) -> dict:
    # [en] Cached path (chunks) against one full call of `reference` (default: the same model).
    # [zh] 把缓存路径（分块）与 `reference`（默认是同一个模型）的一次完整调用比较。
    net = build().to(dtype)
    ref = net if reference is None else reference().to(dtype)
    ids = stream[:batch]
    full_logits, full_cache = ref(ids)
    cached_logits, cache = run_chunked(net, ids, chunk, after_call)
    tol = TOLERANCE[dtype]
    logit_err = (cached_logits - full_logits).abs().max().item()
    result = {"batch": batch, "chunk": chunk if isinstance(chunk, int) else list(chunk), "dtype": DTYPE_NAME[dtype],
              "max_abs_logit_err": logit_err,
              "passed": bool(torch.allclose(cached_logits, full_logits, atol=tol, rtol=tol))}
    if hasattr(cache[0], "contents") and isinstance(full_cache[0], FullKV):
        # [en] Every position the cache kept must hold the full path's K/V of that position.
        # [zh] 缓存保留的每个位置，都必须存着完整路径在该位置上的 K/V。
        pairs, kept = [], cache[0].contents()[2]
        for c, f in zip(cache, full_cache):
            k, v, positions = c.contents()
            index = torch.searchsorted(f.positions, positions)
            pairs += [(k, f.k[:, :, index]), (v, f.v[:, :, index])]
        expected = ids.shape[1] if isinstance(cache[0], FullKV) else len(kept)
        kv_shape = (batch, net.config.n_kv, expected, net.config.head_dim)
        result["kv_shape_ok"] = all(a.shape == b.shape == kv_shape for a, b in pairs)
        result["max_abs_kv_err"] = max((a - b).abs().max().item() for a, b in pairs)
        result["passed"] &= result["kv_shape_ok"] and all(torch.allclose(a, b, atol=tol, rtol=tol) for a, b in pairs)
    return result


GRID = [(dtype, batch, chunk) for dtype in (torch.float32, torch.float64) for batch in (1, 2) for chunk in (1, 2, 5)]


def run_grid(build, **kwargs) -> list[dict]:
    return [check_cached(build, STREAM, batch, chunk, dtype, **kwargs) for dtype, batch, chunk in GRID]


def grid_table(rows: list[dict]) -> None:
    say_table([[str(r["batch"]), str(r["chunk"]), r["dtype"], f"{r['max_abs_logit_err']:.2e}",
                f"{r['max_abs_kv_err']:.2e}" if "max_abs_kv_err" in r else "-", f"`{r['passed']}`"] for r in rows],
              en=["batch", "chunk", "dtype", "max abs logit error", "max abs K/V error", "passed"],
              zh=["batch", "分块长度", "精度", "logits 最大绝对误差", "K/V 最大绝对误差", "通过"])


# %% [markdown] lang="en"
# The two grids, one per model, and the assertions: all 24 configurations pass, with the cached K/V in
# the shape `[B, H_kv, T, D_h]`.

# %% [markdown] lang="zh"
# 下面为两个模型各跑一个网格，并用断言确认：24 种配置全部通过，缓存中的 K/V 形状都是 `[B, H_kv, T, D_h]`。

# %%
GQA_CONFIGS = {"gqa2": ArchConfig(kv_heads=2), "mqa": ArchConfig(kv_heads=1)}
GQA_GRIDS = {name: run_grid(lambda c=c: build_arch(c)) for name, c in GQA_CONFIGS.items()}
for name, rows in GQA_GRIDS.items():
    say(en=f"**{name}** (`kv_heads = {GQA_CONFIGS[name].n_kv}`)", zh=f"**{name}**（`kv_heads = {GQA_CONFIGS[name].n_kv}`）")
    grid_table(rows)
assert len(GRID) == 12
assert all(r["passed"] and r["kv_shape_ok"] for rows in GQA_GRIDS.values() for r in rows)

# %% [markdown] lang="en"
# **Criterion 3: the payload formula with $H_{kv}$ equals the measured bytes.** The first notebook's
# formula holds with the number of K/V heads in place of the number of heads:
# $M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$. At batch 2, $T = 24$, FP32, the cell
# compares it with `numel() * element_size()` summed over the real caches of MHA, GQA and MQA models.
# The parameter count shrinks too: each layer's K and V projections lose $2 (H - H_{kv}) D_h (W + 1)$
# parameters.

# %% [markdown] lang="zh"
# **判据 3：带 $H_{kv}$ 的数据量公式与实测字节数相等。** 把第一份笔记本公式中的头数换成 K/V 头数，公式依然成立：$M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$。下面的单元格取 batch 2、$T = 24$、FP32，把公式算出的字节数与 MHA、GQA、MQA 三个模型真实缓存上 `numel() * element_size()` 的总和相比较。参数量也随之减少：每层的 K、V 投影少了 $2 (H - H_{kv}) D_h (W + 1)$ 个参数。

# %%
def kv_bytes(batch: int, length: int, layers: int, kv_heads: int, head_dim: int, bytes_per_element: float) -> float:
    return 2 * batch * length * layers * kv_heads * head_dim * bytes_per_element


GQA_PAYLOAD = {}
for kv_heads in (4, 2, 1):
    config = ArchConfig(kv_heads=kv_heads)
    net = build_arch(config)
    with torch.inference_mode():
        _, cache = net(STREAM)
    measured = sum(c.nbytes() for c in cache)
    formula = kv_bytes(2, STREAM_LEN, config.layers, kv_heads, config.head_dim, 4)
    params = sum(p.numel() for p in net.parameters())
    assert measured == formula and params == N_PARAMS - config.layers * 2 * (config.heads - kv_heads) * config.head_dim * (config.width + 1)
    GQA_PAYLOAD[kv_heads] = {"measured_bytes": measured, "formula_bytes": int(formula), "params": params}
say_table([[str(h), f"{v['formula_bytes']:,}", f"{v['measured_bytes']:,}", f"{v['params']:,}"] for h, v in GQA_PAYLOAD.items()],
          en=["`kv_heads`", "formula (bytes)", "measured (bytes)", "parameters"],
          zh=["`kv_heads`", "公式（字节）", "实测（字节）", "参数量"])

# %% [markdown] lang="en"
# **Negative control: tiling instead of interleaving.** Swap `repeat_kv` for `tile_kv` in the GQA model
# and run the same 12 configurations. They all pass. That is not a flaw of the check but a limit of what
# it can see: the tiled model is a *different but self-consistent* function. Its full path and its cached
# path both pair query head 1 with K/V head 1, so they agree with each other. Cached-versus-full can only
# catch a disagreement between the two paths; it says nothing about whether the pairing of heads is the
# one the weights were made for. The outputs do change: in this run the tiled model's logits differ from
# the interleaved model's by up to {{run:gqa.tile_logit_diff:.2f}}. With $H_{kv} = 1$ or $H_{kv} = H$
# tiling and interleaving coincide, which is why the mistake survives tests on MQA or MHA. Only a referee that knows the intended layout can catch
# it: criterion 4 below, which spells the layout out head by head, and the Hugging Face cross-check of section 5.

# %% [markdown] lang="zh"
# **负对照：平铺代替交错。** 在 GQA 模型中把 `repeat_kv` 换成 `tile_kv`，再跑同样的 12 种配置，结果全部通过。这并不是检查有缺陷，而是它能看到的东西本来有限：平铺后的模型是一个**不同但自洽**的函数。它的完整路径和缓存路径都把查询头 1 与 K/V 头 1 配对，所以两者彼此一致。“缓存对照完整重算”只能发现两条路径之间的分歧，无法判断头的配对方式是否与权重的设计相符。输出确实变了：在本次运行中，平铺版本与交错版本的 logits 相差最多 {{run:gqa.tile_logit_diff:.2f}}。而当 $H_{kv} = 1$ 或 $H_{kv} = H$ 时，平铺与交错的结果完全相同，所以只在 MQA 或 MHA 上测试，这个错误就会溜过去。只有知道正确布局的裁判才能发现它：一个是下面逐头写出这一布局的判据 4，另一个是第 5 节与 Hugging Face 的交叉核对。

# %%
tiled_grid = run_grid(lambda: build_arch(GQA_CONFIGS["gqa2"], expand=tile_kv))
with torch.inference_mode():
    interleaved_logits, _ = build_arch(GQA_CONFIGS["gqa2"])(STREAM)
    tiled_logits, _ = build_arch(GQA_CONFIGS["gqa2"], expand=tile_kv)(STREAM)
    mqa_same = torch.equal(build_arch(GQA_CONFIGS["mqa"])(STREAM)[0], build_arch(GQA_CONFIGS["mqa"], expand=tile_kv)(STREAM)[0])
TILE_CONTROL = {
    "cached_vs_full_all_passed": all(r["passed"] for r in tiled_grid),
    "max_abs_logit_err_cached_vs_full": max(r["max_abs_logit_err"] for r in tiled_grid),
    "max_abs_logit_diff_vs_interleaved": (tiled_logits - interleaved_logits).abs().max().item(),
    "mqa_identical": mqa_same,
}
assert TILE_CONTROL["cached_vs_full_all_passed"] and TILE_CONTROL["mqa_identical"]
assert TILE_CONTROL["max_abs_logit_diff_vs_interleaved"] > 1e-2
say(en=f"Tiled K/V heads: all 12 cached-versus-full configurations pass (largest error "
       f"{TILE_CONTROL['max_abs_logit_err_cached_vs_full']:.2e}), yet the logits differ from the interleaved model's "
       f"by up to {TILE_CONTROL['max_abs_logit_diff_vs_interleaved']:.3f}. With one K/V head the two are identical.",
    zh=f"平铺 K/V 头：12 种“缓存对照完整重算”的配置全部通过（最大误差 "
       f"{TILE_CONTROL['max_abs_logit_err_cached_vs_full']:.2e}），但 logits 与交错版本相差最多 "
       f"{TILE_CONTROL['max_abs_logit_diff_vs_interleaved']:.3f}。只有一个 K/V 头时，两者完全相同。")

# %% [markdown] lang="en"
# **Criterion 4: query head $h$ reads K/V head $\lfloor h / g \rfloor$, checked head by head.** This referee
# needs nothing installed. `heads_by_loop` computes one attention layer one query head at a time from the
# layer's own weights: for head $h$ it projects the queries with the rows of `q` that belong to head $h$
# and the keys and values with the rows of `k` and `v` that belong to K/V head $\lfloor h / g \rfloor$; it
# never calls `repeat_kv`. The real layer, `GQAttention.forward` with a `FullKV`, reads the 24-token
# stream in chunks of 5. In FP64 the two must agree within `1e-10` for GQA and MQA, and the same layer
# with `tile_kv` must not.

# %% [markdown] lang="zh"
# **判据 4：查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头，逐头检查。** 这个裁判不需要安装任何东西。`heads_by_loop` 按查询头逐个计算一层注意力，只用这一层自己的权重：对查询头 $h$，用 `q` 中属于头 $h$ 的那几行投影出查询，用 `k` 和 `v` 中属于第 $\lfloor h / g \rfloor$ 个 K/V 头的那几行投影出键和值；它从不调用 `repeat_kv`。真实的注意力层，即带 `FullKV` 的 `GQAttention.forward`，按块长 5 读入 24 个 token 的序列。在 FP64 下，GQA 和 MQA 的两种算法之差都必须小于 `1e-10`，而改用 `tile_kv` 的同一层则不能通过。

# %%
def rows_of(linear: nn.Linear, head: int, head_dim: int):
    # [en] The weight rows (and bias entries) that produce one head's head_dim outputs.
    # [zh] 产生某一个头的 head_dim 个输出的那几行权重（以及偏置）。
    rows = slice(head * head_dim, (head + 1) * head_dim)
    return linear.weight[rows], None if linear.bias is None else linear.bias[rows]


@torch.inference_mode()
def heads_by_loop(attn: GQAttention, x):
    # [en] One query head at a time; query head h uses K/V head h // groups. x: [B, T, width].
    # [zh] 每次计算一个查询头；查询头 h 使用第 h // groups 个 K/V 头。x 的形状为 [B, T, width]。
    groups, allowed, heads = attn.heads // attn.kv_heads, causal_mask(0, x.shape[1]), []
    for h in range(attn.heads):
        q = F.linear(x, *rows_of(attn.q, h, attn.head_dim))                                # [B, T, Dh]
        k = F.linear(x, *rows_of(attn.k, h // groups, attn.head_dim))
        v = F.linear(x, *rows_of(attn.v, h // groups, attn.head_dim))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)).masked_fill(~allowed, float("-inf"))
        heads.append(scores.softmax(dim=-1) @ v)
    return attn.proj(torch.cat(heads, dim=-1))                                              # [B, T, width]


@torch.inference_mode()
def layer_in_chunks(attn: GQAttention, x, expand=repeat_kv, chunk: int = 5):
    # [en] The real layer on its cached path, as the decoder drives it.
    # [zh] 真实的注意力层走缓存路径，调用方式与解码器相同。
    layer_cache, pieces = FullKV(), []
    for start in range(0, x.shape[1], chunk):
        positions = absolute_positions(start, min(chunk, x.shape[1] - start))
        step = Step(positions, None, position_causal_mask, expand, softmax_attention)
        pieces.append(attn(x[:, start:start + len(positions)], step, layer_cache))
    return torch.cat(pieces, dim=1)


HEAD_INPUT = torch.randn(2, STREAM_LEN, cfg.width, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
HEAD_LOOP = {}
for name, config in GQA_CONFIGS.items():
    attn = build_arch(config).double().blocks[0].attn
    HEAD_LOOP[name] = (layer_in_chunks(attn, HEAD_INPUT) - heads_by_loop(attn, HEAD_INPUT)).abs().max().item()
attn = build_arch(GQA_CONFIGS["gqa2"]).double().blocks[0].attn
HEAD_LOOP["tile_kv_control"] = (layer_in_chunks(attn, HEAD_INPUT, expand=tile_kv) - heads_by_loop(attn, HEAD_INPUT)).abs().max().item()
assert HEAD_LOOP["gqa2"] < 1e-10 and HEAD_LOOP["mqa"] < 1e-10
assert HEAD_LOOP["tile_kv_control"] > 1e-2
say(en=f"Head by head (FP64): the real layer differs from the loop by {HEAD_LOOP['gqa2']:.1e} (GQA) and "
       f"{HEAD_LOOP['mqa']:.1e} (MQA); with `tile_kv` by {HEAD_LOOP['tile_kv_control']:.3f}: caught.",
    zh=f"逐头检查（FP64）：真实注意力层与逐头循环的差异为 {HEAD_LOOP['gqa2']:.1e}（GQA）和 "
       f"{HEAD_LOOP['mqa']:.1e}（MQA）；改用 `tile_kv` 后差异为 {HEAD_LOOP['tile_kv_control']:.3f}：被抓住了。")

# %% tags=["prose-values"]
{"gqa": {"tile_logit_diff": float(TILE_CONTROL["max_abs_logit_diff_vs_interleaved"]),
         "layout_lengths_differing": len(LAYOUT["lengths_differing"]), "layout_max_diff": float(LAYOUT["max_abs_diff"])}}
