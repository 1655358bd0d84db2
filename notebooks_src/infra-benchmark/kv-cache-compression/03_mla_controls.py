# %% [markdown] lang="en"
# **Negative control 1: RoPE on the compressed part, absorbed anyway.** It comes in two steps: a measurement of why
# the rotation cannot be absorbed, then two models on which criterion 2 must fail.
#
# Why does MLA need a separate RoPE key? Suppose it rotated the keys rebuilt from the latent, as ordinary RoPE
# rotates every key: $k^C_{s,i} = R_s W^{UK}_i c_s$, and the query likewise. The score becomes
#
# $$(R_t\, q^C_{t,i}) \cdot (R_s W^{UK}_i c_s) = q^C_{t,i} \cdot (R_{s-t}\, W^{UK}_i\, c_s),$$
#
# and the matrix between the query and the cached latent, $R_{s-t} W^{UK}_i$, now changes with the distance
# $s - t$. No single matrix can be folded into the query: absorption would need one per distance, which means
# rebuilding the keys. The DeepSeek-V2 paper gives this reason for the decoupled key.
#
# Two ways to absorb anyway are tempting. The first ignores the rotation: fold $W^{UK}_i$ into an unrotated query,
# as `AbsorbedMLA` does. The second moves the rotation into latent space, since it can no longer sit between the
# query and $W^{UK}_i$: rotate the folded query $\tilde q_{t,i} = (W^{UK}_i)^\top q^C_{t,i}$ and the cached latents
# $c_s$ with an $r$-dimensional RoPE $R^{(r)}$ (we call this **rotated in latent space**). The scores then still
# depend only on the distance, but
#
# $$(R^{(r)}_t \tilde q_{t,i}) \cdot (R^{(r)}_s c_s) = q^C_{t,i} \cdot (W^{UK}_i R^{(r)}_{s-t}\, c_s),$$
#
# and $W^{UK}_i R^{(r)}_{s-t} \ne R_{s-t} W^{UK}_i$: rotating the latent is not rotating the key rebuilt from it.
#
# **Step 1, the reason measured.** For layer 0 of an MLA model (FP64, 24 random input vectors), the cell computes
# the compressed part of every causal score three ways: as defined, with the query and the rebuilt key both rotated
# (`rotary_c`, RoPE over $d_C$ dimensions); folded as `AbsorbedMLA` does; and rotated in latent space
# (`rotary_latent`, RoPE over $r$ dimensions). It groups the differences from the definition by the distance
# $t - s$ between query and key. Both absorptions must agree at distance 0, where the rotations cancel, and at no
# other distance.

# %% [markdown] lang="zh"
# **负对照 1：对压缩部分施加 RoPE，却照样吸收。** 它分两步：先量出这种旋转为什么无法吸收，再构造两个模型，判据 2 在它们身上必须失败。
#
# MLA 为什么需要一个单独的 RoPE 键？假设它像普通 RoPE 旋转每个键那样，去旋转从潜向量重建出的键：$k^C_{s,i} = R_s W^{UK}_i c_s$，查询也同样旋转。分数就变成
#
# $$(R_t\, q^C_{t,i}) \cdot (R_s W^{UK}_i c_s) = q^C_{t,i} \cdot (R_{s-t}\, W^{UK}_i\, c_s),$$
#
# 夹在查询和缓存的潜向量之间的矩阵 $R_{s-t} W^{UK}_i$ 随距离 $s - t$ 而变。没有哪一个矩阵可以并入查询：吸收需要为每个距离各准备一个矩阵，这就等于重建键。DeepSeek-V2 论文正是用这个理由引入解耦的 RoPE 键。
#
# 有两种“照样吸收”的写法看似可行。第一种不管旋转：像 `AbsorbedMLA` 那样，把 $W^{UK}_i$ 并入未经旋转的查询。第二种把旋转挪到潜空间里，因为旋转已经没法夹在查询和 $W^{UK}_i$ 之间：用一个 $r$ 维的 RoPE $R^{(r)}$ 旋转并入后的查询 $\tilde q_{t,i} = (W^{UK}_i)^\top q^C_{t,i}$ 和缓存的潜向量 $c_s$（我们称之为**在潜空间里旋转**）。这样分数仍然只取决于距离，但是
#
# $$(R^{(r)}_t \tilde q_{t,i}) \cdot (R^{(r)}_s c_s) = q^C_{t,i} \cdot (W^{UK}_i R^{(r)}_{s-t}\, c_s),$$
#
# 而 $W^{UK}_i R^{(r)}_{s-t} \ne R_{s-t} W^{UK}_i$：旋转潜向量并不等于旋转由它重建出的键。
#
# **第一步：把原因量出来。** 对一个 MLA 模型的第 0 层（FP64，24 个随机输入向量），下面的单元格把每个因果分数中的压缩部分按三种方式各算一遍：按定义，查询和重建出的键都旋转（`rotary_c`，在 $d_C$ 维上做 RoPE）；像 `AbsorbedMLA` 那样并入；以及在潜空间里旋转（`rotary_latent`，在 $r$ 维上做 RoPE）。然后按查询与键之间的距离 $t - s$ 把它们与定义的差值分组。两种吸收都必须只在距离为 0（两个旋转相互抵消）时与定义一致，在其他任何距离上都不一致。

# %%
with torch.inference_mode():
    attn = build(mla_cfg, lambda i: MLAttention(mla_cfg)).double().blocks[0].attn
    rotary_c = Rotary(mla_cfg.nope_dim, mla_cfg.max_positions, mla_cfg.rope_theta)
    rotary_latent = Rotary(mla_cfg.latent, mla_cfg.max_positions, mla_cfg.rope_theta)
    x = torch.randn(1, STREAM_LEN, mla_cfg.width, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
    positions = torch.arange(STREAM_LEN)
    q_c, _ = attn.queries(x, positions)
    latents, k_r = attn.compress(x, positions)
    k_c = attn.expand(latents, k_r)[0][..., :mla_cfg.nope_dim]                                    # [1, H, T, d_C]
    w_uk = attn.up_weights()[0]                                                                    # [H, d_C, r]
    defined = rotary_c(q_c, positions) @ rotary_c(k_c, positions).transpose(-2, -1)               # [1, H, T, T]
    absorbed = {"folded": (q_c @ w_uk) @ latents.transpose(-2, -1),
                "rotated_in_latent_space": rotary_latent(q_c @ w_uk, positions) @ rotary_latent(latents, positions).transpose(-2, -1)}
    distance = positions[:, None] - positions[None, :]                                              # [T, T]: t - s
WHY_ROPE_SPLIT = {int(d): {name: max_abs_err(defined[..., distance == d], scores[..., distance == d]) for name, scores in absorbed.items()}
                  for d in (0, 1, 2, 4, 8, 16)}
say_table([[str(d), f"{e['folded']:.1e}", f"{e['rotated_in_latent_space']:.1e}"] for d, e in WHY_ROPE_SPLIT.items()],
          en=["distance $t - s$", "`AbsorbedMLA`'s fold: max abs score error (FP64)", "rotated in latent space: max abs score error (FP64)"],
          zh=["距离 $t - s$", "`AbsorbedMLA` 的并入方式：分数最大绝对误差（FP64）", "在潜空间里旋转：分数最大绝对误差（FP64）"])
assert max(WHY_ROPE_SPLIT[0].values()) < TOLERANCE[torch.float64] < 1e-2 < min(min(e.values()) for d, e in WHY_ROPE_SPLIT.items() if d > 0)

# %% [markdown] lang="en"
# **Step 2, the two models, one at a time.** First `RopeOnCompressedPart`: MLA as if it had no decoupled key, RoPE
# rotating its compressed part as above. It is a valid model, and its own cache (of full, rotated keys) is exact;
# what it cannot have is an exact absorbed form. It plays the naive form here.

# %% [markdown] lang="zh"
# **第二步：两个模型，逐个介绍。** 先是 `RopeOnCompressedPart`：仿佛没有解耦键的 MLA，RoPE 按上面的方式旋转它的压缩部分。它本身是一个合法的模型，它自己的缓存（存旋转过的完整键）也是精确的；它唯独不可能有精确的吸收形式。在这里它充当朴素形式。

# %%
class RopeOnCompressedPart(MLAttention):
    # [en] MLA as if it had no decoupled key: RoPE also rotates q_C and the keys rebuilt from the latent.
    # [zh] 仿佛没有解耦键的 MLA：RoPE 同时旋转 q_C 和从潜向量重建出的键。
    def __init__(self, c: MLAConfig):
        super().__init__(c)
        self.rotary_c = Rotary(c.nope_dim, c.max_positions, c.rope_theta)

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        k, v = self.expand(*self.compress(x, positions))
        k_c, k_r = k.split([self.nope_dim, self.rope_dim], dim=-1)
        k = torch.cat((self.rotary_c(k_c, positions), k_r), dim=-1)
        keys, values, key_pos = cache.update(k, v, positions)
        context = softmax_attention(torch.cat((self.rotary_c(q_c, positions), q_r), dim=-1), keys, values, causal(positions, key_pos))
        return self.proj(merge_heads(context))


# %% [markdown] lang="en"
# Then `RotatedInLatentSpace`, its absorbed form as the second tempting way above writes it: $W^{UK}_i$ folded into
# the query, the folded query and the cached latents rotated in latent space. The cache still holds only latents,
# and the model is consistent with itself: its cached path equals its own full recomputation. Only the comparison
# with `RopeOnCompressedPart` can show that it computes something else.

# %% [markdown] lang="zh"
# 然后是 `RotatedInLatentSpace`，即按上面第二种看似可行的写法得到的吸收形式：把 $W^{UK}_i$ 并入查询，再在潜空间里旋转并入后的查询和缓存的潜向量。缓存里仍然只有潜向量，模型本身也自洽：它的缓存路径等于它自己的完整重算。只有与 `RopeOnCompressedPart` 相比较，才能看出它算的是另一回事。

# %%
class RotatedInLatentSpace(RopeOnCompressedPart):
    # [en] WRONG on purpose: absorbs W^UK anyway, and rotates the folded query and the cached latents in latent space.
    # [zh] 故意写错：照样吸收 W^UK，并在潜空间里旋转并入后的查询和缓存的潜向量。
    def __init__(self, c: MLAConfig):
        super().__init__(c)
        self.rotary_latent = Rotary(c.latent, c.max_positions, c.rope_theta)

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        c, k_r = self.compress(x, positions)
        latents, rope_keys, key_pos = cache.update(c, k_r, positions)
        w_uk, w_uv = self.up_weights()                                                # [H, d_C, r], [H, d_v, r]
        q_latent = self.rotary_latent(q_c @ w_uk, positions)                           # [B, H, T_new, r]
        rotated = self.rotary_latent(latents, key_pos)                                 # [B, 1, T_keys, r]
        scores = (q_latent @ rotated.transpose(-2, -1) + q_r @ rope_keys.transpose(-2, -1)) * self.scale
        weights = scores.masked_fill(~causal(positions, key_pos), float("-inf")).softmax(dim=-1)
        return self.proj(merge_heads((weights @ latents) @ w_uv.transpose(-2, -1)))


# %% [markdown] lang="en"
# **The check, and what must fail.** Both models first run their own cached-versus-full grid, which each must pass.
# Then criterion 2 is applied to them (`RotatedInLatentSpace` against `RopeOnCompressedPart`, the same weights) and must fail in every
# configuration. Only the logits are compared: the naive model caches rotated keys, which no latent expands to.

# %% [markdown] lang="zh"
# **检查，以及必须失败的是什么。** 两个模型先各自跑一遍“缓存对照完整重算”的网格，每个都必须通过。必须失败的是判据 2：对这个旋转了压缩部分的模型，在同一份权重下比较它的吸收形式（`RotatedInLatentSpace`）与朴素形式（`RopeOnCompressedPart`），每种配置都必须失败。这里只比较 logits：朴素模型缓存的是旋转过的键，没有哪个潜向量能展开成它们。

# %%
ROPE_ON_COMPRESSED_OWN = {name: run_grid(lambda form=form: build(mla_cfg, lambda i: form(mla_cfg)))
                          for name, form in (("naive", RopeOnCompressedPart), ("absorbed", RotatedInLatentSpace))}
ROPE_ON_COMPRESSED_ABSORBED = [absorbed_vs_naive(batch, chunk, dtype, naive=RopeOnCompressedPart, absorbed=RotatedInLatentSpace)
                               for dtype, batch, chunk in GRID]
summary_table({"`RopeOnCompressedPart`": ROPE_ON_COMPRESSED_OWN["naive"], "`RotatedInLatentSpace`": ROPE_ON_COMPRESSED_OWN["absorbed"],
               "`RotatedInLatentSpace` / `RopeOnCompressedPart`": ROPE_ON_COMPRESSED_ABSORBED})
CONTROLS["rope_on_compressed_part"] = {
    "section": 3, "check": "absorbed_vs_naive", "own_cache_exact": all(r["passed"] for rows in ROPE_ON_COMPRESSED_OWN.values() for r in rows),
    "measured": min(r["max_abs_logit_err"] for r in ROPE_ON_COMPRESSED_ABSORBED),
    "caught": not any(r["logits_passed"] for r in ROPE_ON_COMPRESSED_ABSORBED)}
say(en=f"Both models pass their own cached-versus-full check; criterion 2 fails in all 12 configurations (smallest logit "
       f"error {CONTROLS['rope_on_compressed_part']['measured']:.2f}): caught.",
    zh=f"两个模型都通过了各自的“缓存对照完整重算”检查；判据 2 在全部 12 种配置上失败（logits 的最大绝对误差最小也有 "
       f"{CONTROLS['rope_on_compressed_part']['measured']:.2f}），已查出。")
CONTROLS["rope_on_compressed_part"]["distance_errors"] = WHY_ROPE_SPLIT
assert CONTROLS["rope_on_compressed_part"]["own_cache_exact"] and CONTROLS["rope_on_compressed_part"]["caught"]


# %% [markdown] lang="en"
# **Negative control 2: the latent normalized over the wrong axis.** The cached latent must be a function of its
# own token only. `kv_norm` normalizes each token's $r$ numbers; a slip of the axis (`dim=-2`) normalizes each
# latent channel over the tokens of the call instead. The full call then divides by statistics of the whole
# stream and a chunk by statistics of the chunk, so the cached latents no longer match: criterion 1 must fail.

# %% [markdown] lang="zh"
# **负对照 2：沿错误的维度归一化潜向量。** 缓存的潜向量必须只取决于它自己的 token。`kv_norm` 对每个 token 的 $r$ 个数做归一化；维度一旦写错（`dim=-2`），就变成对每个潜向量通道、在本次调用的所有 token 上做归一化。于是完整调用除以整条序列的统计量，而一个分块除以该分块的统计量，缓存的潜向量就对不上了：判据 1 必须失败。

# %%
class NormalizedOverPositions(AbsorbedMLA):
    # [en] WRONG on purpose: RMS taken over the positions of the call (dim=-2), not over the latent's r numbers.
    # [zh] 故意写错：均方根在本次调用的各个位置上计算（dim=-2），而不是在潜向量的 r 个数上。
    def compress(self, x, positions):
        c, k_r = self.kv_down(x).split([self.latent, self.rope_dim], dim=-1)
        c = c * torch.rsqrt(c.pow(2).mean(dim=-2, keepdim=True) + self.kv_norm.eps) * self.kv_norm.weight
        return c[:, None], self.rotary(k_r[:, None], positions)


CONTROLS["latent_normalized_over_positions"] = {
    "section": 3, **run_control(lambda: build(mla_cfg, lambda i: NormalizedOverPositions(mla_cfg)))}
say(en=f"Latent normalized over positions: cached vs full fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['latent_normalized_over_positions']['measured']:.2f}): caught.",
    zh=f"沿位置维度归一化潜向量：分块长度为 1、2、5 时“缓存对照完整重算”全部失败（logits 的最大绝对误差最小也有 "
       f"{CONTROLS['latent_normalized_over_positions']['measured']:.2f}），已查出。")
assert CONTROLS["latent_normalized_over_positions"]["caught"]
