# %% [markdown] lang="en"
# ### 5.1 Referee: Hugging Face's DeepSeek-V3 (optional)
#
# So far our MLA has been compared only with itself. `DeepseekV3ForCausalLM` from transformers is an implementation
# nobody here wrote. We build a tiny one from our sizes (nothing is downloaded), copy our weights into it and
# compare in FP64. The names map one to one, with no transposes: `q` → `q_proj`, `kv_down` →
# `kv_a_proj_with_mqa`, `kv_norm` → `kv_a_layernorm`, `kv_up` → `kv_b_proj`, `o` → `o_proj`, and the rest as for
# Llama. The configuration asks for no query compression (`q_lora_rank=None`), dense MLPs in every layer
# (`first_k_dense_replace` = the number of layers, so no mixture of experts), and `rope_interleave=False`:
# DeepSeek's checkpoints pair neighbouring RoPE dimensions, a fixed reordering of the RoPE rows that our
# `rotate_half` layout does not need.
#
# Two findings from reading `modeling_deepseek_v3.py` come first. Even after `.double()`, the model computes its
# RMSNorms (`.to(torch.float32)` in `DeepseekV3RMSNorm.forward`) and its rotary angles (`.float()` in
# `DeepseekV3RotaryEmbedding.forward`) in FP32, so against our pure FP64 model it differs by FP32 rounding. To
# compare at FP64's tolerance, `with_hf_precision` makes a copy of our model that computes those two steps in FP32
# too; we ask Hugging Face for its `sdpa` attention, which computes the softmax in the input's dtype (its `eager`
# attention would add a third FP32 step). And the latent's RMSNorm, `kv_a_layernorm`, is built without the
# configuration's `rms_norm_eps`: its epsilon is always 1e-6, which is DeepSeek-V3's `rms_norm_eps` and ours.

# %% [markdown] lang="zh"
# ### 5.1 裁判：Hugging Face 的 DeepSeek-V3（可选）
#
# 到目前为止，我们的 MLA 只和它自己比较过。transformers 中的 `DeepseekV3ForCausalLM` 不是我们写的实现。我们用自己的尺寸构造一个很小的模型（不下载任何东西），把我们的权重复制进去，在 FP64 下比较。参数名一一对应，不需要转置：`q` → `q_proj`，`kv_down` → `kv_a_proj_with_mqa`，`kv_norm` → `kv_a_layernorm`，`kv_up` → `kv_b_proj`，`o` → `o_proj`，其余与 Llama 相同。配置要求：不压缩查询（`q_lora_rank=None`）；每一层都用稠密 MLP（`first_k_dense_replace` 设为层数，因此没有混合专家）；`rope_interleave=False`：DeepSeek 的检查点把 RoPE 相邻的两维配成一对，这只是 RoPE 各行的一个固定重排，我们的 `rotate_half` 布局用不着它。
#
# 先说读 `modeling_deepseek_v3.py` 得到的两个发现。即使调用了 `.double()`，这个模型仍在 FP32 下计算它的 RMSNorm（`DeepseekV3RMSNorm.forward` 中的 `.to(torch.float32)`）和旋转角（`DeepseekV3RotaryEmbedding.forward` 中的 `.float()`），因此与我们纯 FP64 的模型相比，会相差 FP32 量级的舍入误差。为了在 FP64 的容差下比较，`with_hf_precision` 为我们的模型做一个副本，让它也在 FP32 下完成这两步；同时我们让 Hugging Face 使用 `sdpa` 注意力，它按输入的精度计算 softmax（而它的 `eager` 注意力会再多出一个 FP32 步骤）。另外，潜向量的 RMSNorm（`kv_a_layernorm`）在构造时没有用到配置中的 `rms_norm_eps`：它的 epsilon 总是 1e-6，这恰好也是 DeepSeek-V3 的 `rms_norm_eps` 和我们的取值。

# %%
class Float32RMSNorm(nn.RMSNorm):
    # [en] Hugging Face's RMSNorm: normalize in FP32, cast back, then scale by the weight.
    # [zh] Hugging Face 的 RMSNorm：在 FP32 下归一化，转换回原精度，再乘以权重。
    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def with_hf_precision(net: Decoder) -> Decoder:
    # [en] A copy of our model with Hugging Face's two FP32 steps: the RMSNorms and the rotary angles.
    # [zh] 我们模型的一个副本，复现 Hugging Face 的两个 FP32 步骤：RMSNorm 和旋转角。
    net = copy.deepcopy(net)
    for module in list(net.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.RMSNorm:
                fp32_norm = Float32RMSNorm(child.normalized_shape, eps=child.eps).to(child.weight.dtype)
                fp32_norm.load_state_dict(child.state_dict())
                setattr(module, name, fp32_norm)
        if isinstance(module, Rotary):
            dim = module.cos.shape[-1]
            inv_freq = 1.0 / (net.config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
            angles = torch.arange(module.cos.shape[0], dtype=torch.float32)[:, None] * inv_freq
            angles = torch.cat((angles, angles), dim=-1)
            module.cos, module.sin = angles.cos().to(module.cos.dtype), angles.sin().to(module.sin.dtype)
    return net

# %% [markdown] lang="en"
# The referee itself: `copy_weights` loads our weights under Hugging Face's names, `hf_deepseek` builds the tiny
# `DeepseekV3ForCausalLM`, `hf_chunked` is Hugging Face's cached path (a `DynamicCache` built from the model's
# configuration, filled chunk by chunk), and `referee_errors` compares a full call, then chunks of 1, 2 and 5: the
# logits and every layer's cached tensors.

# %% [markdown] lang="zh"
# 接下来是裁判本身：`copy_weights` 按 Hugging Face 的参数名加载我们的权重，`hf_deepseek` 构造那个很小的 `DeepseekV3ForCausalLM`，`hf_chunked` 是 Hugging Face 的缓存路径（按模型配置构造一个 `DynamicCache`，逐个分块填充），`referee_errors` 先比较完整调用，再比较分块长度 1、2、5 的情形：logits 以及每一层缓存的张量。

# %%
def copy_weights(ours: Decoder, hf, names: dict) -> None:
    # [en] Load our weights into the Hugging Face model; `names` maps our module names to theirs inside a layer.
    # [zh] 把我们的权重加载进 Hugging Face 模型；`names` 给出一层之内我们的模块名到对方模块名的映射。
    state = {"model.embed_tokens.weight": ours.wte.weight, "model.norm.weight": ours.ln_f.weight,
             "lm_head.weight": ours.lm_head.weight}
    for i, layer in enumerate(ours.layers):
        for mine, theirs in names.items():
            state[f"model.layers.{i}.{theirs}.weight"] = layer.get_submodule(mine).weight
    hf.load_state_dict({name: tensor.detach().clone() for name, tensor in state.items()}, strict=True)


LLAMA_NAMES = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "mlp.gate": "mlp.gate_proj",
               "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj", "attn.q": "self_attn.q_proj", "attn.o": "self_attn.o_proj"}
MLA_NAMES = LLAMA_NAMES | {"attn.kv_down": "self_attn.kv_a_proj_with_mqa", "attn.kv_norm": "self_attn.kv_a_layernorm",
                           "attn.kv_up": "self_attn.kv_b_proj"}


def hf_deepseek(ours: Decoder):
    c = ours.config
    hf = DeepseekV3ForCausalLM(DeepseekV3Config(
        vocab_size=c.vocab, hidden_size=c.width, intermediate_size=c.mlp, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, num_key_value_heads=c.heads, kv_lora_rank=c.latent, q_lora_rank=None,
        qk_rope_head_dim=c.rope_dim, qk_nope_head_dim=c.nope_dim, v_head_dim=c.value_dim, first_k_dense_replace=c.layers,
        n_routed_experts=1, n_group=1, topk_group=1, num_experts_per_tok=1, num_mtp_layers=0, rope_interleave=False,
        max_position_embeddings=c.max_positions, rms_norm_eps=c.eps, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation="sdpa",
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta})).eval()
    copy_weights(ours, hf, MLA_NAMES)
    return hf.double()


@torch.inference_mode()
def hf_chunked(hf, ids, chunk: int):
    # [en] Hugging Face's cached path: one DynamicCache built from the model's configuration, filled chunk by chunk.
    # [zh] Hugging Face 的缓存路径：按模型配置构造一个 DynamicCache，逐个分块填充。
    cache, pieces = DynamicCache(config=hf.config), []
    for start in range(0, ids.shape[1], chunk):
        pieces.append(hf(input_ids=ids[:, start:start + chunk], past_key_values=cache, use_cache=True).logits)
    return torch.cat(pieces, dim=1), cache


@torch.inference_mode()
def referee_errors(ours: Decoder, hf) -> dict:
    # [en] Full call, then chunks of 1, 2 and 5: the logits and every layer's cached tensors against Hugging Face's.
    # [zh] 先比较完整调用，再比较分块长度 1、2、5：logits 以及每一层缓存的张量都与 Hugging Face 的结果对照。
    errors = {"full": max_abs_err(ours(STREAM)[0], hf(input_ids=STREAM).logits)}
    for chunk in (1, 2, 5):
        our_logits, our_cache = run_chunked(ours, STREAM, chunk)
        hf_logits, hf_cache = hf_chunked(hf, STREAM, chunk)
        errors[f"cached_chunk_{chunk}"] = max_abs_err(our_logits, hf_logits)
        pairs = [(mine.contents()[i], theirs) for mine, layer in zip(our_cache, hf_cache.layers)
                 for i, theirs in enumerate((layer.keys, layer.values))]
        # [en] Hugging Face's cache holds tensors of the very shapes ours holds.
        # [zh] Hugging Face 缓存中的张量与我们缓存中的张量形状完全相同。
        assert all(a.shape == b.shape for a, b in pairs)
        errors[f"cache_chunk_{chunk}"] = max(max_abs_err(a, b) for a, b in pairs)
    return errors


def referee_table(errors: dict, labels: dict) -> None:
    def worst(e: dict, prefix: str) -> str:
        values = [v for k, v in e.items() if k.startswith(prefix)]
        return f"{max(values):.1e}" if values else "-"
    say_table([[labels[name], f"{e['full']:.1e}", worst(e, "cached_chunk"), worst(e, "cache_chunk")] for name, e in errors.items()],
              en=["our model (FP64)", "full call: logits", "chunks of 1, 2, 5: logits", "cached tensors"],
              zh=["我们的模型（FP64）", "完整调用：logits", "分块长度 1、2、5：logits", "缓存的张量"])

# %% [markdown] lang="en"
# The comparison. Hugging Face's cache for this model holds, per layer, the latent (`keys`, `[B, 1, T, r]`) and the
# rotated RoPE key (`values`, `[B, 1, T, d_R]`): exactly what `AbsorbedMLA` and `LatentMLA` cache, so the cached
# tensors are compared directly. The pure FP64 model differs by FP32 rounding only. The last row is control 1,
# `RopeOnCompressedPart`, whose keys the referee rotates differently: it must be rejected.

# %% [markdown] lang="zh"
# 正式比较。对这个模型，Hugging Face 的缓存每层保存潜向量（`keys`，形状 `[B, 1, T, r]`）和旋转后的 RoPE 键（`values`，形状 `[B, 1, T, d_R]`）：这正是 `AbsorbedMLA` 和 `LatentMLA` 缓存的内容，所以可以直接比较缓存的张量。纯 FP64 的模型只差 FP32 量级的舍入误差。最后一行是负对照 1 `RopeOnCompressedPart`，裁判对它的键的旋转方式不同，必须把它判为不一致。

# %%
DEEPSEEK_REFEREE = None
if HAVE_HF:
    mla_models = {form: build(mla_cfg, lambda i: MLA_FORMS[form](mla_cfg)).double() for form in ("absorbed", "latent")}
    hf = hf_deepseek(mla_models["absorbed"])
    DEEPSEEK_REFEREE = {
        "absorbed_hf_precision": referee_errors(with_hf_precision(mla_models["absorbed"]), hf),
        "latent_hf_precision": referee_errors(with_hf_precision(mla_models["latent"]), hf),
        "absorbed_pure_fp64": referee_errors(mla_models["absorbed"], hf),
    }
    with torch.inference_mode():
        control = with_hf_precision(build(mla_cfg, lambda i: RopeOnCompressedPart(mla_cfg)).double())
        DEEPSEEK_REFEREE["rope_on_compressed_part"] = {"full": max_abs_err(control(STREAM)[0], hf(input_ids=STREAM).logits)}
    referee_table(DEEPSEEK_REFEREE, {"absorbed_hf_precision": "`with_hf_precision(AbsorbedMLA)`",
                                     "latent_hf_precision": "`with_hf_precision(LatentMLA)`", "absorbed_pure_fp64": "`AbsorbedMLA`",
                                     "rope_on_compressed_part": "`with_hf_precision(RopeOnCompressedPart)`"})
    assert max(DEEPSEEK_REFEREE["absorbed_hf_precision"].values()) < TOLERANCE[torch.float64]
    assert max(DEEPSEEK_REFEREE["latent_hf_precision"].values()) < TOLERANCE[torch.float64]
    assert TOLERANCE[torch.float64] < DEEPSEEK_REFEREE["absorbed_pure_fp64"]["full"] < TOLERANCE[torch.float32]
    CONTROLS["rope_on_compressed_part"]["referee_full_logit_err"] = DEEPSEEK_REFEREE["rope_on_compressed_part"]["full"]
    assert CONTROLS["rope_on_compressed_part"]["referee_full_logit_err"] > 1e-2
    say(en="Hugging Face's DeepSeek-V3 agrees with our MLA within 1e-10 in FP64, full and cached, logits and cached "
           "latents, once our copy computes its two FP32 steps; `RopeOnCompressedPart` is rejected.",
        zh="只要我们的副本也在 FP32 下完成那两步，Hugging Face 的 DeepSeek-V3 与我们的 MLA 在 FP64 下的差异就小于 1e-10："
           "完整路径和缓存路径、logits 和缓存的潜向量都是如此；`RopeOnCompressedPart` 被判为不一致。")
else:
    say(en=f"The DeepSeek-V3 referee is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"DeepSeek-V3 裁判已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
