# %% [markdown] lang="en"
# **Negative control 1: RoPE on the compressed part, absorbed anyway.** Why does MLA need a separate RoPE key?
# Suppose it rotated the keys rebuilt from the latent, as ordinary RoPE rotates every key: $k^C_{s,i} =
# R_s W^{UK}_i c_s$, and the query likewise. The score becomes
#
# $$(R_t\, q^C_{t,i}) \cdot (R_s W^{UK}_i c_s) = q^C_{t,i} \cdot (R_{s-t}\, W^{UK}_i\, c_s),$$
#
# and the matrix between the query and the cached latent, $R_{s-t} W^{UK}_i$, now changes with the distance
# $s - t$. No single matrix can be folded into the query: absorption would need one per distance, which means
# rebuilding the keys. `RopeOnCompressedPart` is that model. It is a valid model, and its own cache (of full keys)
# is exact; but absorbing its $W^{UK}_i$ as before computes something else, and criterion 2 must fail. The DeepSeek-V2
# paper gives this reason for the decoupled key.

# %% [markdown] lang="zh"
# **负对照 1：对压缩部分施加 RoPE，却照样吸收。** MLA 为什么需要一个单独的 RoPE 键？假设它像普通 RoPE 旋转每个键那样，去旋转从潜向量重建出的键：$k^C_{s,i} = R_s W^{UK}_i c_s$，查询也同样旋转。分数就变成
#
# $$(R_t\, q^C_{t,i}) \cdot (R_s W^{UK}_i c_s) = q^C_{t,i} \cdot (R_{s-t}\, W^{UK}_i\, c_s),$$
#
# 夹在查询和缓存的潜向量之间的矩阵 $R_{s-t} W^{UK}_i$ 随距离 $s - t$ 而变。没有哪一个矩阵可以并入查询：吸收需要为每个距离各准备一个矩阵，这就等于重建键。`RopeOnCompressedPart` 就是这样的模型。它本身是一个合法的模型，它自己的缓存（存完整的键）也是精确的；但如果像前面那样吸收它的 $W^{UK}_i$，算出来的就是另一个东西，判据 2 必须失败。DeepSeek-V2 论文正是用这个理由引入解耦的键。

# %%
class RopeOnCompressedPart(MLAttention):
    # [en] MLA as if it had no decoupled key: RoPE also rotates q_C and the keys rebuilt from the latent.
    # [zh] 仿佛没有解耦键的 MLA：RoPE 同时旋转 q_C 和从潜向量重建出的键。
    def __init__(self, c: MLAConfig):
        super().__init__(c)
        self.rotary_c = Rotary(c.nope_dim, c.max_positions, c.rope_theta)

    def forward(self, x, positions, cache):
        q_c, q_r = self.queries(x, positions)
        c, k_r = self.compress(x, positions)
        k_c, v = self.expand(c)
        q_c, k_c = self.rotary_c(q_c, positions), self.rotary_c(k_c, positions)
        k = torch.cat((k_c, k_r.expand(-1, self.heads, -1, -1)), dim=-1)
        keys, values, key_pos = cache.update(k, v, positions)
        context = softmax_attention(torch.cat((q_c, q_r), dim=-1), keys, values, causal(positions, key_pos))
        return self.proj(merge_heads(context))


ROPE_ON_COMPRESSED_OWN_GRID = run_grid(lambda: build(mla_cfg, lambda i: RopeOnCompressedPart(mla_cfg)))
ROPE_ON_COMPRESSED_ABSORBED = [absorbed_vs_naive(batch, chunk, dtype, naive=RopeOnCompressedPart) for dtype, batch, chunk in GRID]
summary_table({"`RopeOnCompressedPart`": ROPE_ON_COMPRESSED_OWN_GRID,
               "`AbsorbedMLA` vs `RopeOnCompressedPart`": ROPE_ON_COMPRESSED_ABSORBED})
CONTROLS["rope_on_compressed_part"] = {
    "section": 5, "check": "absorbed_vs_naive", "own_cache_exact": all(r["passed"] for r in ROPE_ON_COMPRESSED_OWN_GRID),
    "measured": min(r["max_abs_logit_err"] for r in ROPE_ON_COMPRESSED_ABSORBED),
    "caught": not any(r["passed"] for r in ROPE_ON_COMPRESSED_ABSORBED)}
assert CONTROLS["rope_on_compressed_part"]["own_cache_exact"] and CONTROLS["rope_on_compressed_part"]["caught"]

# %% [markdown] lang="en"
# The reason, measured. For layer 0 of that model (FP64, 24 random input vectors), the cell computes the compressed
# part of every causal score twice: as the model defines it, with both sides rotated, and as absorption computes
# it, with $W^{UK}_i$ folded into an unrotated query. It groups the differences by the distance $t - s$ between
# query and key. Only distance 0, where the two rotations cancel, agrees.

# %% [markdown] lang="zh"
# 把原因量出来。对这个模型的第 0 层（FP64，24 个随机输入向量），下面的单元格把每个因果分数中的压缩部分算两遍：一遍按模型的定义，两边都旋转；另一遍按吸收的算法，把 $W^{UK}_i$ 并入未经旋转的查询。然后按查询与键之间的距离 $t - s$ 把差值分组。只有距离为 0 时两个旋转相互抵消，两者才一致。

# %%
with torch.inference_mode():
    attn = build(mla_cfg, lambda i: RopeOnCompressedPart(mla_cfg)).double().blocks[0].attn
    x = torch.randn(1, STREAM_LEN, mla_cfg.width, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
    positions = torch.arange(STREAM_LEN)
    q_c, _ = attn.queries(x, positions)
    latents, _ = attn.compress(x, positions)
    k_c, _ = attn.expand(latents)
    defined = attn.rotary_c(q_c, positions) @ attn.rotary_c(k_c, positions).transpose(-2, -1)     # [1, H, T, T]
    w_uk = attn.kv_up.weight.view(mla_cfg.heads, -1, mla_cfg.latent)[:, :mla_cfg.nope_dim]       # [H, d_C, r]
    absorbed = (q_c @ w_uk) @ latents.transpose(-2, -1)
    distance = positions[:, None] - positions[None, :]                                              # [T, T]: t - s
WHY_ROPE_SPLIT = {int(d): max_abs_err(defined[..., distance == d], absorbed[..., distance == d]) for d in (0, 1, 2, 4, 8, 16)}
say_table([[str(d), f"{e:.1e}"] for d, e in WHY_ROPE_SPLIT.items()],
          en=["distance t - s", "max abs score difference (FP64)"], zh=["距离 t - s", "分数最大绝对误差（FP64）"])
assert WHY_ROPE_SPLIT[0] < TOLERANCE[torch.float64] < 1e-2 < min(e for d, e in WHY_ROPE_SPLIT.items() if d > 0)

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
    "section": 5, **run_control(lambda: build(mla_cfg, lambda i: NormalizedOverPositions(mla_cfg)))}
say(en=f"Latent normalized over positions: cached vs full fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['latent_normalized_over_positions']['measured']:.2f}): caught.",
    zh=f"沿位置维度归一化潜向量：分块长度为 1、2、5 时“缓存对照完整重算”全部失败（logits 误差最小也有 "
       f"{CONTROLS['latent_normalized_over_positions']['measured']:.2f}）：已查出。")
assert CONTROLS["latent_normalized_over_positions"]["caught"]
