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
# Random weights would make the transpose impossible to see, so the figure loads a copy of our decoder
# whose layer-0 `q`, `k` and `v` matrices are drawn as the letters Q, K and V, through the same
# `build_gpt2` as the real weights, and shows the matrices on both sides.

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
# | `lm_head` | `lm_head` | 直接复制：GPT-2 的词表投影是 `nn.Linear`，不是 `Conv1D` |
#
# 随机权重看不出转置，所以下图换用我们解码器的一个副本：它第 0 层的 `q`、`k`、`v` 矩阵画成字母 Q、K、V 的形状，再经过与真实权重相同的 `build_gpt2` 加载进 GPT-2，然后把两边的矩阵画出来。

# %% tags=["hide-input"]
# [en] Block letters of 8 x 8 pixels ("#" = 1, "." = 0), each pixel drawn as an 8 x 8 square of a
# [en] 64 x 64 matrix: a pattern whose transpose shows at a glance.
# [zh] 8 × 8 像素的方块字母（"#" 为 1，"." 为 0），每个像素放大成 64 × 64 矩阵中的一个 8 × 8 方块：
# [zh] 这种图案一转置，立刻就能看出来。
LETTERS = {
    "Q": ["..####..", ".#....#.", ".#....#.", ".#....#.", ".#..#.#.", ".#...##.", "..#####.", "......##"],
    "K": [".#....#.", ".#...#..", ".#..#...", ".###....", ".#..#...", ".#...#..", ".#....#.", "........"],
    "V": [".#....#.", ".#....#.", ".#....#.", "..#..#..", "..#..#..", "...##...", "...##...", "........"],
}


def letter_matrix(letter, size):                                       # [size, size]
    pixels = torch.tensor([[c == "#" for c in row] for row in LETTERS[letter]], dtype=torch.float64)
    return torch.kron(pixels, torch.ones(size // 8, size // 8, dtype=torch.float64))


# [en] Each block (values 0 or 1) tinted with its colour (q blue, k orange, v green) on white, the
# [en] blocks joined along `axis`: an RGB image.
# [zh] 每个分量（取值 0 或 1）在白底上染成它的颜色（q 蓝、k 橙、v 绿），沿 `axis` 拼接成一幅 RGB 图像。
def tinted(blocks, axis):
    tints = np.array([(0.12, 0.47, 0.71), (1.0, 0.50, 0.05), (0.17, 0.63, 0.17)])
    parts = [1 - w.numpy()[..., None] * (1 - tint) for w, tint in zip(blocks, tints)]
    return np.concatenate(parts, axis=axis)


def draw_weight_layout(ours_attn, gpt2_attn, width):
    ours_blocks = [ours_attn.q.weight, ours_attn.k.weight, ours_attn.v.weight]          # 3 x [out, in]
    gpt2_blocks = gpt2_attn.c_attn.weight.split(width, dim=1)                           # 3 x [in, out]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1.4, 2.6]})
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
    fig.suptitle("layer 0: q, k, v set to the letters Q, K, V, then loaded by build_gpt2", fontsize=10)
    fig.tight_layout()
    return fig

# %%
if HAVE_TRANSFORMERS:
    lettered = copy.deepcopy(ours64)
    with torch.no_grad():
        for letter, linear in zip("QKV", (lettered.blocks[0].attn.q, lettered.blocks[0].attn.k, lettered.blocks[0].attn.v)):
            linear.weight.copy_(letter_matrix(letter, cfg.width))
    lettered_gpt2 = build_gpt2(lettered)
    layout_figure = draw_weight_layout(lettered.blocks[0].attn, lettered_gpt2.transformer.h[0].attn, cfg.width)
    WEIGHT_LAYOUT_PNG = OUT / "weight_layout.png"
    layout_figure.savefig(WEIGHT_LAYOUT_PNG, dpi=120)
    plt.show()

# %% [markdown] lang="en"
# Left, our three `[64, 64]` matrices stacked one above the other (`[out, in]`, 192 rows; the title
# gives the shape and the product `nn.Linear` computes); right, the one matrix GPT-2 loaded into `c_attn`
# (`[in, out]`, 192 columns; `Conv1D`'s product, and the split of its output into Q, K and V). Blue is
# the query block, orange the key block and green the value block; a coloured pixel is a 1, a white one a
# 0. The blocks stacked vertically on the left stand side by side on the right, and each letter comes back
# mirrored across its diagonal: row $r$ of our `q` block is column $r$ of GPT-2's Q block.
#
# Does GPT-2 compute the same projections? The cell feeds one random input through layer 0 of both
# models and compares, projection by projection: the Q, K and V that `c_attn` produces (its output
# split in three), the attention output projection and the MLP's input projection. The negative
# control uses our output projection's matrix the way `Conv1D` uses its own, `x @ W + b`, without the
# transpose: it must not match. The rows are compared with `close` (FP64), not exactly, because GPT-2 computes
# the three projections with one product over a `[64, 192]` matrix and we with three over `[64, 64]`
# ones, and a kernel may sum in another order for another shape.

# %% [markdown] lang="zh"
# 图中文字是英文，下面逐一说明。左图是我们的三个 `[64, 64]` 矩阵上下堆叠：标题 ours: q, k, v weights stacked 意为“我们的 q、k、v 权重上下堆叠”，第二行给出形状 `[out, in] = [192, 64]` 和 `nn.Linear` 的计算 `y = x @ W.T + b`；纵轴 out 是输出维，三段分别标为 q、k、v，横轴 in (64 features of x) 是输入维，即 x 的 64 个特征。右图是 GPT-2 加载进 `c_attn` 的那一个矩阵：标题 GPT-2: c_attn.weight (Conv1D) 之下一行给出形状 `[in, out] = [64, 192]`、`Conv1D` 的计算 `y = x @ W + b`，以及 then split Q | K | V，即“再把输出切成 Q、K、V 三份”；这里纵轴是输入维 in，横轴是输出维 out，三段标为 Q、K、V。总标题 layer 0: q, k, v set to the letters Q, K, V, then loaded by build_gpt2 意为“第 0 层：q、k、v 设成字母 Q、K、V 的形状，再由 `build_gpt2` 加载”。蓝色是查询部分，橙色是键部分，绿色是值部分；有颜色的像素是 1，白色的是 0。左图上下堆叠的三个分量，在右图中左右并排，而且每个字母都沿自己的对角线翻转了过来：我们 `q` 分量的第 $r$ 行，正是 GPT-2 的 Q 分量的第 $r$ 列。
#
# GPT-2 算出的投影与我们的相同吗？下面的单元格把同一个随机输入分别送进两个模型的第 0 层，逐个投影比较：`c_attn` 算出的 Q、K、V（它的输出切成三份）、注意力的输出投影，以及 MLP 的输入投影。负对照照搬 `Conv1D` 的算法 `x @ W + b`，直接拿我们输出投影的矩阵来乘、不做转置：结果必须对不上。各行用 `close`（FP64）比较，而不要求完全相同，因为 GPT-2 用一个 `[64, 192]` 矩阵做一次乘法算出三个投影，我们则用三个 `[64, 64]` 矩阵各做一次；形状不同时，内核可能以不同的顺序求和。

# %%
if HAVE_TRANSFORMERS:
    gpt2_block0, ours_block0 = gpt2_64.transformer.h[0], ours64.blocks[0]
    x = torch.randn(3, cfg.width, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))  # [3, width]
    with torch.inference_mode():
        q, k, v = gpt2_block0.attn.c_attn(x).split(cfg.width, dim=-1)                                  # 3 x [3, width]
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
              en=["GPT-2, layer 0", "ours, layer 0", "max abs error", "`close` (FP64)"],
              zh=["GPT-2 第 0 层", "我们的第 0 层", "最大绝对误差", "`close`（FP64）"])
    # [en] Five projections agree; the untransposed matrix (the last row, the control) does not.
    # [zh] 五个投影都一致；不转置的矩阵（最后一行，负对照）对不上。
    assert [close(*pair) for pair in layout_pairs.values()] == [True] * 5 + [False]
