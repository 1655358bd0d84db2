# %% [markdown] lang="en"
# ## 3. Multi-head latent attention (MLA)
#
# GQA saves cache by letting heads share keys and values. MLA (DeepSeek-V2, 2024; also DeepSeek-V3) saves more
# by caching neither. Each token's hidden state $h_t$ is projected *down* to one latent vector of $r$ dimensions,
# normalized with RMSNorm, and cached:
#
# $$c_t = \mathrm{RMSNorm}(W^{DKV} h_t), \qquad k^C_{t,i} = W^{UK}_i\, c_t, \qquad v_{t,i} = W^{UV}_i\, c_t ,$$
#
# (The MLA equations of the DeepSeek-V2 paper do not show this norm, but the paper's text on its model
# hyper-parameters adds it: "we employ additional RMS Norm layers after the compressed latent vectors". DeepSeek's
# released code and Hugging Face's model apply it as `kv_a_layernorm`, and so do we.)
#
# where the *up*-projections $W^{UK}_i$ and $W^{UV}_i$ of head $i$ rebuild that head's key and value from the
# latent. RoPE cannot rotate the keys rebuilt from the latent without losing the saving described next (negative
# control 1 below shows why), so MLA adds a small **decoupled RoPE key** of $d_R$ dimensions, shared by all heads,
# $k^R_t = \mathrm{RoPE}(W^{KR} h_t)$. The queries come from one projection, $W^Q h_t$ (`q` in the code): for head
# $i$ it gives $d_C + d_R$ numbers, split into a compressed part $q^C_{t,i}$ (it meets the keys rebuilt from the latent) and a part $q^R_{t,i}$ that is rotated
# to match the RoPE key. The score of head $i$
# is the sum of the two dot products, $q^C_{t,i} \cdot k^C_{s,i} + q^R_{t,i} \cdot k^R_s$, scaled by
# $1/\sqrt{d_C + d_R}$ (the DeepSeek-V2 formula; DeepSeek-V3's released configuration extends its context with YaRN,
# which multiplies this scale by a further factor, `yarn_apply_mscale` in Hugging Face's code, and leaves the cache
# unchanged). Per token and layer the cache holds $r + d_R$ numbers, whatever the number of heads:
# DeepSeek-V3 has $r = 512$ and $d_R = 64$ for 128 heads.
#
# The saving is only real if decoding never rebuilds all the keys. It need not, because matrix products
# regroup. For the score, $q^C_{t,i} \cdot (W^{UK}_i c_s) = ((W^{UK}_i)^\top q^C_{t,i}) \cdot c_s$: fold
# $W^{UK}_i$ into the query once, and dot the result with the cached latents. For the output,
# $\sum_s w_s W^{UV}_i c_s = W^{UV}_i \sum_s w_s c_s$: attend over the latents, then apply $W^{UV}_i$ once. This
# is **absorption**. It changes only the order of the arithmetic, so the absorbed form must agree with the naive
# one within rounding.
#
# Our MLA has the decoder's sizes: $H = 4$ heads, $d_C = 16$, $d_R = 8$, value dimension $d_v = 16$ and a latent
# of $r = 32$. The table gathers the notation, with our sizes and DeepSeek-V3's (from its `config.json`, section 4):
#
# | tensor (per token $t$) | symbol | our model | DeepSeek-V3 | cached by |
# |---|---|---|---|---|
# | hidden state, the attention's input | $h_t$ | 64 | 7,168 | none |
# | query of head $i$, compressed part | $q^C_{t,i}$ | 16 ($d_C$) | 128 | none |
# | query of head $i$, rotated part | $q^R_{t,i}$ | 8 ($d_R$) | 64 | none |
# | latent, $\mathrm{RMSNorm}(W^{DKV} h_t)$ | $c_t$ | 32 ($r$) | 512 | latent and absorbed forms |
# | RoPE key, shared by all heads | $k^R_t$ | 8 ($d_R$) | 64 | every form (the naive one once per head) |
# | key of head $i$, compressed part, $W^{UK}_i c_t$ | $k^C_{t,i}$ | 16 ($d_C$) | 128 | naive form |
# | value of head $i$, $W^{UV}_i c_t$ | $v_{t,i}$ | 16 ($d_v$) | 128 | naive form |
# | heads | $H$ | 4 | 128 | |
#
# The weights are matrices between these sizes: $W^{DKV}$ is $r \times 64$ here ($512 \times 7{,}168$ in
# DeepSeek-V3), $W^{KR}$ is $d_R \times 64$, and each head's $W^{UK}_i$ and $W^{UV}_i$ are $d_C \times r$ and
# $d_v \times r$. They are laid out as in Hugging Face's `DeepseekV3Attention`, so that section 3.1 can load
# them into it: `kv_down` stacks $W^{DKV}$ and $W^{KR}$ (`kv_a_proj_with_mqa`), `kv_norm` is the latent's
# RMSNorm (`kv_a_layernorm`), and `kv_up` stacks each head's $W^{UK}_i$ and $W^{UV}_i$ (`kv_b_proj`). DeepSeek-V3
# also compresses the queries through a latent; that saves activation memory, not cache, so we leave it out
# (`q_lora_rank=None` in Hugging Face's configuration).

# %% [markdown] lang="zh"
# ## 3. 多头潜在注意力（MLA）
#
# GQA 让多个头共享键和值，从而节省缓存。MLA（DeepSeek-V2，2024；DeepSeek-V3 也采用）省得更多：键和值都不缓存。每个 token 的隐藏状态 $h_t$ 先被**下投影**成一个 $r$ 维的潜向量，经过 RMSNorm 归一化后存入缓存：
#
# $$c_t = \mathrm{RMSNorm}(W^{DKV} h_t), \qquad k^C_{t,i} = W^{UK}_i\, c_t, \qquad v_{t,i} = W^{UV}_i\, c_t ,$$
#
# （DeepSeek-V2 论文的 MLA 公式里没有写出这个归一化，但论文介绍模型超参数的正文补充了它：在压缩后的潜向量之后另加 RMSNorm 层。DeepSeek 发布的代码和 Hugging Face 的模型都以 `kv_a_layernorm` 实现这一步，我们也照此实现。）
#
# 其中第 $i$ 个头的**上投影** $W^{UK}_i$ 和 $W^{UV}_i$ 从潜向量重建出这个头的键和值。如果用 RoPE 去旋转从潜向量重建出的键，下文所说的节省就会落空（下面的负对照 1 说明原因），所以 MLA 额外增加一个 $d_R$ 维的**解耦的 RoPE 键**，由所有头共享：$k^R_t = \mathrm{RoPE}(W^{KR} h_t)$。查询来自同一个投影 $W^Q h_t$（代码中的 `q`）：它为第 $i$ 个头给出 $d_C + d_R$ 个数，拆成压缩部分 $q^C_{t,i}$（它与从潜向量重建出的键相乘）和经过旋转、与 RoPE 键配套的部分 $q^R_{t,i}$。第 $i$ 个头的分数是两个点积之和 $q^C_{t,i} \cdot k^C_{s,i} + q^R_{t,i} \cdot k^R_s$，再乘以 $1/\sqrt{d_C + d_R}$（这是 DeepSeek-V2 的公式；DeepSeek-V3 发布的配置用 YaRN 扩展上下文，会给这个缩放再乘上一个系数，即 Hugging Face 代码中的 `yarn_apply_mscale`，缓存则不受影响）。每个 token 在每一层只缓存 $r + d_R$ 个数，与头数无关：DeepSeek-V3 有 128 个头，$r = 512$，$d_R = 64$。
#
# 只有解码时不必重建全部键，这份节省才算数。而这确实不必：矩阵乘法满足结合律，可以换个次序计算。对分数而言，$q^C_{t,i} \cdot (W^{UK}_i c_s) = ((W^{UK}_i)^\top q^C_{t,i}) \cdot c_s$：把 $W^{UK}_i$ 一次性并入查询，再用结果与缓存的潜向量做点积。对输出而言，$\sum_s w_s W^{UV}_i c_s = W^{UV}_i \sum_s w_s c_s$：先在潜向量上做注意力，再乘一次 $W^{UV}_i$。这就是**吸收**。它只改变算术运算的先后次序，所以吸收形式必须与朴素形式在舍入误差范围内一致。
#
# 我们的 MLA 采用解码器的尺寸：$H = 4$ 个头，$d_C = 16$，$d_R = 8$，值的维度 $d_v = 16$，潜向量 $r = 32$ 维。下表汇总了这些记号，并列出我们的尺寸和 DeepSeek-V3 的尺寸（取自它的 `config.json`，见第 4 节）：
#
# | 张量（对 token $t$） | 记号 | 我们的模型 | DeepSeek-V3 | 哪些形式缓存它 |
# |---|---|---|---|---|
# | 隐藏状态，即注意力的输入 | $h_t$ | 64 | 7,168 | 都不缓存 |
# | 第 $i$ 个头的查询，压缩部分 | $q^C_{t,i}$ | 16（$d_C$） | 128 | 都不缓存 |
# | 第 $i$ 个头的查询，旋转部分 | $q^R_{t,i}$ | 8（$d_R$） | 64 | 都不缓存 |
# | 潜向量，$\mathrm{RMSNorm}(W^{DKV} h_t)$ | $c_t$ | 32（$r$） | 512 | 潜向量形式和吸收形式 |
# | RoPE 键，所有头共享 | $k^R_t$ | 8（$d_R$） | 64 | 每种形式（朴素形式每个头各存一份） |
# | 第 $i$ 个头的键，压缩部分，$W^{UK}_i c_t$ | $k^C_{t,i}$ | 16（$d_C$） | 128 | 朴素形式 |
# | 第 $i$ 个头的值，$W^{UV}_i c_t$ | $v_{t,i}$ | 16（$d_v$） | 128 | 朴素形式 |
# | 头数 | $H$ | 4 | 128 | |
#
# 权重就是这些尺寸之间的矩阵：$W^{DKV}$ 在这里是 $r \times 64$（DeepSeek-V3 中是 $512 \times 7{,}168$），$W^{KR}$ 是 $d_R \times 64$，每个头的 $W^{UK}_i$ 和 $W^{UV}_i$ 分别是 $d_C \times r$ 和 $d_v \times r$。权重的布局与 Hugging Face 的 `DeepseekV3Attention` 相同，以便 3.1 节把它们加载进去：`kv_down` 把 $W^{DKV}$ 和 $W^{KR}$ 堆叠在一起（`kv_a_proj_with_mqa`），`kv_norm` 是潜向量的 RMSNorm（`kv_a_layernorm`），`kv_up` 把每个头的 $W^{UK}_i$ 和 $W^{UV}_i$ 堆叠在一起（`kv_b_proj`）。DeepSeek-V3 对查询也做了一次潜向量压缩；这节省的是激活值的内存，而不是缓存，所以我们略去这一步（对应 Hugging Face 配置中的 `q_lora_rank=None`）。

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

# %% [markdown] lang="en"
# **The naive form** caches what ordinary attention caches: per head a key $[k^C_i; k^R]$ of $d_C + d_R$
# dimensions and a value of $d_v$ dimensions. Its helpers are shared by all forms: `queries` splits each
# query head into $q^C$ and the rotated $q^R$; `compress` makes the normalized latent and the rotated RoPE key,
# both shaped like one K/V head (`[B, 1, T, ·]`); `expand` rebuilds every head's keys and values from latents and
# RoPE keys: it applies `kv_up`, splits each head's output into $k^C$ and $v$, and appends the shared RoPE key to
# every head's $k^C$ (Hugging Face's `expand_kv` does the same); `up_weights` returns every head's $W^{UK}_i$ and
# $W^{UV}_i$, for the absorbed form.

# %% [markdown] lang="zh"
# **朴素形式**缓存的内容与普通注意力相同：每个头一个 $d_C + d_R$ 维的键 $[k^C_i; k^R]$ 和一个 $d_v$ 维的值。它的几个辅助方法为所有形式共用：`queries` 把每个查询头拆成 $q^C$ 和旋转后的 $q^R$；`compress` 算出归一化的潜向量和旋转后的 RoPE 键，二者的形状都像一个 K/V 头（`[B, 1, T, ·]`）；`expand` 由潜向量和 RoPE 键重建每个头的键和值：施加 `kv_up`，把每个头的输出拆成 $k^C$ 和 $v$，再把共享的 RoPE 键接在每个头的 $k^C$ 后面（Hugging Face 的 `expand_kv` 也是这样做的）；`up_weights` 返回每个头的 $W^{UK}_i$ 和 $W^{UV}_i$，供吸收形式使用。

# %%
class MLAttention(nn.Module):
    def __init__(self, c: MLAConfig):
        super().__init__()
        self.heads, self.latent, self.rope_dim, self.nope_dim, self.value_dim = c.heads, c.latent, c.rope_dim, c.nope_dim, c.value_dim
        self.q = nn.Linear(c.width, c.heads * (c.nope_dim + c.rope_dim), bias=False)
        self.kv_down = nn.Linear(c.width, c.latent + c.rope_dim, bias=False)          # [W^DKV; W^KR]
        self.kv_norm = nn.RMSNorm(c.latent, eps=c.eps)
        # [en] kv_up stacks [W^UK_i; W^UV_i] for each head i.
        # [zh] kv_up 把每个头 i 的 [W^UK_i; W^UV_i] 堆叠在一起。
        self.kv_up = nn.Linear(c.latent, c.heads * (c.nope_dim + c.value_dim), bias=False)
        self.proj = nn.Linear(c.heads * c.value_dim, c.width, bias=False)
        self.rotary = Rotary(c.rope_dim, c.max_positions, c.rope_theta)
        self.scale = (c.nope_dim + c.rope_dim) ** -0.5

    def new_cache(self, caches: list):
        return FullKV()

    def queries(self, x, positions):
        q_c, q_r = split_heads(self.q(x), self.heads).split([self.nope_dim, self.rope_dim], dim=-1)
        return q_c, self.rotary(q_r, positions)                                       # [B, H, T, d_C], [B, H, T, d_R]

    def compress(self, x, positions):
        c, k_r = self.kv_down(x).split([self.latent, self.rope_dim], dim=-1)
        return self.kv_norm(c)[:, None], self.rotary(k_r[:, None], positions)         # [B, 1, T, r], [B, 1, T, d_R]

    def up_weights(self):
        # [en] Every head's W^UK_i and W^UV_i, the two parts of kv_up.
        # [zh] 每个头的 W^UK_i 和 W^UV_i，即 kv_up 的两部分。
        w = self.kv_up.weight.view(self.heads, self.nope_dim + self.value_dim, self.latent)
        return w.split([self.nope_dim, self.value_dim], dim=1)                        # [H, d_C, r], [H, d_v, r]

    def expand(self, c, k_r):
        kv = split_heads(self.kv_up(c[:, 0]), self.heads)                              # [B, H, T, d_C + d_v]
        k_c, v = kv.split([self.nope_dim, self.value_dim], dim=-1)
        return torch.cat((k_c, k_r.expand(-1, self.heads, -1, -1)), dim=-1), v        # [B, H, T, d_C + d_R], [B, H, T, d_v]

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        k, v = self.expand(*self.compress(x, positions))
        keys, values, key_pos = cache.update(k, v, positions)
        context = softmax_attention(torch.cat((q_c, q_r), dim=-1), keys, values, causal(positions, key_pos))
        return self.proj(merge_heads(context))

# %% [markdown] lang="en"
# **Caching the latent, two ways.** Both forms cache two tensors per token, the latent and the RoPE key, and both
# reuse `FullKV` unchanged: it has two slots, one it calls keys and one it calls values, and it does not care what
# they hold. **The latent goes in the slot for keys (`cache.k`) and the RoPE key in the slot for values (`cache.v`);**
# read every `.k` of these two forms' caches as "latent" and every `.v` as "RoPE key". That is not a slip:
# Hugging Face's cache for this model does the same (its `keys` hold the latent, its `values` the RoPE key), so
# section 3.1 can compare the two caches slot by slot.
#
# The two forms differ in what they do with the cached latents. `LatentMLA`, the **latent form** (read it as "the
# re-expanding form": both forms cache the latent, and this one expands it again on every read), rebuilds every
# head's keys and values from *all* cached latents at every call. This is what Hugging Face's `DeepseekV3Attention` does in transformers 5.23: its
# cache holds the compressed latent and the rotated RoPE key, and at each step its `expand_kv` applies `kv_b_proj`
# to every cached latent and writes the expanded keys and values into new tensors, which attention then reads. It
# saves cache capacity, not work, and not memory traffic either (section 4 counts both).
#
# `AbsorbedMLA`, the **absorbed form**, caches the same two tensors and never expands them: it folds
# $W^{UK}_i$ into the query ($\tilde q_i = (W^{UK}_i)^\top q^C_i$, `q_c @ w_uk`), scores the latents and the RoPE
# keys, averages the latents with the attention weights, and only then applies $W^{UV}_i$. DeepSeek's own
# inference code offers both ends: `attn_impl = "naive"` caches keys and values, `"absorb"` caches the latent.

# %% [markdown] lang="zh"
# **缓存潜向量的两种方式。** 两种形式都为每个 token 缓存两个张量：潜向量和 RoPE 键。它们都原样沿用 `FullKV`。`FullKV` 有两个槽位，一个叫“键”，一个叫“值”，并不关心里面放的是什么。**潜向量放在存键的槽位里（`cache.k`），RoPE 键放在存值的槽位里（`cache.v`）**；读到这两种形式的缓存时，每个 `.k` 都应读作“潜向量”，每个 `.v` 都应读作“RoPE 键”。这不是笔误：Hugging Face 为这个模型提供的缓存也是这样放的（它的 `keys` 存潜向量，`values` 存 RoPE 键），所以 3.1 节可以逐个槽位比较两边的缓存。
#
# 两种形式的区别在于如何使用缓存的潜向量。`LatentMLA` 即**潜向量形式**（也可以理解为“重新展开的形式”）。两种形式缓存的都是潜向量，它的不同之处在于：每次调用都要用**全部**缓存的潜向量重新展开出每个头的键和值。transformers 5.23 中 Hugging Face 的 `DeepseekV3Attention` 正是这样做的：它的缓存保存压缩后的潜向量和旋转后的 RoPE 键；每一步，它的 `expand_kv` 都对每个缓存的潜向量施加 `kv_b_proj`，把展开后的键和值写进新的张量，再交给注意力读取。这样省下的是缓存的容量，既没有省下计算，也没有省下访存（第 4 节统计这两者）。
#
# `AbsorbedMLA` 即**吸收形式**，缓存同样的两个张量，但从不展开它们：它把 $W^{UK}_i$ 并入查询（$\tilde q_i = (W^{UK}_i)^\top q^C_i$，即 `q_c @ w_uk`），对潜向量和 RoPE 键打分，用注意力权重对潜向量加权平均，最后才乘上 $W^{UV}_i$。DeepSeek 自己的推理代码两种做法都提供：`attn_impl = "naive"` 缓存键和值，`"absorb"` 缓存潜向量。

# %%
class LatentMLA(MLAttention):
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


MLA_FORMS = {"naive": MLAttention, "latent": LatentMLA, "absorbed": AbsorbedMLA}

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
        # [en] A latent cache's k slot holds the latents, its v slot the RoPE keys.
        # [zh] 潜向量缓存的 k 槽位存潜向量，v 槽位存 RoPE 键。
        k, v = layer.attn.expand(latent_cache.k, latent_cache.v)
        pairs += [(k, kv_cache.k), (v, kv_cache.v)]
    logits_passed = close(absorbed_logits, naive_logits)
    return {"batch": batch, "chunk": chunk, "dtype": DTYPE_NAME[dtype],
            "max_abs_logit_err": max_abs_err(absorbed_logits, naive_logits),
            "max_abs_cache_err": max(max_abs_err(a, b) for a, b in pairs),
            "logits_passed": logits_passed, "passed": bool(logits_passed and all(close(a, b) for a, b in pairs))}


ABSORBED_VS_NAIVE = [absorbed_vs_naive(batch, chunk, dtype) for dtype, batch, chunk in GRID]
summary_table({"`AbsorbedMLA` / `MLAttention`": ABSORBED_VS_NAIVE})
assert all(r["passed"] for r in ABSORBED_VS_NAIVE)
