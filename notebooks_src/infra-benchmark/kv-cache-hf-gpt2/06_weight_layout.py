# %% [markdown] lang="en"
# ## 6. The weights: `nn.Linear` against GPT-2's `Conv1D`
#
# `nn.Linear(in, out)` keeps its weight as `[out, in]` and computes `x @ W.T + b`. GPT-2's projections
# are `Conv1D` modules (the name comes from OpenAI's original GPT code; they are plain linear layers),
# which keep the weight as `[in, out]` and compute `x @ W + b`. So each of our matrices goes into GPT-2
# transposed. GPT-2 also computes Q, K and V with one module, `c_attn` of output width 3 × 64, and
# splits its output in the order Q, K, V; its weight is our `q`, `k` and `v` matrices stacked and
# transposed, its bias the three biases concatenated. Both models then cut the 64 features of each
# into 4 heads of 16 consecutive features, so no per-head reordering is needed.
#
# | ours | GPT-2 (`GPT2LMHeadModel`) | how |
# |---|---|---|
# | `wte`, `wpe` | `transformer.wte`, `transformer.wpe` | copied (`nn.Embedding` in both) |
# | `blocks[i].ln_1`, `ln_2`, `ln_f` | `transformer.h[i].ln_1`, `ln_2`, `transformer.ln_f` | copied (`nn.LayerNorm` in both) |
# | `attn.q`, `attn.k`, `attn.v` | `attn.c_attn` | weights stacked, then transposed; biases concatenated |
# | `attn.proj` | `attn.c_proj` | transposed |
# | `mlp.fc`, `mlp.proj` | `mlp.c_fc`, `mlp.c_proj` | transposed |
# | `lm_head` | `lm_head` | copied: GPT-2's head is an `nn.Linear`, not a `Conv1D` |
#
# The figure shows layer 0's attention weights on both sides, as loaded.

# %% [markdown] lang="zh"
# ## 6. 权重：`nn.Linear` 与 GPT-2 的 `Conv1D`
#
# `nn.Linear(in, out)` 把权重存成 `[out, in]`，计算 `x @ W.T + b`。GPT-2 的各个投影层是 `Conv1D` 模块（这个名字沿用自 OpenAI 最初的 GPT 代码，实际上就是普通的线性层），权重存成 `[in, out]`，计算 `x @ W + b`。所以我们的每个矩阵都要转置后再放进 GPT-2。此外，GPT-2 用一个模块 `c_attn` 同时算出 Q、K、V：它的输出宽度为 3 × 64，再按 Q、K、V 的顺序切开。它的权重是我们的 `q`、`k`、`v` 三个矩阵堆叠后再转置，偏置则是三个偏置拼接而成。随后两个模型都把各自的 64 个特征切成 4 个头，每个头 16 个连续特征，所以不需要逐头重新排列。
#
# | 我们的模块 | GPT-2（`GPT2LMHeadModel`） | 做法 |
# |---|---|---|
# | `wte`、`wpe` | `transformer.wte`、`transformer.wpe` | 直接复制（两边都是 `nn.Embedding`） |
# | `blocks[i].ln_1`、`ln_2`、`ln_f` | `transformer.h[i].ln_1`、`ln_2`、`transformer.ln_f` | 直接复制（两边都是 `nn.LayerNorm`） |
# | `attn.q`、`attn.k`、`attn.v` | `attn.c_attn` | 权重先堆叠再转置；偏置直接拼接 |
# | `attn.proj` | `attn.c_proj` | 转置 |
# | `mlp.fc`、`mlp.proj` | `mlp.c_fc`、`mlp.c_proj` | 转置 |
# | `lm_head` | `lm_head` | 直接复制：GPT-2 的输出头是 `nn.Linear`，不是 `Conv1D` |
#
# 下图展示加载之后两边第 0 层的注意力权重。

# %%
# [en] |w| of each block, scaled to [0, 1] and tinted with the block's colour (q blue, k orange,
# [en] v green), the blocks joined along `axis`: an RGB image.
# [zh] 每个分量的 |w| 缩放到 [0, 1]，再染上该分量的颜色（q 蓝、k 橙、v 绿），沿 `axis` 拼接成一幅 RGB 图像。
def tinted(blocks, axis):
    tints = np.array([(0.12, 0.47, 0.71), (1.0, 0.50, 0.05), (0.17, 0.63, 0.17)])
    parts = [1 - (w.abs() / w.abs().max()).numpy()[..., None] * (1 - tint) for w, tint in zip(blocks, tints)]
    return np.concatenate(parts, axis=axis)


def draw_weight_layout(ours_attn, gpt2_attn, width):
    ours_blocks = [ours_attn.q.weight, ours_attn.k.weight, ours_attn.v.weight]          # each [out, in]
    gpt2_blocks = gpt2_attn.c_attn.weight.split(width, dim=1)                           # each [in, out]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.4), gridspec_kw={"width_ratios": [1, 2.6]})
    left.imshow(tinted([w.detach() for w in ours_blocks], axis=0), interpolation="nearest")
    left.set_title("ours: q, k, v weights stacked\n[out, in] = [192, 64], y = x @ W.T + b", fontsize=9)
    left.set_xlabel("in (64 features of x)")
    left.set_ylabel("out")
    left.set_yticks([32, 96, 160], ["q", "k", "v"])
    right.imshow(tinted([w.detach() for w in gpt2_blocks], axis=1), interpolation="nearest")
    right.set_title("GPT-2: c_attn.weight (Conv1D)\n[in, out] = [64, 192], y = x @ W + b, then split Q | K | V",
                    fontsize=9)
    right.set_ylabel("in (64 features of x)")
    right.set_xlabel("out")
    right.set_xticks([32, 96, 160], ["Q", "K", "V"])
    fig.suptitle("layer 0 attention weights, as loaded (darker = larger |w|)", fontsize=10)
    fig.tight_layout()
    return fig


if HAVE_TRANSFORMERS:
    layout_figure = draw_weight_layout(ours64.blocks[0].attn, gpt2_64.transformer.h[0].attn, cfg.width)
    WEIGHT_LAYOUT_PNG = OUT / "weight_layout.png"
    layout_figure.savefig(WEIGHT_LAYOUT_PNG, dpi=120)
    plt.show()

# %% [markdown] lang="en"
# Left, our three `[64, 64]` matrices stacked one above the other (`[out, in]`, 192 rows); right, the
# one matrix GPT-2 loaded into `c_attn` (`[in, out]`, 192 columns). Blue is the query block, orange the
# key block and green the value block; a darker pixel is a weight of larger magnitude. The blocks that
# are stacked vertically on the left stand side by side on the right, and each block is the transpose
# of its twin: row $r$ of our `q` block is column $r$ of GPT-2's Q block.
#
# Does GPT-2 compute the same projections? The cell feeds one random input through layer 0 of both
# models and compares, projection by projection: the Q, K and V that `c_attn` produces (its output
# split in three), the attention output projection and the MLP's input projection. The negative
# control uses our output projection's matrix the way `Conv1D` uses its own, `x @ W + b`, without the
# transpose: it must not match. The rows are compared within the FP64 tolerance, because GPT-2 computes
# the three projections with one product over a `[64, 192]` matrix and we with three over `[64, 64]`
# ones, and a kernel may sum in another order for another shape.

# %% [markdown] lang="zh"
# 左图是我们的三个 `[64, 64]` 矩阵上下堆叠（`[out, in]`，共 192 行）；右图是 GPT-2 加载进 `c_attn` 的那一个矩阵（`[in, out]`，共 192 列）。蓝色是查询部分，橙色是键部分，绿色是值部分；像素越深，权重的绝对值越大。左图上下堆叠的三个分量，在右图中左右并排，而且每个分量都是对应分量的转置：我们 `q` 分量的第 $r$ 行，正是 GPT-2 的 Q 分量的第 $r$ 列。
#
# GPT-2 算出的投影与我们的相同吗？下面的单元格把同一个随机输入分别送进两个模型的第 0 层，逐个投影比较：`c_attn` 算出的 Q、K、V（它的输出切成三份）、注意力的输出投影，以及 MLP 的输入投影。负对照按 `Conv1D` 使用自身权重的方式，即 `x @ W + b`，直接使用我们输出投影的矩阵而不转置：它必须对不上。各行在 FP64 容差内比较，因为 GPT-2 用一个 `[64, 192]` 矩阵做一次乘法算出三个投影，我们则用三个 `[64, 64]` 矩阵各做一次；形状不同时，算子可能以不同的顺序求和。

# %%
if HAVE_TRANSFORMERS:
    gpt2_block0, ours_block0 = gpt2_64.transformer.h[0], ours64.blocks[0]
    x = torch.randn(3, cfg.width, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))  # [3, width]
    with torch.inference_mode():
        q, k, v = gpt2_block0.attn.c_attn(x).split(cfg.width, dim=-1)                                  # [3, width] each
        proj_weight, proj_bias = ours_block0.attn.proj.weight, ours_block0.attn.proj.bias
        layout_pairs = {
            ("c_attn(x)[:, 0:64]", "q(x)"): (q, ours_block0.attn.q(x)),
            ("c_attn(x)[:, 64:128]", "k(x)"): (k, ours_block0.attn.k(x)),
            ("c_attn(x)[:, 128:192]", "v(x)"): (v, ours_block0.attn.v(x)),
            ("attn.c_proj(x)", "attn.proj(x)"): (gpt2_block0.attn.c_proj(x), ours_block0.attn.proj(x)),
            ("mlp.c_fc(x)", "mlp.fc(x)"): (gpt2_block0.mlp.c_fc(x), ours_block0.mlp.fc(x)),
            ("x @ proj.weight + proj.bias", "attn.proj(x)"): (x @ proj_weight + proj_bias, ours_block0.attn.proj(x)),
        }
    say_table([[f"`{gpt2_side}`", f"`{ours_side}`", f"{max_abs_err(*pair):.1e}", f"`{close(*pair)}`"]
               for (gpt2_side, ours_side), pair in layout_pairs.items()],
              en=["GPT-2, layer 0", "ours, layer 0", "max difference", "within 1e-10"],
              zh=["GPT-2 第 0 层", "我们的第 0 层", "最大绝对误差", "在 1e-10 内一致"])
    # [en] Five projections agree; the untransposed matrix (the last row, the control) does not.
    # [zh] 五个投影都一致；不转置的矩阵（最后一行，负对照）对不上。
    assert [close(*pair) for pair in layout_pairs.values()] == [True] * 5 + [False]
