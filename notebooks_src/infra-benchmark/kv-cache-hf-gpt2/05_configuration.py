# %% [markdown] lang="en"
# Three tests judge a result from here on, all with the dtype's tolerance `TOLERANCE` ($10^{-10}$ in
# FP64, $10^{-5}$ in FP32); "agrees within $10^{-10}$" in the text means the first:
#
# | test | what it judges | where |
# |---|---|---|
# | `agrees(errors, tol)` | a whole comparison: the largest absolute error in the dict `compare_with_gpt2` returns | sections 4, 7, 8, the tables' verdicts |
# | `close(a, b)` | two tensors: `torch.allclose`, absolute and relative tolerance | section 6 (one projection each), section 10 (the race's logits) |
# | `error <= TOLERANCE[torch.float64]` | one error, when the claim is about one quantity | section 7 (one layer's cache), section 9 (the cut-back cache), exercises |

# %% [markdown] lang="zh"
# 从这里开始，判定结果要用到三种检验，都使用该精度的容差 `TOLERANCE`（FP64 下为 $10^{-10}$，FP32 下为 $10^{-5}$）；正文中说“在 $10^{-10}$ 以内一致”，指的是第一种：
#
# | 检验 | 判定的对象 | 用在哪里 |
# |---|---|---|
# | `agrees(errors, tol)` | 一整次比较：`compare_with_gpt2` 返回的误差字典中的最差一项 | 第 4、7、8 节，各表中的判定 |
# | `close(a, b)` | 两个张量：`torch.allclose`，同时有绝对容差和相对容差 | 第 6 节（逐个投影）、第 10 节（比赛中的 logits） |
# | `error <= TOLERANCE[torch.float64]` | 一个误差，用于只涉及一项的论断 | 第 7 节（某一层的缓存）、第 9 节（截短后的缓存）、练习 |

# %% [markdown] lang="en"
# ## 5. The configuration, field by field
#
# `GPT2Config()` with no arguments describes the smallest released GPT-2 (width 768, 12 layers, a
# vocabulary of 50,257). Section 4 built a configuration for our decoder instead. The table below lists
# every field that matters for the comparison, its default and our value; changed values are in bold.
# Why each one matters:
#
# - The sizes (`vocab_size`, `n_positions`, `n_embd`, `n_layer`, `n_head`) are ours. `n_inner`, the MLP
#   width, is given explicitly. Its default, `None`, means "4 × width", which happens to be our 256
#   too; a decoder with another MLP width would get a 4 × width MLP, and loading its weights would then fail
#   with a size mismatch (section 7 shows such a refusal).
# - `activation_function="gelu"` is the exact GELU, $x\,\Phi(x)$ computed with the error function, like
#   our `nn.GELU()`. The default, `"gelu_new"`, is the tanh approximation that the original GPT-2 used.
#   Section 8 shows how small, and how hard to see, that difference is.
# - The three dropout probabilities are 0: `eval()` already turns dropout off, and 0 makes the
#   configuration describe our dropout-free decoder in training mode too. `layer_norm_epsilon` keeps its
#   default, `1e-5`, which is also PyTorch's LayerNorm default.
# - `tie_word_embeddings=False`: our output projection has its own matrix. The default ties it to the
#   token embedding table; section 7 shows what loading our weights into a tied model does.
# - Our vocabulary has no special tokens, so `bos_token_id` and `eos_token_id` are `None` instead of
#   the default `50256`, an ID that does not exist in a 97-token vocabulary.
# - `scale_attn_weights=True` (the default) divides attention scores by $\sqrt{d_h}$, as we do; the
#   per-layer extra scaling (`scale_attn_by_inverse_layer_idx`) and the reordered FP32 upcast
#   (`reorder_and_upcast_attn`) stay off, as by default.
# - `attn_implementation="eager"` selects `eager_attention_forward` in `modeling_gpt2.py`, the plain
#   matmul → softmax → matmul, so the arithmetic we compare against is explicit.
#
# No cell checks these fields one by one: the agreement of section 4 within $10^{-10}$ is the check of
# the configuration as a whole: getting wrong a field that changes the arithmetic is caught, and section 7
# shows two such fields.

# %% [markdown] lang="zh"
# ## 5. 逐项核对配置
#
# 不带参数的 `GPT2Config()` 描述的是公开发布的 GPT-2 中最小的那个模型（宽度 768，12 层，词表 50,257）。第 4 节则为我们的解码器另行构造了配置。下表列出与比较有关的每一个配置项、它的默认值和我们的取值，改动过的取值加粗显示。每一项的作用如下：
#
# - 各项尺寸（`vocab_size`、`n_positions`、`n_embd`、`n_layer`、`n_head`）取我们的值。MLP 的宽度 `n_inner` 显式给出。它的默认值 `None` 表示“4 × 宽度”，在这里恰好也是 256；但如果解码器的 MLP 宽度不是这个值，配置就会给出 4 × 宽度的 MLP，随后加载权重时会因形状不符而失败（第 7 节展示了这样的拒绝）。
# - `activation_function="gelu"` 是精确 GELU，即用误差函数计算的 $x\,\Phi(x)$，与我们的 `nn.GELU()` 相同。默认值 `"gelu_new"` 是原版 GPT-2 使用的 tanh 近似。第 8 节会说明这个差别有多小、多难察觉。
# - 三个 dropout 概率都设为 0：`eval()` 模式本来就会关掉 dropout，设为 0 则让这份配置在训练模式下也描述我们这个不带 dropout 的解码器。`layer_norm_epsilon` 保留默认值 `1e-5`，它也是 PyTorch 中 LayerNorm 的默认值。
# - `tie_word_embeddings=False`：我们的词表投影（`lm_head`）有自己独立的矩阵；默认设置则让它与 token 嵌入表共享权重。第 7 节会展示把我们的权重加载进共享权重的模型会发生什么。
# - 我们的词表没有特殊 token，所以 `bos_token_id` 和 `eos_token_id` 设为 `None`，而不是默认的 `50256`：在只有 97 个 token 的词表里，这个 ID 根本不存在。
# - `scale_attn_weights=True`（默认值）让注意力分数除以 $\sqrt{d_h}$，和我们的做法一样；按层号追加的缩放（`scale_attn_by_inverse_layer_idx`）以及调整计算顺序并提升到 FP32 的做法（`reorder_and_upcast_attn`）都保持默认的关闭状态。
# - `attn_implementation="eager"` 选用 `modeling_gpt2.py` 里的 `eager_attention_forward`，即最直接的“矩阵乘 → softmax → 矩阵乘”，这样我们拿来对照的运算每一步都清清楚楚。
#
# 这里没有单元格逐项检查这些配置：第 4 节在 $10^{-10}$ 以内的一致，就是对整个配置的检查：凡是会改变运算结果的配置项，配错了都会被查出来，第 7 节演示了其中两项。

# %%
CONFIG_FIELDS = ["vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
                 "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "scale_attn_weights",
                 "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "tie_word_embeddings",
                 "bos_token_id", "eos_token_id", "pad_token_id"]

if HAVE_TRANSFORMERS:
    rows = []
    for name in CONFIG_FIELDS:
        ours_value, default_value = getattr(hf_config, name), getattr(default_config, name)
        bold = "" if ours_value == default_value else "**"
        rows.append([f"`{name}`", f"`{default_value!r}`", f"{bold}`{ours_value!r}`{bold}"])
    rows.append(["`attn_implementation`", f"`{default_config._attn_implementation!r}`",
                 f"**`{hf_config._attn_implementation!r}`**"])
    say_table(rows, en=["field", "default", "ours (changed in bold)"], zh=["配置项", "默认值", "我们的值（改动过的加粗）"])
