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
# $V_\ell = \mathrm{LN}(X_\ell) W^V_\ell$ (biases left out). Layer 1's input is layer 0's output, so
# layer 0's keys and values cannot stand in for layer 1's. The cache is therefore an ordered list with
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
# 为什么每一层都需要自己的缓存？第 $\ell$ 层投影的是**它自己的**归一化输入：$Q_\ell = \mathrm{LN}(X_\ell) W^Q_\ell$，$K_\ell = \mathrm{LN}(X_\ell) W^K_\ell$，$V_\ell = \mathrm{LN}(X_\ell) W^V_\ell$（略去偏置）。第 1 层的输入是第 0 层的输出，第 0 层的 K/V 不能拿来充当第 1 层的 K/V。因此，缓存是一个有序列表，每层对应一对 `(K, V)`。
#
# 那么，旧的缓存项为什么可以复用？在因果掩码下，位置 $i$ 只依赖位置 $0 \dots i$。只要权重和位置固定、没有 dropout（暂退法），往序列末尾追加 token 就不会改变第一层在旧位置上的输出；对后面的层逐层套用同样的论证（归纳法），结论对整个网络都成立。反过来，只要改动了某个旧 token、某个权重或位置规则，缓存就过期了。

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
# *tied* to (shared with) the token embedding table (tied, the two would count once, and the sum would
# fall short of the formula). The two counts agree: {{run:decoder.params:,}} parameters.

# %% [markdown] lang="zh"
# 用随机种子构建模型，并用两种方法统计参数量：一是把所有参数张量的元素个数相加，二是根据配置用公式计算。记词表大小为 $V$、宽度为 $W$、MLP 隐藏层宽度为 $M$、位置数为 $P_{\max}$：嵌入层为 $VW + P_{\max}W$；每个 Transformer 块有两个 LayerNorm（$2 \cdot 2W$）、四个注意力投影（$4(W^2 + W)$）和 MLP（$WM + M + MW + W$）；最后是末端的 LayerNorm（$2W$）和词表投影（$WV$）。词表投影有自己的矩阵，不与 token 嵌入表共享权重（如果共享，这个矩阵只会被计数一次，逐个张量统计的结果就会比公式少）。两种方法的结果一致：共 {{run:decoder.params:,}} 个参数。

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
say(en=f"Parameters: {N_PARAMS:,} counted, {parameter_formula(cfg):,} from the formula.",
    zh=f"参数量：逐个张量统计得 {N_PARAMS:,}，按公式计算得 {parameter_formula(cfg):,}。")
say_table([[f"`{name}`", f"{sum(p.numel() for p in module.parameters()):,}"] for name, module in model.named_children()],
          en=["module", "parameters"], zh=["模块", "参数量"])
assert N_PARAMS == parameter_formula(cfg)

# %% tags=["prose-values"]
{"decoder": {"params": N_PARAMS}}

# %% [markdown] lang="en"
# Does the code do what the text above says? We write the block a second time, from PyTorch's functional
# building blocks and the block's own weights: `F.layer_norm` before attention and before the MLP
# (pre-norm), `F.scaled_dot_product_attention` with PyTorch's lower-right causal mask for the attention,
# and `F.gelu`, the exact GELU, in the MLP. Our block must give the same output without a cache and with
# a cache of 2 positions. The two sides add the same numbers in a different order, so they are compared
# within the FP32 tolerance. The last row is the control: the same reference with the *tanh
# approximation* of GELU, the one GPT-2 uses, must fail the comparison; otherwise the check could not
# tell the two GELUs apart.

# %% [markdown] lang="zh"
# 代码真的像上文说的那样工作吗？我们用 PyTorch 的函数式组件和这个 Transformer 块自己的权重，把它再写一遍：注意力和 MLP 之前各有一个 `F.layer_norm`（前置归一化）；注意力用 `F.scaled_dot_product_attention`，配上 PyTorch 的右下角对齐因果掩码；MLP 用精确 GELU，即 `F.gelu`。无论没有缓存，还是缓存了 2 个位置，我们的 Transformer 块都必须给出相同的输出。两边以不同的顺序把同样的数相加，所以在 FP32 容差内比较。最后一行是负对照：把参照实现中的 GELU 换成 **tanh 近似**（GPT-2 用的正是它），结果必须通不过同样的比较，否则这个检查就分辨不出这两种 GELU。

# %%
# [en] The same pre-norm block from PyTorch's functions and `block`'s weights; `past` = (K, V) of
# [en] earlier positions; `gelu` = "none" (exact) or "tanh".
# [zh] 用 PyTorch 的函数和 `block` 的权重重写同一个前置归一化的 Transformer 块；`past` 是此前各位置的
# [zh] (K, V)；`gelu` 取 "none"（精确）或 "tanh"。
def reference_block(block, x, past=None, gelu="none"):
    attn, mlp = block.attn, block.mlp
    h = F.layer_norm(x, (x.shape[-1],), block.ln_1.weight, block.ln_1.bias)
    q, k, v = (attn.split_heads(F.linear(h, lin.weight, lin.bias)) for lin in (attn.q, attn.k, attn.v))
    if past is not None:
        k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[-2], k.shape[-2]))
    x = x + F.linear(context.transpose(1, 2).reshape(x.shape), attn.proj.weight, attn.proj.bias)
    h = F.layer_norm(x, (x.shape[-1],), block.ln_2.weight, block.ln_2.bias)
    hidden = F.gelu(F.linear(h, mlp.fc.weight, mlp.fc.bias), approximate=gelu)        # [B, T, mlp]
    return x + F.linear(hidden, mlp.proj.weight, mlp.proj.bias)


with torch.inference_mode():
    gen = torch.Generator().manual_seed(SEED)
    block, x = model.blocks[0], torch.randn(1, 3, cfg.width, generator=gen)     # x: [1, 3, width]
    reference = reference_block(block, x)
    # [en] K and V of positions 0 and 1: the cache for the call that feeds position 2.
    # [zh] 位置 0 和 1 的 K、V：送入位置 2 的那次调用所用的缓存。
    _, past = block(x[:, :2], causal_mask(0, 2))
    DECODER_CHECKS = {
        "`block(x)`": (block(x, causal_mask(0, 3))[0], reference),
        "`block(x[:, 2:], past)`": (block(x[:, 2:], causal_mask(2, 1), past)[0], reference[:, 2:]),
    }
    GELU_CONTROL = (block(x, causal_mask(0, 3))[0], reference_block(block, x, gelu="tanh"))

say_table(
    [[name, f"`{recomputed}`", f"{max_abs_err(*pair):.1e}", f"`{close(*pair)}`"] for (name, pair), recomputed in zip(
        [*DECODER_CHECKS.items(), ("`block(x)`", GELU_CONTROL)],
        ["reference_block(block, x)", "reference_block(block, x)[:, 2:]", 'reference_block(block, x, gelu="tanh")'])],
    en=["ours", "reference", "max abs error", "within tolerance"],
    zh=["我们的实现", "参照实现", "最大绝对误差", "在容差内一致"],
)
assert all(close(ours, recomputed) for ours, recomputed in DECODER_CHECKS.values()) and not close(*GELU_CONTROL)
