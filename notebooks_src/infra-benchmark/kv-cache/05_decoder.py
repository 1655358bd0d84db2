# %% [markdown] lang="en"
# ## {{section}}. The decoder
#
# Now the full model, in the style of nanoGPT: token embeddings plus learned absolute position
# embeddings, two pre-norm Transformer blocks (an attention residual, then an MLP residual), a final LayerNorm and
# a vocabulary projection without bias. Width 64, 4 heads of 16 dimensions, vocabulary 97, MLP hidden
# width 256, 512 positions. The weights are random, drawn from `SEED`; nothing is downloaded.
#
# Why does every layer need its own cache? Layer $\ell$ projects its *own* normalized input:
# $Q_\ell = \mathrm{LN}(X_\ell) W^Q_\ell$, $K_\ell = \mathrm{LN}(X_\ell) W^K_\ell$,
# $V_\ell = \mathrm{LN}(X_\ell) W^V_\ell$ (biases left out). Layer 2's input is layer 1's output, so
# layer 1's keys and values cannot stand in for layer 2's. The cache is therefore an ordered list with
# one `(K, V)` pair per layer.
#
# And why may old entries be reused at all? Under a causal mask, position $i$ depends only on positions
# $0 \dots i$. With fixed weights and positions and no dropout, appending tokens leaves the first
# layer's outputs at old positions unchanged; the same argument applied layer by layer (induction)
# covers the whole stack. Change an old token, a weight or the position rule, and the cache is stale.

# %% [markdown] lang="zh"
# ## {{section}}. 解码器
#
# 下面是完整的模型，写法仿照 nanoGPT：token 嵌入加上可学习的绝对位置嵌入，两个前置归一化（pre-norm）的 Transformer 块（先是注意力残差，再是 MLP 残差），最后是一个 LayerNorm 和一个不带偏置的词表投影。宽度 64，4 个头、每头 16 维，词表大小 97，MLP 隐藏层宽度 256，共 512 个位置。权重由 `SEED` 随机生成，不下载任何东西。
#
# 为什么每一层都需要自己的缓存？第 $\ell$ 层投影的是**它自己的**归一化输入：$Q_\ell = \mathrm{LN}(X_\ell) W^Q_\ell$，$K_\ell = \mathrm{LN}(X_\ell) W^K_\ell$，$V_\ell = \mathrm{LN}(X_\ell) W^V_\ell$（略去偏置）。第 2 层的输入是第 1 层的输出，第 1 层的 K/V 不能拿来充当第 2 层的 K/V。因此，缓存是一个有序列表，每层对应一对 `(K, V)`。
#
# 那么，旧的缓存项为什么可以复用？在因果掩码下，位置 $i$ 只依赖位置 $0 \dots i$。只要权重和位置固定、没有 dropout，往序列末尾追加 token 就不会改变第一层在旧位置上的输出；对后面的层逐层套用同样的论证（归纳法），结论对整个网络都成立。反过来，只要改动了某个旧 token、某个权重或位置规则，缓存就过期了。

# %% [markdown] lang="en"
# The configuration and the two default *hooks*. The model asks `positions_fn` for the absolute
# positions of the new tokens and `mask_fn` for the attention mask. The correct rules are the defaults.
# Swapping in a broken rule turns this same model into a broken variant, so a negative control never
# needs a copy of the model.

# %% [markdown] lang="zh"
# 先定义配置和两个默认的**钩子**（hook）。模型通过 `positions_fn` 得到新 token 的绝对位置，通过 `mask_fn` 得到注意力所用的掩码。默认的钩子就是正确的规则；换上一条错误的规则，同一个模型就变成了改坏的版本，所以做负对照时从不需要复制一份模型。

# %%
@dataclass
class DecoderConfig:
    vocab: int = 97
    width: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 256
    max_positions: int = 512

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


# [en] The new tokens continue where the cache ends: past_len, past_len + 1, ...
# [zh] 新 token 的位置紧接在缓存末尾之后：past_len, past_len + 1, ...
def absolute_positions(past_len: int, new_len: int) -> torch.Tensor:
    return past_len + torch.arange(new_len)


# [en] One (K, V) per layer, each [B, heads, T_total, head_dim].
# [zh] 每层一对 (K, V)，形状均为 [B, heads, T_total, head_dim]。
Cache = list[tuple[torch.Tensor, torch.Tensor]]

# %% [markdown] lang="en"
# Self-attention: separate `q`, `k`, `v` projections and an output projection `proj`. It receives the
# layer's cached `(K, V)` (or `None`), concatenates the new keys and values onto it with `torch.cat`
# (which builds new tensors and never writes into the old ones), and returns the longer pair as this
# layer's new cache entry.

# %% [markdown] lang="zh"
# 自注意力：`q`、`k`、`v` 三个独立的投影，外加一个输出投影 `proj`。它接收本层缓存的 `(K, V)`（或 `None`），用 `torch.cat` 把新的 K/V 拼接在后面（`torch.cat` 会生成新张量，从不改写旧张量），再把加长后的这一对作为本层新的缓存项返回。

# %%
class SelfAttention(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        assert config.width % config.heads == 0
        self.heads, self.head_dim = config.heads, config.head_dim
        self.q = nn.Linear(config.width, config.width)
        self.k = nn.Linear(config.width, config.width)
        self.v = nn.Linear(config.width, config.width)
        self.proj = nn.Linear(config.width, config.width)

    def split_heads(self, x):                                      # [B, T, width] -> [B, heads, T, head_dim]
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, allowed, past=None):
        batch, new_len, width = x.shape                            # x: [B, T_new, width]
        q = self.split_heads(self.q(x))                            # [B, H, T_new, Dh]
        k = self.split_heads(self.k(x))
        v = self.split_heads(self.v(x))
        if past is not None:
            past_k, past_v = past
            # [en] torch.cat builds a new tensor: the cache it received stays untouched.
            # [zh] torch.cat 生成新张量，传进来的缓存保持不变。
            k = torch.cat((past_k, k), dim=-2)                     # [B, H, T_total, Dh]
            v = torch.cat((past_v, v), dim=-2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)   # [B, H, T_new, T_total]
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(batch, new_len, width)
        return self.proj(context), (k, v)

# %% [markdown] lang="en"
# The MLP (exact GELU) and the pre-norm block that wires attention and MLP into two residual updates.

# %% [markdown] lang="zh"
# 接下来是 MLP（使用精确的 GELU），以及前置归一化的 Transformer 块：它把注意力和 MLP 连接成两次残差更新。

# %%
class MLP(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.fc = nn.Linear(config.width, config.mlp)
        self.act = nn.GELU(approximate="none")
        self.proj = nn.Linear(config.mlp, config.width)

    def forward(self, x):                                          # [B, T, width] -> [B, T, width]
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.width)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.width)
        self.mlp = MLP(config)

    def forward(self, x, allowed, past=None):
        attended, kv = self.attn(self.ln_1(x), allowed, past)
        x = x + attended
        x = x + self.mlp(self.ln_2(x))
        return x, kv

# %% [markdown] lang="en"
# The decoder. `forward(ids, cache)` reads the cache length from the first layer's keys
# (`cache[0]`), asks the hooks for the
# positions and the mask, runs the blocks with cache entry $\ell$ going to block $\ell$, and returns
# logits for every new position together with the new cache. `hooks(...)` temporarily swaps a hook and
# restores the original afterwards.

# %% [markdown] lang="zh"
# 然后是解码器本身。`forward(ids, cache)` 从第一层的 K（`cache[0]`）读出缓存长度，通过钩子取得新 token 的位置和掩码，把第 $\ell$ 个缓存项交给第 $\ell$ 个 Transformer 块，最后返回每个新位置的 logits 以及新的缓存。`hooks(...)` 临时换上某个钩子，用完后再恢复原来的钩子。

# %%
class CacheDecoder(nn.Module):
    def __init__(self, config: DecoderConfig, positions_fn=absolute_positions, mask_fn=causal_mask):
        super().__init__()
        self.config = config
        # [en] The two hooks: positions of the new tokens, and the mask.
        # [zh] 两个钩子：新 token 的位置，以及掩码。
        self.positions_fn = positions_fn                            # (past_len, new_len) -> LongTensor [new_len]
        self.mask_fn = mask_fn                                      # (past_len, new_len) -> bool [new_len, past_len + new_len]
        self.wte = nn.Embedding(config.vocab, config.width)
        self.wpe = nn.Embedding(config.max_positions, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.width)
        self.lm_head = nn.Linear(config.width, config.vocab, bias=False)

    def forward(self, ids: torch.Tensor, cache: Cache | None = None) -> tuple[torch.Tensor, Cache]:
        batch, new_len = ids.shape                                  # ids: [B, T_new]
        past_len = 0 if cache is None else cache[0][0].shape[-2]
        # [en] One (K, V) per layer.
        # [zh] 每层一对 (K, V)。
        assert cache is None or len(cache) == len(self.blocks)
        positions = self.positions_fn(past_len, new_len)            # [T_new]
        assert int(positions.max()) < self.config.max_positions
        x = self.wte(ids) + self.wpe(positions)                     # [B, T_new, width]
        allowed = self.mask_fn(past_len, new_len)                   # [T_new, T_total]
        new_cache = []
        for layer, block in enumerate(self.blocks):
            x, kv = block(x, allowed, None if cache is None else cache[layer])
            new_cache.append(kv)
        logits = self.lm_head(self.ln_f(x))                         # [B, T_new, vocab]
        return logits, new_cache

    @contextmanager
    # [en] Temporarily replace the position and/or mask rule (this is how broken variants get in).
    # [zh] 临时替换位置规则、掩码规则或两者（改坏的版本就是这样注入的）。
    def hooks(self, positions_fn=None, mask_fn=None):
        saved = self.positions_fn, self.mask_fn
        self.positions_fn = positions_fn or self.positions_fn
        self.mask_fn = mask_fn or self.mask_fn
        try:
            yield self
        finally:
            self.positions_fn, self.mask_fn = saved

# %% [markdown] lang="en"
# Build it from the seed and count the parameters, once by summing the tensors and once from the
# configuration. Write $V$ for the vocabulary size, $W$ for the width, $M$ for the MLP hidden width and
# $P_{\max}$ for the number of positions: embeddings $VW + P_{\max}W$, per block two LayerNorms
# ($2 \cdot 2W$), four attention projections ($4(W^2 + W)$) and the MLP ($WM + M + MW + W$), then the
# final LayerNorm ($2W$) and the vocabulary projection ($WV$), which has its own matrix: it is not
# *tied* to (shared with) the token embedding table. Both counts must come to 145,280. The cell also
# checks what the text
# above promises: the sizes, LayerNorm before attention and before the MLP (a block's output recomputed
# by hand on a small input), attention that matches PyTorch's own `F.scaled_dot_product_attention` on
# the same projections (with and without a cache), exact GELU (written out with `erf`), no dropout
# module, and weights that depend only on `SEED` (a second build gives the same tensors).

# %% [markdown] lang="zh"
# 用随机种子构建模型，并用两种方法统计参数量：一是把所有参数张量的元素个数相加，二是根据配置用公式计算。记词表大小为 $V$、宽度为 $W$、MLP 隐藏层宽度为 $M$、位置数为 $P_{\max}$：嵌入层为 $VW + P_{\max}W$；每个 Transformer 块有两个 LayerNorm（$2 \cdot 2W$）、四个注意力投影（$4(W^2 + W)$）和 MLP（$WM + M + MW + W$）；最后是末端的 LayerNorm（$2W$）和词表投影（$WV$）。词表投影有自己的矩阵，不与 token 嵌入表共享权重。两种方法都必须得到 145,280。这个单元格还会核对前文的描述：各项尺寸；LayerNorm 位于注意力和 MLP 之前（在一个小输入上手工重算一个 Transformer 块的输出）；在相同的投影上，注意力与 PyTorch 自带的 `F.scaled_dot_product_attention` 结果一致（有缓存和无缓存两种情形）；使用精确的 GELU（用 `erf` 写出来核对）；没有任何 dropout 模块；权重只取决于 `SEED`（再构建一次，得到的张量完全相同）。

# %%
def parameter_formula(c: DecoderConfig) -> int:
    embeddings = c.vocab * c.width + c.max_positions * c.width
    per_block = 2 * (2 * c.width) + 4 * (c.width * c.width + c.width) + (c.width * c.mlp + c.mlp + c.mlp * c.width + c.width)
    return embeddings + c.layers * per_block + 2 * c.width + c.width * c.vocab


def build_model(seed: int = SEED, config: DecoderConfig | None = None) -> CacheDecoder:
    torch.manual_seed(seed)
    return CacheDecoder(config or DecoderConfig()).eval()


cfg = DecoderConfig()
model = build_model()
N_PARAMS = sum(p.numel() for p in model.parameters())
assert N_PARAMS == parameter_formula(cfg) == 145_280
assert (cfg.vocab, cfg.width, cfg.heads, cfg.head_dim, cfg.layers, cfg.mlp, cfg.max_positions) == (97, 64, 4, 16, 2, 256, 512)
assert not model.training
assert model.ln_f.eps == 1e-5 and model.lm_head.bias is None
# [en] The vocabulary projection has its own matrix (not tied), the GELU is exact, there is no dropout.
# [zh] 词表投影有自己的矩阵（不共享权重），GELU 是精确版本，没有 dropout。
assert model.lm_head.weight.data_ptr() != model.wte.weight.data_ptr()
assert all(block.mlp.act.approximate == "none" for block in model.blocks)
assert not any(isinstance(module, nn.Dropout) for module in model.modules())
# [en] Same seed, same weights.
# [zh] 同一个随机种子，同样的权重。
rebuilt = build_model()
assert all(torch.equal(model.state_dict()[name], w) for name, w in rebuilt.state_dict().items())

# [en] Pre-norm, recomputed by hand on a small input.
# [zh] 在一个小输入上手工重算前置归一化的 Transformer 块。
with torch.inference_mode():
    block, x = model.blocks[0], torch.randn(1, 3, cfg.width, generator=torch.Generator().manual_seed(SEED))
    allowed = causal_mask(0, 3)
    after_attn = x + block.attn(block.ln_1(x), allowed)[0]
    torch.testing.assert_close(block(x, allowed)[0], after_attn + block.mlp(block.ln_2(after_attn)))

# [en] Attention against PyTorch's own on the same projections (scores scaled by 1/sqrt(head_dim),
# [en] softmax over the keys), without and with a cache of 2 positions.
# [zh] 在相同的投影上与 PyTorch 自带的注意力比较（分数除以 sqrt(head_dim)，沿键的方向做 softmax），
# [zh] 分别在没有缓存和缓存 2 个位置时进行。
with torch.inference_mode():
    attn, h = block.attn, block.ln_1(x)
    q, k, v = (attn.split_heads(proj(h)) for proj in (attn.q, attn.k, attn.v))           # [1, H, 3, Dh]
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    reference = attn.proj(reference.transpose(1, 2).reshape(x.shape))
    torch.testing.assert_close(attn(h, causal_mask(0, 3))[0], reference)
    new_only, _ = attn(h[:, 2:], causal_mask(2, 1), (k[:, :, :2], v[:, :, :2]))
    torch.testing.assert_close(new_only, reference[:, 2:])

# [en] The MLP's activation is GELU written out with erf, on a grid and inside the MLP.
# [zh] MLP 的激活函数就是用 erf 写出的 GELU：在一组网格点上和在 MLP 内部分别核对。
def gelu_exact(t):
    return 0.5 * t * (1 + torch.erf(t / math.sqrt(2)))


with torch.inference_mode():
    grid = torch.linspace(-4, 4, 81)
    torch.testing.assert_close(block.mlp.act(grid), gelu_exact(grid))
    wide = 4 * torch.randn(1, 8, cfg.width, generator=torch.Generator().manual_seed(SEED))
    torch.testing.assert_close(block.mlp(wide), block.mlp.proj(gelu_exact(block.mlp.fc(wide))))

say(en=f"Parameters: {N_PARAMS:,} counted, {parameter_formula(cfg):,} from the formula.",
    zh=f"参数量：逐个张量统计得 {N_PARAMS:,}，按公式计算得 {parameter_formula(cfg):,}。")
say_table([[f"`{name}`", f"{sum(p.numel() for p in module.parameters()):,}"] for name, module in model.named_children()],
          en=["module", "parameters"], zh=["模块", "参数量"])
