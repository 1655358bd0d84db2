# %% [markdown] lang="en"
# The comparison. `hf_deepseek` (folded) builds the tiny `DeepseekV3ForCausalLM` and loads our weights into it. Hugging Face's cache for this model holds, per layer, the latent (`keys`, `[B, 1, T, r]`) and the
# rotated RoPE key (`values`, `[B, 1, T, d_R]`): exactly what `AbsorbedMLA` and `ExpandOnReadMLA` cache, so the cached
# tensors are compared directly. The pure FP64 model differs by FP32 rounding only. The last row is the model of
# control 1, `RopeOnCompressedPart`, whose keys the referee rotates differently: it must be rejected, which shows that
# this referee can fail.

# %% [markdown] lang="zh"
# 正式比较。`hf_deepseek`（代码已折叠）构造那个很小的 `DeepseekV3ForCausalLM`，并把我们的权重加载进去。对这个模型，Hugging Face 的缓存每层保存潜向量（`keys`，形状 `[B, 1, T, r]`）和旋转后的 RoPE 键（`values`，形状 `[B, 1, T, d_R]`）：这正是 `AbsorbedMLA` 和 `ExpandOnReadMLA` 缓存的内容，所以可以直接比较缓存的张量。纯 FP64 的模型只差 FP32 量级的舍入误差。最后一行是负对照 1 中的模型 `RopeOnCompressedPart`：它旋转键的方式与裁判不同，裁判必须把它判为不一致，这也说明这个裁判确实会判出不一致。

# %% tags=["hide-input"]
if HAVE_HF:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    MLA_NAMES = LLAMA_NAMES | {"attn.kv_down": "self_attn.kv_a_proj_with_mqa", "attn.kv_norm": "self_attn.kv_a_layernorm",
                               "attn.kv_up": "self_attn.kv_b_proj"}

    def hf_deepseek(ours: Decoder):
        c = ours.config
        config = DeepseekV3Config(**hf_fields(c), kv_lora_rank=c.latent, q_lora_rank=None, qk_rope_head_dim=c.rope_dim,
                                  qk_nope_head_dim=c.nope_dim, v_head_dim=c.value_dim, first_k_dense_replace=c.layers,
                                  n_routed_experts=1, n_group=1, topk_group=1, num_experts_per_tok=1, num_mtp_layers=0,
                                  rope_interleave=False)
        return copy_weights(ours, DeepseekV3ForCausalLM(config).eval(), MLA_NAMES)

# %%
DEEPSEEK_REFEREE = None
if HAVE_HF:
    mla_models = {form: build(mla_cfg, lambda i: MLA_FORMS[form](mla_cfg)).double() for form in ("absorbed", "expand_on_read")}
    hf = hf_deepseek(mla_models["absorbed"])
    DEEPSEEK_REFEREE = {
        "absorbed_hf_precision": referee_errors(with_hf_precision(mla_models["absorbed"]), hf),
        "latent_hf_precision": referee_errors(with_hf_precision(mla_models["expand_on_read"]), hf),
        "absorbed_pure_fp64": referee_errors(mla_models["absorbed"], hf),
    }
    with torch.inference_mode():
        control = with_hf_precision(build(mla_cfg, lambda i: RopeOnCompressedPart(mla_cfg)).double())
        DEEPSEEK_REFEREE["rope_on_compressed_part"] = {"full": max_abs_err(control(STREAM)[0], hf(input_ids=STREAM).logits)}
    referee_table(DEEPSEEK_REFEREE, {"absorbed_hf_precision": "`with_hf_precision(AbsorbedMLA)`",
                                     "latent_hf_precision": "`with_hf_precision(ExpandOnReadMLA)`", "absorbed_pure_fp64": "`AbsorbedMLA`",
                                     "rope_on_compressed_part": "`with_hf_precision(RopeOnCompressedPart)`"})
    assert max(DEEPSEEK_REFEREE["absorbed_hf_precision"].values()) < TOLERANCE[torch.float64]
    assert max(DEEPSEEK_REFEREE["latent_hf_precision"].values()) < TOLERANCE[torch.float64]
    assert TOLERANCE[torch.float64] < DEEPSEEK_REFEREE["absorbed_pure_fp64"]["full"] < TOLERANCE[torch.float32]
    assert DEEPSEEK_REFEREE["rope_on_compressed_part"]["full"] > 1e-2
    say(en="Hugging Face's DeepSeek-V3 agrees with our MLA within $10^{-10}$ in FP64, full and cached, logits and cached "
           "latents, once our copy computes its two FP32 steps; `RopeOnCompressedPart` is rejected.",
        zh="只要我们的副本也在 FP32 下完成那两步，Hugging Face 的 DeepSeek-V3 与我们的 MLA 在 FP64 下的最大绝对误差就小于 $10^{-10}$："
           "完整路径和缓存路径、logits 和缓存的潜向量都是如此；`RopeOnCompressedPart` 被判为不一致。")
else:
    say(en=f"The DeepSeek-V3 referee is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"DeepSeek-V3 裁判已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")

# %% [markdown] lang="en"
# <details><summary>Optional: why the first two rows can be exactly 0.0</summary>
#
# Our absorbed and naive forms differ by about $10^{{{run:mla.absorbed_vs_naive_fp64_exponent}}}$ in pure FP64
# (criterion 2). But in both models every RMSNorm works on an FP32 copy of the residual stream, and differences of order $10^{-16}$ almost
# never survive that rounding, so both hand the same numbers to the same projections. Nothing asserts the zero: the
# check is the FP64 tolerance.
#
# </details>

# %% [markdown] lang="zh"
# <details><summary>可选：为什么前两行可能恰好是 0.0</summary>
#
# 即使在纯 FP64 下，我们自己模型的吸收形式与朴素形式之间也相差约 $10^{{{run:mla.absorbed_vs_naive_fp64_exponent}}}$（判据 2）。但两个模型的每个 RMSNorm 处理的都是残差流的一份 FP32 副本，而 $10^{-16}$ 量级的差异几乎不可能在这次舍入后保留下来，于是两个模型把同样的数交给同样的投影。这里并没有断言误差为零，检查用的是 FP64 的容差。
#
# </details>
