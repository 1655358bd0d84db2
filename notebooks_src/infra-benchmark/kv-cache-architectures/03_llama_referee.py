# %% [markdown] lang="en"
# ### 5.1 Cross-check with Hugging Face Llama (optional)
#
# Everything so far compared our model with itself. A tiny `LlamaForCausalLM` (GQA and RoPE, built from a
# `LlamaConfig` with our sizes, nothing downloaded) is an outside referee: we copy our weights into it and
# compare in FP64. The names map one to one (`copy_weights` below), with no transposes (Llama's projections
# are `nn.Linear`, like ours). The configuration sets
# `num_key_value_heads=2`, `head_dim=16`, `rms_norm_eps=1e-5`, no biases, no tied embeddings, no special
# tokens and `rope_theta=10000`.
#
# Hugging Face computes its norms and rotary angles in FP32 even after `.double()`, so our referee copy does too:
# the referee faces `with_hf_precision(net)`, our model with those two steps in FP32 (appendix B). Otherwise the
# two differ by {{run:referee.pure_fp64_full:.0e}}. Its tools, folded below, serve section 6's Mistral
# cross-check too.

# %% [markdown] lang="zh"
# ### 5.1 与 Hugging Face Llama 交叉核对（可选）
#
# 到目前为止，我们都是拿自己的模型和自己比。一个很小的 `LlamaForCausalLM`（GQA 加 RoPE，按我们的尺寸构造 `LlamaConfig`，不下载任何东西）可以充当外部裁判：把我们的权重复制进去，在 FP64 下比较。参数名一一对应（见下面的 `copy_weights`），不需要转置（Llama 的投影和我们的一样都是 `nn.Linear`）。配置项设为 `num_key_value_heads=2`、`head_dim=16`、`rms_norm_eps=1e-5`，不带偏置，不共享嵌入权重，没有特殊 token，`rope_theta=10000`。
#
# 即使调用了 `.double()`，Hugging Face 仍在 FP32 下计算归一化和旋转角，所以交给裁判比较的也是这样一个副本，即 `with_hf_precision(net)`：它就是我们的模型，只是这两步改在 FP32 下计算（见附录 B）。若不这样做，两者相差 {{run:referee.pure_fp64_full:.0e}}。裁判的工具折叠在下面，第 6 节与 Mistral 的交叉核对也会用到。
