# %% [markdown] lang="en"
# ## 3. Multi-head latent attention (MLA)
#
# GQA saves cache by letting heads share keys and values. MLA (DeepSeek-V2, 2024; also DeepSeek-V3) caches no per-head keys or values at all.
# We build it in four short steps: what it caches, how it gets keys and values back, why RoPE needs a key of its
# own, and how absorption avoids rebuilding the keys at all.
#
# **Step 1: what is cached.** Each token's hidden state $h_t$ is projected *down* to one latent vector of $r$
# dimensions, and a second small projection gives a RoPE key of $d_R$ dimensions (step 3 says why):
#
# $$c_t = \mathrm{RMSNorm}(W^{DKV} h_t), \qquad k^R_t = \mathrm{RoPE}(W^{KR} h_t).$$
#
# These $r + d_R$ numbers are all a layer caches per token, whatever the number of heads. The RMSNorm is not in
# the MLA equations of the DeepSeek-V2 paper; its section 3.1.2 (Hyper-Parameters) adds it: "Therefore, in practice, we employ additional RMS Norm
# layers after the compressed latent vectors" (`kv_a_layernorm` in DeepSeek's and Hugging Face's code).
# The notation, with our sizes and DeepSeek-V3's (from its `config.json`, section 4):
#
# | tensor (per token $t$) | symbol | our model | DeepSeek-V3 | cached by (forms defined in steps 3 and 4) |
# |---|---|---|---|---|
# | hidden state, the attention's input | $h_t$ | 64 | 7,168 | none |
# | latent | $c_t$ | 32 ($r$) | 512 | expand-on-read and absorbed forms |
# | RoPE key, shared by all heads | $k^R_t$ | 8 ($d_R$) | 64 | every form (the naive one once per head) |
# | key of head $i$, compressed part | $k^C_{t,i}$ | 16 ($d_C$) | 128 | naive form |
# | value of head $i$ | $v_{t,i}$ | 16 ($d_v$) | 128 | naive form |
# | query of head $i$: compressed part, rotated part | $q^C_{t,i}$, $q^R_{t,i}$ | 16, 8 | 128, 64 | none |
# | heads | $H$ | 4 | 128 | |
#
# The cache gets its own small class, `LatentKV`, with the two fields named for what they hold: `latent` and
# `rope_key`. It stores them in the two slots of the series' `FullKV`, as Hugging Face's cache for this model
# does (its `keys` hold the latent, its `values` the RoPE key), so section 3.1 can compare the two caches.

# %% [markdown] lang="zh"
# ## 3. 多头潜在注意力（MLA）
#
# GQA 让多个头共享键和值，从而节省缓存。MLA（DeepSeek-V2，2024；DeepSeek-V3 也采用）则根本不缓存逐头的键和值。我们分四小步搭建它：它缓存什么，它如何取回键和值，RoPE 为什么需要一个单独的键，以及吸收如何让它根本不必重建键。
#
# **第一步：缓存什么。** 每个 token 的隐藏状态 $h_t$ 被**下投影**成一个 $r$ 维的潜向量；另一个很小的投影给出一个 $d_R$ 维的 RoPE 键（原因见第三步）：
#
# $$c_t = \mathrm{RMSNorm}(W^{DKV} h_t), \qquad k^R_t = \mathrm{RoPE}(W^{KR} h_t).$$
#
# 每个 token 在每一层只缓存这 $r + d_R$ 个数，与头数无关。DeepSeek-V2 论文的 MLA 公式里没有这个 RMSNorm，是该论文第 3.1.2 节（超参数）补充的：实践中在压缩后的潜向量之后另加 RMSNorm 层（DeepSeek 和 Hugging Face 的代码中是 `kv_a_layernorm`）。下表汇总这些记号，并列出我们的尺寸和 DeepSeek-V3 的尺寸（取自它的 `config.json`，见第 4 节）：
#
# | 张量（对 token $t$） | 记号 | 我们的模型 | DeepSeek-V3 | 哪些形式缓存它（各形式在第三、四步定义） |
# |---|---|---|---|---|
# | 隐藏状态，即注意力的输入 | $h_t$ | 64 | 7,168 | 都不缓存 |
# | 潜向量 | $c_t$ | 32（$r$） | 512 | 读时展开形式和吸收形式 |
# | RoPE 键，所有头共享 | $k^R_t$ | 8（$d_R$） | 64 | 每种形式（朴素形式每个头各存一份） |
# | 第 $i$ 个头的键，压缩部分 | $k^C_{t,i}$ | 16（$d_C$） | 128 | 朴素形式 |
# | 第 $i$ 个头的值 | $v_{t,i}$ | 16（$d_v$） | 128 | 朴素形式 |
# | 第 $i$ 个头的查询：压缩部分、旋转部分 | $q^C_{t,i}$、$q^R_{t,i}$ | 16、8 | 128、64 | 都不缓存 |
# | 头数 | $H$ | 4 | 128 | |
#
# 这份缓存有自己的小类 `LatentKV`，两个字段按内容命名：`latent`（潜向量）和 `rope_key`（RoPE 键）。它把二者存进本系列 `FullKV` 的两个槽位，与 Hugging Face 为这个模型提供的缓存一样（它的 `keys` 存潜向量，`values` 存 RoPE 键），所以第 3.1 节可以直接比较两边的缓存。

# %%
@dataclass
class MLAConfig(ArchConfig):
    # [en] MLA has no K/V heads: every head reads the one latent (kv_heads stays None, one per query head for Hugging Face).
    # [zh] MLA 没有 K/V 头：所有头都读取同一个潜向量（kv_heads 保持 None，在 Hugging Face 看来每个查询头各有一个）。
    latent: int = 32          # r    (kv_lora_rank)
    rope_dim: int = 8         # d_R  (qk_rope_head_dim)
    nope_dim: int = 16        # d_C  (qk_nope_head_dim)
    value_dim: int = 16       # d_v  (v_head_dim)


mla_cfg = MLAConfig(**LLAMA_SHAPE)


class LatentKV(FullKV):
    # [en] MLA's cache: each token's latent [B, 1, T, r] and RoPE key [B, 1, T, d_R], in FullKV's two slots.
    # [zh] MLA 的缓存：每个 token 的潜向量 [B, 1, T, r] 和 RoPE 键 [B, 1, T, d_R]，存在 FullKV 的两个槽位里。
    @property
    def latent(self):
        return self.k

    @property
    def rope_key(self):
        return self.v

# %% [markdown] lang="en"
# **Step 2: how each head gets its keys and values back.** Up-projections of head $i$ rebuild them from the latent:
# $k^C_{t,i} = W^{UK}_i c_t$ and $v_{t,i} = W^{UV}_i c_t$. In `MLAProjections`, `compress` makes the latent and
# the RoPE key (both shaped like one K/V head, `[B, 1, T, ·]`), and `expand` rebuilds every head's keys and values:
# it applies `kv_up`, splits each head's output into $k^C$ and $v$, and appends the shared RoPE key to each $k^C$.
# The weights are laid out as in Hugging Face's `DeepseekV3Attention`, so that section 3.1 can load them into it:
# `kv_down` stacks $W^{DKV}$ and $W^{KR}$ (`kv_a_proj_with_mqa`), `kv_norm` is the latent's RMSNorm
# (`kv_a_layernorm`), `kv_up` stacks each head's $W^{UK}_i$ and $W^{UV}_i$ (`kv_b_proj`). DeepSeek-V3 also
# compresses the queries through a latent; that saves activations, not cache, so we leave it out
# (`q_lora_rank=None`).

# %% [markdown] lang="zh"
# **第二步：每个头如何取回自己的键和值。** 第 $i$ 个头的**上投影**从潜向量重建它们：$k^C_{t,i} = W^{UK}_i c_t$，$v_{t,i} = W^{UV}_i c_t$。在 `MLAProjections` 中，`compress` 算出潜向量和 RoPE 键（二者的形状都像一个 K/V 头，`[B, 1, T, ·]`），`expand` 重建每个头的键和值：施加 `kv_up`，把每个头的输出拆成 $k^C$ 和 $v$，再把共享的 RoPE 键接在每个 $k^C$ 后面。权重的布局与 Hugging Face 的 `DeepseekV3Attention` 相同，以便第 3.1 节把它们加载进去：`kv_down` 把 $W^{DKV}$ 和 $W^{KR}$ 堆叠在一起（`kv_a_proj_with_mqa`），`kv_norm` 是潜向量的 RMSNorm（`kv_a_layernorm`），`kv_up` 把每个头的 $W^{UK}_i$ 和 $W^{UV}_i$ 堆叠在一起（`kv_b_proj`）。DeepSeek-V3 对查询也做了一次潜向量压缩；这节省的是激活值而不是缓存，所以我们略去这一步（`q_lora_rank=None`）。

# %%
class MLAProjections(nn.Module):
    def __init__(self, c: MLAConfig):
        super().__init__()
        self.heads, self.latent, self.rope_dim, self.nope_dim, self.value_dim = c.heads, c.latent, c.rope_dim, c.nope_dim, c.value_dim
        # [en] The queries' projection W^Q, used from step 3 on.
        # [zh] 查询的投影 W^Q，第三步起才用到。
        self.q = nn.Linear(c.width, c.heads * (c.nope_dim + c.rope_dim), bias=False)
        self.kv_down = nn.Linear(c.width, c.latent + c.rope_dim, bias=False)          # [W^DKV; W^KR]
        self.kv_norm = nn.RMSNorm(c.latent, eps=c.eps)
        # [en] kv_up stacks [W^UK_i; W^UV_i] for each head i.
        # [zh] kv_up 把每个头 i 的 [W^UK_i; W^UV_i] 堆叠在一起。
        self.kv_up = nn.Linear(c.latent, c.heads * (c.nope_dim + c.value_dim), bias=False)
        self.proj = nn.Linear(c.heads * c.value_dim, c.width, bias=False)
        self.rotary = Rotary(c.rope_dim, c.max_positions, c.rope_theta)

    def compress(self, x, positions):
        c, k_r = self.kv_down(x).split([self.latent, self.rope_dim], dim=-1)
        return self.kv_norm(c)[:, None], self.rotary(k_r[:, None], positions)         # [B, 1, T, r], [B, 1, T, d_R]

    def expand(self, c, k_r):
        kv = split_heads(self.kv_up(c[:, 0]), self.heads)                              # [B, H, T, d_C + d_v]
        k_c, v = kv.split([self.nope_dim, self.value_dim], dim=-1)
        return torch.cat((k_c, k_r.expand(-1, self.heads, -1, -1)), dim=-1), v        # [B, H, T, d_C + d_R], [B, H, T, d_v]

    def up_weights(self):
        # [en] Every head's W^UK_i and W^UV_i, the two parts of kv_up.
        # [zh] 每个头的 W^UK_i 和 W^UV_i，即 kv_up 的两部分。
        w = self.kv_up.weight.view(self.heads, self.nope_dim + self.value_dim, self.latent)
        return w.split([self.nope_dim, self.value_dim], dim=1)                        # [H, d_C, r], [H, d_v, r]

# %% [markdown] lang="en"
# **Step 3: why RoPE needs a key of its own.** Write $R_p$ for RoPE's rotation at position $p$ (pair $i$ turned by
# $p\,\theta_i$); angles add, so $R_t^\top R_s = R_{s-t}$. Ordinary RoPE would rotate the rebuilt key too,
# $k^C_{s,i} = R_s W^{UK}_i c_s$, and the query likewise. The score would become
#
# $$(R_t\, q^C_{t,i}) \cdot (R_s W^{UK}_i c_s) = q^C_{t,i} \cdot (R_{s-t}\, W^{UK}_i\, c_s),$$
#
# with a matrix between query and latent that changes with the distance $s - t$. Step 4 will cache only the latent and
# fold $W^{UK}_i$ into the query once, by regrouping $q \cdot (W c) = (W^\top q) \cdot c$; a matrix that changes with
# $s - t$ cannot be folded once, so every key would have to be rebuilt. The DeepSeek-V2 paper gives this reason for the
# **decoupled RoPE key** $k^R_t$. The query of head $i$, from one projection $W^Q h_t$ (`q`), has $d_C + d_R$
# numbers: a compressed part $q^C_{t,i}$ that meets the rebuilt keys unrotated, and a part $q^R_{t,i}$ rotated to
# match $k^R$. The score is $(q^C_{t,i} \cdot k^C_{s,i} + q^R_{t,i} \cdot k^R_s) / \sqrt{d_C + d_R}$, the DeepSeek-V2
# paper's scale (the released checkpoints multiply it by a YaRN factor: section 3.1's precision details).
# `MLAttention` is the **naive form**: it expands at once and caches each head's full key and value.

# %% [markdown] lang="zh"
# **第三步：RoPE 为什么需要一个单独的键。** 记 $R_p$ 为 RoPE 在位置 $p$ 上的旋转（第 $i$ 对转过 $p\,\theta_i$）；角度可以相加，所以 $R_t^\top R_s = R_{s-t}$。普通的 RoPE 会把重建出的键也旋转，$k^C_{s,i} = R_s W^{UK}_i c_s$，查询也同样旋转。分数就变成
#
# $$(R_t\, q^C_{t,i}) \cdot (R_s W^{UK}_i c_s) = q^C_{t,i} \cdot (R_{s-t}\, W^{UK}_i\, c_s),$$
#
# 夹在查询和潜向量之间的矩阵随距离 $s - t$ 而变。第四步将只缓存潜向量，并利用 $q \cdot (W c) = (W^\top q) \cdot c$ 这一重新组合，把 $W^{UK}_i$ 一次性并入查询；随 $s - t$ 而变的矩阵无法一次性并入，于是每个键都得重建。DeepSeek-V2 论文正是用这个理由引入**解耦的 RoPE 键** $k^R_t$。第 $i$ 个头的查询来自同一个投影 $W^Q h_t$（`q`），有 $d_C + d_R$ 个数：压缩部分 $q^C_{t,i}$ 不经旋转，与重建出的键相乘；另一部分 $q^R_{t,i}$ 经过旋转，与 $k^R$ 配套。分数是 $(q^C_{t,i} \cdot k^C_{s,i} + q^R_{t,i} \cdot k^R_s) / \sqrt{d_C + d_R}$，这是 DeepSeek-V2 论文中的缩放（发布的检查点还会再乘以一个 YaRN 因子，见第 3.1 节的精度细节）。`MLAttention` 就是**朴素形式**：它当场展开，为每个头缓存完整的键和值。

# %%
class MLAttention(MLAProjections):
    def __init__(self, c: MLAConfig):
        super().__init__(c)
        self.scale = (c.nope_dim + c.rope_dim) ** -0.5

    def new_cache(self, caches: list):
        return FullKV()

    def queries(self, x, positions):
        q_c, q_r = split_heads(self.q(x), self.heads).split([self.nope_dim, self.rope_dim], dim=-1)
        return q_c, self.rotary(q_r, positions)                                       # [B, H, T, d_C], [B, H, T, d_R]

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        k, v = self.expand(*self.compress(x, positions))
        keys, values, key_pos = cache.update(k, v, positions)
        context = softmax_attention(torch.cat((q_c, q_r), dim=-1), keys, values, causal(positions, key_pos))
        return self.proj(merge_heads(context))

# %% [markdown] lang="en"
# **Step 4: caching the latent, two ways.** The **expand-on-read form**, `ExpandOnReadMLA`, caches the latent and
# the RoPE key and, at every call, expands *all* cached latents again into every head's keys and values. That is
# what Hugging Face's `DeepseekV3Attention` does in transformers 5.23.0 (its `expand_kv`): it saves cache capacity,
# not work and not memory traffic (section 4 counts both).
#
# The **absorbed form**, `AbsorbedMLA`, never expands, because matrix products regroup. For the score,
# $q^C_{t,i} \cdot (W^{UK}_i c_s) = ((W^{UK}_i)^\top q^C_{t,i}) \cdot c_s$: fold $W^{UK}_i$ into the query once
# (`q_c @ w_uk`) and dot it with the cached latents. For the output,
# $\sum_s w_s W^{UV}_i c_s = W^{UV}_i \sum_s w_s c_s$: average the latents with the attention weights, then apply
# $W^{UV}_i$ once. This is **absorption**; it changes only the order of the arithmetic, so it must agree with the
# naive form within rounding. DeepSeek's own inference code offers both ends: `attn_impl = "naive"` caches keys and
# values, `"absorb"` caches the latent.

# %% [markdown] lang="zh"
# **第四步：缓存潜向量的两种用法。** **读时展开形式** `ExpandOnReadMLA` 缓存潜向量和 RoPE 键，每次调用都把**全部**缓存的潜向量重新展开成每个头的键和值。transformers 5.23.0 中 Hugging Face 的 `DeepseekV3Attention` 正是这样做的（它的 `expand_kv`）：这样省下的是缓存容量，既没有省下计算，也没有省下访存（第 4 节统计这两者）。
#
# **吸收形式** `AbsorbedMLA` 从不展开，因为矩阵乘法可以换个次序计算。对分数而言，$q^C_{t,i} \cdot (W^{UK}_i c_s) = ((W^{UK}_i)^\top q^C_{t,i}) \cdot c_s$：把 $W^{UK}_i$ 一次性并入查询（`q_c @ w_uk`），再与缓存的潜向量做点积。对输出而言，$\sum_s w_s W^{UV}_i c_s = W^{UV}_i \sum_s w_s c_s$：先用注意力权重对潜向量求加权和，再乘一次 $W^{UV}_i$。这就是**吸收**；它只改变算术运算的先后次序，所以必须与朴素形式在舍入误差范围内一致。DeepSeek 自己的推理代码两种做法都提供：`attn_impl = "naive"` 缓存键和值，`"absorb"` 缓存潜向量。

# %%
class ExpandOnReadMLA(MLAttention):
    def new_cache(self, caches: list):
        return LatentKV()

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        c, k_r = self.compress(x, positions)
        latents, rope_keys, key_pos = cache.update(c, k_r, positions)                 # [B, 1, T_keys, r], [B, 1, T_keys, d_R]
        # [en] Every cached latent is expanded again, at every call.
        # [zh] 每次调用都要把缓存中的全部潜向量重新展开一遍。
        keys, values = self.expand(latents, rope_keys)                                # [B, H, T_keys, d_C + d_R], [B, H, T_keys, d_v]
        context = softmax_attention(torch.cat((q_c, q_r), dim=-1), keys, values, causal(positions, key_pos))
        return self.proj(merge_heads(context))


class AbsorbedMLA(MLAttention):
    def new_cache(self, caches: list):
        return LatentKV()

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        c, k_r = self.compress(x, positions)
        latents, rope_keys, key_pos = cache.update(c, k_r, positions)
        w_uk, w_uv = self.up_weights()                                                # [H, d_C, r], [H, d_v, r]
        q_latent = q_c @ w_uk                                                          # [B, H, T_new, r]
        scores = (q_latent @ latents.transpose(-2, -1) + q_r @ rope_keys.transpose(-2, -1)) * self.scale
        weights = scores.masked_fill(~causal(positions, key_pos), float("-inf")).softmax(dim=-1)   # [B, H, T_new, T_keys]
        context = (weights @ latents) @ w_uv.transpose(-2, -1)                        # [B, H, T_new, d_v]
        return self.proj(merge_heads(context))


MLA_FORMS = {"naive": MLAttention, "expand_on_read": ExpandOnReadMLA, "absorbed": AbsorbedMLA}

# %% [markdown] lang="en"
# **Criterion 1: each form's cache is exact.** The three forms, each over the 12 configurations against its own
# full recomputation; the cached tensors compared are the expanded keys and values for the naive form and the
# latents and RoPE keys for the other two.

# %% [markdown] lang="zh"
# **判据 1：每种形式的缓存都是精确的。** 三种形式各自在 12 种配置上与自己的完整重算比较；比较的缓存张量，对朴素形式是展开后的键和值，对另外两种形式是潜向量和 RoPE 键。

# %%
MLA_GRIDS = {name: run_grid(lambda form=form: build(mla_cfg, lambda i: form(mla_cfg))) for name, form in MLA_FORMS.items()}
summary_table({f"`{MLA_FORMS[name].__name__}`": rows for name, rows in MLA_GRIDS.items()})
assert all(r["passed"] for rows in MLA_GRIDS.values() for r in rows)

# %% [markdown] lang="en"
# **Criterion 2: absorption changes only the order of the arithmetic.** With the same weights, the absorbed form's
# logits must equal the naive form's within tolerance, chunk by chunk, and the latents and RoPE keys it cached,
# expanded with `expand`, must equal the keys and values the naive form cached.

# %% [markdown] lang="zh"
# **判据 2：吸收只改变运算的先后次序。** 在同一份权重下，吸收形式的 logits 必须与朴素形式在容差内一致（逐个分块地比较）；而且它缓存的潜向量和 RoPE 键经 `expand` 展开之后，必须等于朴素形式缓存的键和值。

# %%
@torch.inference_mode()
def absorbed_vs_naive(batch: int, chunk: int, dtype, naive=MLAttention, absorbed=AbsorbedMLA) -> dict:
    naive_net = build(mla_cfg, lambda i: naive(mla_cfg)).to(dtype)
    absorbed_net = build(mla_cfg, lambda i: absorbed(mla_cfg)).to(dtype)
    naive_logits, naive_cache = run_chunked(naive_net, STREAM[:batch], chunk)
    absorbed_logits, absorbed_cache = run_chunked(absorbed_net, STREAM[:batch], chunk)
    pairs = []
    for layer, latent_cache, kv_cache in zip(absorbed_net.blocks, absorbed_cache, naive_cache):
        k, v = layer.attn.expand(latent_cache.latent, latent_cache.rope_key)
        pairs += [(k, kv_cache.k), (v, kv_cache.v)]
    logits_passed = close(absorbed_logits, naive_logits)
    return {"batch": batch, "chunk": chunk, "dtype": DTYPE_NAME[dtype],
            "max_abs_logit_err": max_abs_err(absorbed_logits, naive_logits),
            "max_abs_cache_err": max(max_abs_err(a, b) for a, b in pairs),
            "logits_passed": logits_passed, "passed": bool(logits_passed and all(close(a, b) for a, b in pairs))}


ABSORBED_VS_NAIVE = [absorbed_vs_naive(batch, chunk, dtype) for dtype, batch, chunk in GRID]
summary_table({"`AbsorbedMLA` / `MLAttention`": ABSORBED_VS_NAIVE})
assert all(r["passed"] for r in ABSORBED_VS_NAIVE)
