# %% [markdown] lang="en"
# ## 7. Three traps, caught by the same comparison
#
# A comparison is only worth something if it fails when the mapping is wrong. Some mistakes never get
# that far: `load_state_dict` itself refuses a weight left out (it loads with `strict=True`, which
# checks that no name is missing or unexpected), and, whatever `strict` says, a matrix that was not
# transposed when its shape gives it away (our `[256, 64]` MLP input matrix in a `[64, 256]` slot). The first cell shows both refusals. The mistakes that matter are the ones that load without a
# word. Each trap below builds a `GPT2LMHeadModel` with one of them, runs the unchanged
# `compare_with_gpt2` of section 4, and must be reported as a disagreement:
#
# 1. **Tied embeddings.** With the default `tie_word_embeddings=True`, `lm_head.weight` and
#    `transformer.wte.weight` are one and the same tensor. Loading our two different matrices into it
#    raises no error: the one copied last, the output projection, silently replaces the embedding
#    table.
# 2. **A missing transpose on a square weight.** The attention output projection is `[64, 64]`, so its
#    untransposed copy loads without complaint and is simply wrong. We make that mistake in layer 0
#    only.
# 3. **The wrong GELU.** `activation_function="gelu_new"`, the configuration's default, uses the tanh
#    approximation instead of the exact GELU. Everything else is right.

# %% [markdown] lang="zh"
# ## 7. 三个陷阱，同一个比较全都能查出
#
# 只有映射出错时确实会失败，这个比较才有价值。有些错误根本走不到比较这一步：缺了某个权重时，`load_state_dict` 自己就会拒绝（它以 `strict=True` 加载，检查参数名既不缺少也不多余）；矩阵漏了转置、而形状又暴露了这一点时（把我们 `[256, 64]` 的 MLP 输入矩阵放进 `[64, 256]` 的位置），无论 `strict` 取什么值，也都会被拒绝。第一个单元格展示这两种拒绝。真正要紧的是那些加载时一声不响的错误。下面每个陷阱都构建一个带有其中一种错误的 `GPT2LMHeadModel`，原样调用第 4 节的 `compare_with_gpt2`，它必须报告两边不一致：
#
# 1. **共享嵌入权重**：如果沿用默认的 `tie_word_embeddings=True`，`lm_head.weight` 和 `transformer.wte.weight` 就是同一个张量。把我们两个不同的矩阵加载进去并不会报错：后复制的那个（词表投影 `lm_head`）会悄无声息地覆盖嵌入表。
# 2. **方阵漏了转置**：注意力的输出投影是 `[64, 64]` 的方阵，漏了转置照样能顺利加载，只是结果错了。我们只在第 0 层犯这个错误。
# 3. **用错了 GELU**：`activation_function="gelu_new"`（也就是配置的默认值）用 tanh 近似代替精确 GELU，其余一切都正确。

# %%
# [en] The last line of load_state_dict's error for these weights, or None if they load.
# [zh] 加载这组权重时 load_state_dict 报错信息的最后一行；能加载则返回 None。
def load_refusal(state_dict):
    try:
        build_gpt2(ours64, state_dict=state_dict)
    except RuntimeError as error:
        return str(error).strip().splitlines()[-1].strip()
    return None


if HAVE_TRANSFORMERS:
    missing = gpt2_state_dict(ours64)
    del missing["lm_head.weight"]
    untransposed = gpt2_state_dict(ours64)
    untransposed["transformer.h.0.mlp.c_fc.weight"] = ours64.blocks[0].mlp.fc.weight.detach().clone()
    refusals = {'del sd["lm_head.weight"]': load_refusal(missing),
                'sd["transformer.h.0.mlp.c_fc.weight"] = fc.weight': load_refusal(untransposed)}
    say_table([[f"`{edit}`", f"`{message}`"] for edit, message in refusals.items()],
              en=["edit of the state dict", "`load_state_dict(strict=True)` refuses"],
              zh=["对 `state_dict` 的改动", "`load_state_dict(strict=True)` 的拒绝信息"])
    assert None not in refusals.values()

# %% [markdown] lang="en"
# Now the three traps, which load. The table gives, for each mapping, the largest difference from our
# decoder in the full call's logits, the cached path's logits and each layer's cached K and V, and the
# verdict at $10^{-10}$; the first row is the correct mapping of section 4.

# %% [markdown] lang="zh"
# 下面是三个能顺利加载的陷阱。表中给出每种映射与我们的解码器之间的最大绝对误差：完整调用的 logits、缓存路径的 logits，以及每一层缓存的 K 和 V；最后一列是在 $10^{-10}$ 下的判定。第一行是第 4 节的正确映射。

# %%
# [en] One table row per mapping: the errors of section 4's comparison and its verdict.
# [zh] 每种映射占表格一行：第 4 节比较得到的各项误差，以及判定结果。
def error_table(named_errors):
    rows = []
    for name, errors in named_errors.items():
        values = [errors["full_logits"], errors["cached_logits"]]
        values += [e for pair in zip(errors["k"], errors["v"]) for e in pair]
        rows.append([f"`{name}`"] + [f"{e:.1e}" for e in values] + [f"`{agrees(errors)}`"])
    layers = [(i, t) for i in range(cfg.layers) for t in "KV"]
    say_table(rows,
              en=["mapping", "full call logits", "cached path logits"] + [f"layer {i} {t}" for i, t in layers]
              + ["within $10^{-10}$"],
              zh=["映射", "完整调用的 logits", "缓存路径的 logits"] + [f"第 {i} 层 {t}" for i, t in layers]
              + ["在 $10^{-10}$ 内一致"])


if HAVE_TRANSFORMERS:
    trap_models = {}
    # [en] 1. Tied embeddings: one tensor, two different matrices loaded into it; the last one wins.
    # [zh] 1. 共享嵌入权重：同一个张量先后装入两个不同的矩阵，后装入的那个生效。
    trap_models["tied_embeddings"] = build_gpt2(ours64, tie_word_embeddings=True)
    # [en] 2. Missing transpose on layer 0's square output projection.
    # [zh] 2. 第 0 层的输出投影是方阵，漏了转置。
    square = gpt2_state_dict(ours64)
    square["transformer.h.0.attn.c_proj.weight"] = ours64.blocks[0].attn.proj.weight.detach().clone()
    trap_models["square_without_transpose"] = build_gpt2(ours64, state_dict=square)
    # [en] 3. The tanh approximation of GELU.
    # [zh] 3. GELU 的 tanh 近似。
    trap_models["gelu_new"] = build_gpt2(ours64, activation_function="gelu_new")
    trap_errors = {name: compare_with_gpt2(ours64, gpt2, peer_ids, PEER_CHUNKS) for name, gpt2 in trap_models.items()}
    error_table({"correct": peer_errors, **trap_errors})
    # [en] The correct mapping agrees, every trap is caught ...
    # [zh] 正确映射一致，每个陷阱都被查出……
    assert [agrees(errors) for errors in (peer_errors, *trap_errors.values())] == [True, False, False, False]
    # [en] ... and the tied model's embedding table now holds our output projection.
    # [zh] ……而共享权重的模型，其嵌入表里装的是我们的词表投影。
    assert torch.equal(trap_models["tied_embeddings"].transformer.wte.weight, ours64.lm_head.weight)

# %% [markdown] lang="en"
# The per-layer columns tell the traps apart. The figure shows the same numbers on a logarithmic
# scale: one group of bars per mapping (named under the group: `correct`, the leftmost, is the correct
# mapping of section 4, the others are the three traps, named as in the table), with the largest difference in the
# logits (with and without the cache; legend "logits") and in each layer's cached K and V (legend
# "layer 0 K" and so on); the vertical axis is that largest difference, `max |GPT-2 - ours|`, in FP64.
# The dashed line is the tolerance $10^{-10}$, so a bar below it agrees and a bar above it is caught. A wrong embedding table changes the input of every layer, so all K and V differ. The untransposed output
# projection of layer 0 acts after layer 0 has produced its keys and values, so layer 0's cache still
# agrees to rounding and the damage first appears in layer 1's cache. The GELU trap lives in the MLP,
# which also comes after attention: again layer 0's cache is right and layer 1's is not. Three cells
# follow: the drawing code (folded), the figure, and the check of this reading of the table.

# %% [markdown] lang="zh"
# 逐层的 K、V 误差能分辨出是哪个陷阱。下图用对数坐标画出同样的数据：每种映射一组柱子，映射的名字写在这组柱子下方（最左边一组 correct 是第 4 节的正确映射，其余三组是第 7 节的三个陷阱，名字与表中相同）；各柱分别是 logits 的最大绝对误差（图例 logits，取用缓存和不用缓存两种情形中较大的那个），以及每一层缓存的 K 和 V 的最大绝对误差（图例 layer 0 K 意为“第 0 层的 K”，其余依此类推）。纵轴 max |GPT-2 - ours| (FP64) 就是 FP64 下 GPT-2 与我们的解码器之间的最大绝对误差。虚线是容差 $10^{-10}$（图中标注为 tolerance 1e-10），低于虚线的柱子表示一致，高于虚线的表示被查出。嵌入表错了，每一层的输入都会变，所以所有层的 K 和 V 都对不上。第 0 层未转置的输出投影在第 0 层算出 K 和 V 之后才起作用，所以第 0 层的缓存仍然只差舍入误差，错误要到第 1 层的缓存才显现出来。GELU 陷阱出在 MLP 里，而 MLP 同样位于注意力之后：第 0 层的缓存依然正确，第 1 层则不然。下面三个单元格依次是绘图代码（已折叠）、图，以及对这种解读的核对。

# %% tags=["hide-input"]
def draw_trap_errors(named_errors, tolerance):
    columns = ["logits"] + [f"layer {i} {t}" for i in range(cfg.layers) for t in "KV"]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(columns)
    for c, column in enumerate(columns):
        heights = [max(errors["full_logits"], errors["cached_logits"]) if column == "logits"
                   else errors[column[-1].lower()][int(column.split()[1])] for errors in named_errors.values()]
        ax.bar(np.arange(len(named_errors)) + (c - (len(columns) - 1) / 2) * width, heights, width, label=column)
    ax.axhline(tolerance, color="black", linestyle="--", linewidth=1)
    ax.text(len(named_errors) - 0.5, tolerance * 3, "tolerance 1e-10", ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(named_errors)), list(named_errors), fontsize=9)
    ax.set_ylabel("max |GPT-2 - ours| (FP64)")
    ax.legend(fontsize=8, ncol=len(columns), loc="upper left")
    ax.set_ylim(1e-17, 1e3)
    fig.tight_layout()
    return fig

# %%
if HAVE_TRANSFORMERS:
    trap_figure = draw_trap_errors({"correct": peer_errors, **trap_errors}, TOLERANCE[torch.float64])
    TRAP_ERRORS_PNG = OUT / "trap_errors.png"
    trap_figure.savefig(TRAP_ERRORS_PNG, dpi=120)
    plt.show()

# %%
if HAVE_TRANSFORMERS:
    # [en] (layer 0's cache right, layer 1's cache right) for each trap.
    # [zh] 每个陷阱的（第 0 层缓存是否正确，第 1 层缓存是否正确）。
    layer_cache_right = {name: tuple(max(errors["k"][i], errors["v"][i]) <= TOLERANCE[torch.float64]
                                     for i in range(cfg.layers)) for name, errors in trap_errors.items()}
    say_table([[f"`{name}`", f"`{right[0]}`", f"`{right[1]}`"] for name, right in layer_cache_right.items()],
              en=["trap", "layer 0's cache right", "layer 1's cache right"],
              zh=["陷阱", "第 0 层缓存是否正确", "第 1 层缓存是否正确"])
    assert layer_cache_right == {"tied_embeddings": (False, False), "square_without_transpose": (True, False),
                                 "gelu_new": (True, False)}
