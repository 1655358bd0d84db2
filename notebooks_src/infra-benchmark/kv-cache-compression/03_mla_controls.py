# %% [markdown] lang="en"
# **Negative control 1: RoPE on the compressed part, absorbed anyway.** The claim: criterion 2 catches an absorbed
# form that computes something other than its model. The model is `RopeOnCompressedPart`, MLA without a decoupled
# key: RoPE rotates $q^C$ and the rebuilt keys, as in step 3. It is a valid model with an exact cache (of full,
# rotated keys); it only cannot have an exact absorbed form. The tempting way to absorb it anyway,
# `RotatedInLatentSpace`, moves the rotation into latent space: it rotates the folded query
# $\tilde q_{t,i} = (W^{UK}_i)^\top q^C_{t,i}$ and the cached latents with an $r$-dimensional RoPE $R^{(r)}$. Its
# scores still depend only on the distance, but
#
# $$(R^{(r)}_t \tilde q_{t,i}) \cdot (R^{(r)}_s c_s) = q^C_{t,i} \cdot (W^{UK}_i R^{(r)}_{s-t}\, c_s), \qquad W^{UK}_i R^{(r)}_{s-t} \ne R_{s-t} W^{UK}_i :$$
#
# rotating the latent is not rotating the key rebuilt from it. It is consistent with itself (its cached path equals
# its full recomputation), so of the two criteria only criterion 2 can catch it.

# %% [markdown] lang="zh"
# **负对照 1：对压缩部分施加 RoPE，却照样吸收。** 要证明的是：如果吸收形式算的不是它的模型所定义的东西，判据 2 能把它查出来。这里的模型是 `RopeOnCompressedPart`，即没有解耦键的 MLA：RoPE 像第三步那样旋转 $q^C$ 和重建出的键。它本身是一个合法的模型，缓存（存旋转过的完整键）也是精确的；它唯独不可能有精确的吸收形式。照样吸收的一种看似可行的写法是 `RotatedInLatentSpace`：它把旋转挪到潜空间里，用一个 $r$ 维的 RoPE $R^{(r)}$ 旋转并入后的查询 $\tilde q_{t,i} = (W^{UK}_i)^\top q^C_{t,i}$ 和缓存的潜向量。它的分数仍然只取决于距离，但是
#
# $$(R^{(r)}_t \tilde q_{t,i}) \cdot (R^{(r)}_s c_s) = q^C_{t,i} \cdot (W^{UK}_i R^{(r)}_{s-t}\, c_s), \qquad W^{UK}_i R^{(r)}_{s-t} \ne R_{s-t} W^{UK}_i :$$
#
# 旋转潜向量并不等于旋转由它重建出的键。这个模型本身是自洽的（它的缓存路径等于它自己的完整重算），所以两条判据中只有判据 2 能把它查出来。

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



class RotatedInLatentSpace(RopeOnCompressedPart):
    # [en] WRONG on purpose: absorbs W^UK anyway, and rotates the folded query and the cached latents in latent space.
    # [zh] 故意写错：照样吸收 W^UK，并在潜空间里旋转并入后的查询和缓存的潜向量。
    def __init__(self, c: MLAConfig):
        super().__init__(c)
        self.rotary_latent = Rotary(c.latent, c.max_positions, c.rope_theta)

    def new_cache(self, caches: list):
        return LatentKV()

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
# The check: each model must pass its own cached-versus-full grid, and criterion 2 (`RotatedInLatentSpace` against
# `RopeOnCompressedPart`, same weights) must fail in all 12 configurations.

# %% [markdown] lang="zh"
# 检查：两个模型都必须通过各自的“缓存对照完整重算”网格，而判据 2（同一份权重下 `RotatedInLatentSpace` 对照 `RopeOnCompressedPart`）必须在全部 12 种配置上失败。

# %%
ROPE_ON_COMPRESSED_OWN = {name: run_grid(lambda form=form: build(mla_cfg, lambda i: form(mla_cfg)))
                          for name, form in (("naive", RopeOnCompressedPart), ("absorbed", RotatedInLatentSpace))}
ROPE_ON_COMPRESSED_ABSORBED = [absorbed_vs_naive(batch, chunk, dtype, naive=RopeOnCompressedPart, absorbed=RotatedInLatentSpace)
                               for dtype, batch, chunk in GRID]
CONTROLS["rope_on_compressed_part"] = {
    "section": 3, "check": "absorbed_vs_naive", "measured": min(r["max_abs_logit_err"] for r in ROPE_ON_COMPRESSED_ABSORBED),
    "caught": not any(r["logits_passed"] for r in ROPE_ON_COMPRESSED_ABSORBED)}
say(en=f"Both models pass their own cached-versus-full check; criterion 2 fails in all 12 configurations, with a "
       f"smallest logit error of {CONTROLS['rope_on_compressed_part']['measured']:.2f}: caught.",
    zh=f"两个模型都通过了各自的“缓存对照完整重算”检查；判据 2 在全部 12 种配置上失败，logits 的最大绝对误差最小也有 "
       f"{CONTROLS['rope_on_compressed_part']['measured']:.2f}：已查出。")
assert all(r["passed"] for rows in ROPE_ON_COMPRESSED_OWN.values() for r in rows) and CONTROLS["rope_on_compressed_part"]["caught"]

# %% [markdown] lang="en"
# **The reason, measured (optional).** For layer 0 of an MLA model (FP64, 24 random input vectors) the cell computes
# the compressed part of every causal score as `RopeOnCompressedPart` defines it and as two absorptions compute it:
# `AbsorbedMLA`'s fold, which ignores the rotation, and the rotation in latent space. Grouped by the distance
# $t - s$, both must agree with the definition at distance 0, where the rotations cancel, and at no other.

# %% [markdown] lang="zh"
# **把原因量出来（可选）。** 对一个 MLA 模型的第 0 层（FP64，24 个随机输入向量），下面的单元格把每个因果分数的压缩部分按 `RopeOnCompressedPart` 的定义算一遍，再按两种吸收方式各算一遍：`AbsorbedMLA` 的并入方式（不管旋转）和在潜空间里旋转。按距离 $t - s$ 分组后，两种吸收都必须只在距离为 0（两个旋转相互抵消）时与定义一致，在其他任何距离上都不一致。

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
