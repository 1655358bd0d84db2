# %% [markdown] lang="en"
# ### 3.1 Referee: Hugging Face's DeepSeek-V3 (optional)
#
# So far our MLA has been compared only with itself. `DeepseekV3ForCausalLM` from transformers is an implementation
# nobody here wrote. We build a tiny one from our sizes (nothing is downloaded), copy our weights into it and
# compare in FP64. One precision detail: even after `.double()`, Hugging Face computes two steps in FP32, so we copy
# that in our model (`with_hf_precision`) and can then compare at FP64's tolerance. The folded cell below holds the
# architectures notebook's referee tools: they make that FP32 copy of our model, load our weights into a Hugging Face
# model, and compare the two, logits and caches, full and in chunks.
#
# <details><summary>Optional: the configuration and the precision details</summary>
#
# The names map one to one, with no transposes (`MLA_NAMES`). The configuration asks for no query compression
# (`q_lora_rank=None`), dense MLPs in every layer (`first_k_dense_replace` = the number of layers, so no mixture of
# experts), and `rope_interleave=False`: DeepSeek's checkpoints pair neighbouring RoPE dimensions, a fixed reordering
# of the rows of `q` and `kv_down` that produce $q^R$ and $k^R$, which our `rotate_half` layout does not need.
#
# From `modeling_deepseek_v3.py`: the model computes its
# RMSNorms (`.to(torch.float32)` in `DeepseekV3RMSNorm.forward`) and its rotary angles (`.float()` in
# `DeepseekV3RotaryEmbedding.forward`) in FP32, so against our pure FP64 model it differs by FP32 rounding. We ask Hugging Face for
# its `sdpa` attention, which computes the softmax in the input's dtype (its `eager` attention would add a third FP32
# step). And the latent's RMSNorm, `kv_a_layernorm`, is built without the configuration's `rms_norm_eps`: its epsilon
# is always $10^{-6}$, which is DeepSeek-V3's `rms_norm_eps` and ours.
#
# The scale $1/\sqrt{d_C + d_R}$ is the DeepSeek-V2 paper's equation. The released DeepSeek-V2 and DeepSeek-V3
# checkpoints both extend their context with YaRN (`factor` 40; `mscale_all_dim` 0.707 in V2's configuration, 1 in
# V3's), and Hugging Face multiplies the scale by $(0.1\, m \ln 40 + 1)^2$ with $m$ = `mscale_all_dim`
# (`yarn_apply_mscale`): about 1.59 for V2 and 1.87 for V3. The cache is unchanged; our referee uses plain RoPE,
# so neither side has the factor.
#
# </details>

# %% [markdown] lang="zh"
# ### 3.1 裁判：Hugging Face 的 DeepSeek-V3（可选）
#
# 到目前为止，我们的 MLA 只和它自己比较过。transformers 中的 `DeepseekV3ForCausalLM` 不是我们写的实现。我们用自己的尺寸构造一个很小的模型（不下载任何东西），把我们的权重复制进去，在 FP64 下比较。有一处精度细节：即使调用了 `.double()`，Hugging Face 仍有两步在 FP32 下计算，所以我们在自己的模型里照做（`with_hf_precision`），这样就能在 FP64 的容差下比较。下面折叠的单元格是架构笔记本中的裁判工具：它们构造我们模型的这种 FP32 副本，把我们的权重加载进 Hugging Face 的模型，再比较两者的 logits 和缓存，包括完整调用和分块调用。
#
# <details><summary>可选：配置与精度细节</summary>
#
# 参数名一一对应，不需要转置（`MLA_NAMES`）。配置要求：不压缩查询（`q_lora_rank=None`）；每一层都用稠密 MLP（`first_k_dense_replace` 设为层数，因此没有混合专家）；`rope_interleave=False`：DeepSeek 的检查点把 RoPE 相邻的两维配成一对，这只是 `q` 和 `kv_down` 中产生 $q^R$ 与 $k^R$ 的那些行的一个固定重排，我们的 `rotate_half` 布局用不着它。
#
# 出自 `modeling_deepseek_v3.py`：这个模型在 FP32 下计算它的 RMSNorm（`DeepseekV3RMSNorm.forward` 中的 `.to(torch.float32)`）和旋转角（`DeepseekV3RotaryEmbedding.forward` 中的 `.float()`），因此与我们纯 FP64 的模型相比，会相差 FP32 量级的舍入误差。我们让 Hugging Face 使用 `sdpa` 注意力，它按输入的精度计算 softmax（而它的 `eager` 注意力会再多出一个 FP32 步骤）。另外，潜向量的 RMSNorm（`kv_a_layernorm`）在构造时没有用到配置中的 `rms_norm_eps`：它的 $\epsilon$ 总是 $10^{-6}$，这恰好也是 DeepSeek-V3 的 `rms_norm_eps` 和我们的取值。
#
# 缩放 $1/\sqrt{d_C + d_R}$ 是 DeepSeek-V2 论文中的公式。发布的 DeepSeek-V2 和 DeepSeek-V3 检查点都用 YaRN 扩展上下文（`factor` 为 40；V2 的配置中 `mscale_all_dim` 为 0.707，V3 的为 1），Hugging Face 会把缩放再乘以 $(0.1\, m \ln 40 + 1)^2$，其中 $m$ 即 `mscale_all_dim`（`yarn_apply_mscale`）：V2 约为 1.59，V3 约为 1.87。缓存不受影响；我们的裁判用的是普通 RoPE，两边都没有这个因子。
#
# </details>
