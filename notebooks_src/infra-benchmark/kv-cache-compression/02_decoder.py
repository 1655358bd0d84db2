# %% [markdown] lang="en"
# **Attention, from positions.** Four small functions do the work every attention layer shares. `split_heads`
# and `merge_heads` reshape between `[B, T, heads * D]` and `[B, heads, T, D]`. `causal` is section 2's rule
# written with positions, $\mathrm{allowed}_{i,j} = [\,p^k_j \le p^q_i\,]$; it also accepts one row of key
# positions per head (`[..., T_keys]`), which section 8 needs. `attend` expands the K/V heads to the query heads
# (query head $h$ reads K/V head $\lfloor h / g \rfloor$, `repeat_interleave`), then computes the masked softmax
# attention explicitly. As the architectures notebook said, expanding the heads is reference code: a fused
# kernel indexes K/V head $h // g$ instead of copying it.

# %% [markdown] lang="zh"
# **由位置计算注意力。** 每个注意力层共用的工作由四个小函数完成。`split_heads` 和 `merge_heads` 在 `[B, T, heads * D]` 与 `[B, heads, T, D]` 之间变换形状。`causal` 就是第 2 节的规则，只是改用位置来写：$\mathrm{allowed}_{i,j} = [\,p^k_j \le p^q_i\,]$；它也接受每个头各一行的键位置（`[..., T_keys]`），第 8 节要用到这一点。`attend` 先把 K/V 头扩展到查询头的数量（查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头，即 `repeat_interleave`），再显式地计算带掩码的 softmax 注意力。正如架构笔记本所说，扩展 K/V 头只是参考实现的写法：融合算子会直接按 $h // g$ 去索引 K/V 头，而不是复制它。

# %%
def split_heads(x, heads: int):                  # [B, T, heads * D] -> [B, heads, T, D]
    batch, length, _ = x.shape
    return x.view(batch, length, heads, -1).transpose(1, 2)


def merge_heads(x):                              # [B, heads, T, D] -> [B, T, heads * D]
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


def causal(query_pos, key_pos):
    # bool [..., T_new, T_keys]: allowed[i, j] = key_pos[j] <= query_pos[i]
    return key_pos[..., None, :] <= query_pos[:, None]


def attend(q, keys, values, allowed, scale: float):
    groups = q.shape[1] // keys.shape[1]
    keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
    scores = q @ keys.transpose(-2, -1) * scale                                   # [B, H, T_new, T_keys]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ values   # [B, H, T_new, Dv]

# %% [markdown] lang="en"
# **The attention layer.** `Attention` projects $H$ query heads and $H_{kv}$ K/V heads without biases, rotates Q
# and K at the tokens' absolute positions, hands the new K/V to its cache, and attends to what the cache returns
# under the mask its `mask` method computes. Later sections subclass it and override one method at a time:
# `new_cache` (what the layer keeps), `mask` (what a query may read) or `forward` (how it reads).

# %% [markdown] lang="zh"
# **注意力层。** `Attention` 不带偏置地投影出 $H$ 个查询头和 $H_{kv}$ 个 K/V 头，按 token 的绝对位置旋转 Q 和 K，把新的 K/V 交给自己的缓存，再在 `mask` 方法算出的掩码下，对缓存返回的内容计算注意力。后面的章节会继承它，每次只重写一个方法：`new_cache`（这一层保留什么）、`mask`（查询可以读取什么）或 `forward`（怎样读取）。

# %%
class Attention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.heads, c.kv_heads, c.head_dim
        self.q = nn.Linear(c.width, c.heads * c.head_dim, bias=False)
        self.k = nn.Linear(c.width, c.kv_heads * c.head_dim, bias=False)
        self.v = nn.Linear(c.width, c.kv_heads * c.head_dim, bias=False)
        self.o = nn.Linear(c.heads * c.head_dim, c.width, bias=False)
        self.rotary = Rotary(c.head_dim, c.max_positions, c.rope_theta)

    def new_cache(self, caches: list):
        return FullKV()

    def mask(self, query_pos, key_pos):
        return causal(query_pos, key_pos)

    def forward(self, x, positions, cache):                                      # x: [B, T_new, width]
        q = self.rotary(split_heads(self.q(x), self.heads), positions)           # [B, H, T_new, Dh]
        k = self.rotary(split_heads(self.k(x), self.kv_heads), positions)        # [B, H_kv, T_new, Dh]
        v = split_heads(self.v(x), self.kv_heads)
        keys, values, key_pos = cache.update(k, v, positions)                   # [B, H_kv, T_keys, Dh]
        context = attend(q, keys, values, self.mask(positions, key_pos), self.head_dim ** -0.5)
        return self.o(merge_heads(context))

# %% [markdown] lang="en"
# **The decoder.** The gated MLP $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$, a pre-norm layer with
# PyTorch's `nn.RMSNorm`, and the decoder. `Decoder(config, attention)` calls `attention(i)` to build layer
# $i$'s attention, so that a model is described by one function. `new_cache()` asks the layers in order for
# their caches, passing each the list made so far; `forward(ids, cache)` numbers the new tokens from
# `cache[0].seen` (the positions continue where the cache ends) and returns the logits and the cache.

# %% [markdown] lang="zh"
# **解码器。** 带门控的 MLP $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$、使用 PyTorch `nn.RMSNorm` 的前置归一化层，以及解码器本身。`Decoder(config, attention)` 调用 `attention(i)` 来构造第 $i$ 层的注意力，于是一个模型只需要一个函数来描述。`new_cache()` 依次请各层创建自己的缓存，并把已经创建好的列表传给每一层；`forward(ids, cache)` 从 `cache[0].seen` 开始为新 token 编号（位置紧接在缓存末尾之后），返回 logits 和缓存。

# %%
class SwiGLU(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(c.width, c.mlp, bias=False)
        self.up = nn.Linear(c.width, c.mlp, bias=False)
        self.down = nn.Linear(c.mlp, c.width, bias=False)

    def forward(self, x):                                                        # [B, T, width] -> [B, T, width]
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, c: ModelConfig, attn: nn.Module):
        super().__init__()
        self.ln_1, self.attn = nn.RMSNorm(c.width, eps=c.eps), attn
        self.ln_2, self.mlp = nn.RMSNorm(c.width, eps=c.eps), SwiGLU(c)

    def forward(self, x, positions, cache):
        x = x + self.attn(self.ln_1(x), positions, cache)
        return x + self.mlp(self.ln_2(x))


class Decoder(nn.Module):
    def __init__(self, c: ModelConfig, attention):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab, c.width)
        self.layers = nn.ModuleList(Layer(c, attention(i)) for i in range(c.layers))
        self.ln_f = nn.RMSNorm(c.width, eps=c.eps)
        self.lm_head = nn.Linear(c.width, c.vocab, bias=False)

    def new_cache(self) -> list:
        caches = []
        for layer in self.layers:
            caches.append(layer.attn.new_cache(caches))
        return caches

    def forward(self, ids, cache=None):                                          # ids: [B, T_new]
        cache = self.new_cache() if cache is None else cache
        positions = absolute_positions(cache[0].seen, ids.shape[1])             # [T_new]
        x = self.wte(ids)
        for layer, layer_cache in zip(self.layers, cache):
            x = layer(x, positions, layer_cache)
        return self.lm_head(self.ln_f(x)), cache                                 # [B, T_new, vocab]


def build(c: ModelConfig, attention, seed: int = SEED) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(c, attention).eval()
