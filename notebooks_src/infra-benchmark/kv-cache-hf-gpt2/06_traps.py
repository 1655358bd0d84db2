# %% [markdown] lang="en"
# ## 6. Three traps, caught by the same comparison
#
# A comparison is only worth something if it fails when the mapping is wrong. Each trap below builds a
# `GPT2LMHeadModel` with one realistic mistake, runs the unchanged `compare_with_gpt2` of section 4,
# and asserts that it reports a disagreement.
#
# 1. **Tied embeddings.** With the default `tie_word_embeddings=True`, `lm_head.weight` and
#    `transformer.wte.weight` are one and the same tensor. Loading our two different matrices into it
#    raises no error: the one copied last (the output projection) silently replaces the other.
# 2. **A missing transpose on a square weight.** Leaving out `.T` on the `[256, 64]` MLP input matrix
#    is refused at loading time because the shape is wrong. The attention output projection is
#    `[64, 64]`, so its untransposed copy loads without complaint and is simply wrong. We make that
#    mistake in layer 0 only.
# 3. **The wrong GELU.** `activation_function="gelu_new"`, the config default, uses the tanh
#    approximation instead of the exact GELU. Everything else is right.

# %% [markdown] lang="zh"
# ## 6. 三个陷阱，同一个比较全都能抓住
#
# 只有映射出错时确实会失败，这个比较才有价值。下面每个陷阱都构建一个带有一处错误的 `GPT2LMHeadModel`，这种错误在现实中很容易犯；然后原样调用第 4 节的 `compare_with_gpt2`，并断言它报告两边不一致。
#
# 1. **共享嵌入权重**：如果沿用默认的 `tie_word_embeddings=True`，`lm_head.weight` 和 `transformer.wte.weight` 就是同一个张量。把我们两个不同的矩阵加载进去并不会报错：后复制的那个（输出投影）会悄无声息地覆盖先复制的那个。
# 2. **方阵漏了转置**：如果 MLP 输入层那个 `[256, 64]` 的矩阵漏了 `.T`，加载时就会因为形状不符而被拒绝。注意力的输出投影却是 `[64, 64]` 的方阵，漏了转置照样能顺利加载，只是结果错了。我们只在第 0 层犯这个错误。
# 3. **用错了 GELU**：`activation_function="gelu_new"`（也就是配置的默认值）用 tanh 近似代替精确 GELU，其余一切都正确。

# %%
# [en] One table row per mapping: the errors of section 4's comparison and its verdict at 1e-10.
# [zh] 每种映射占表格一行：第 4 节比较得到的各项误差，以及在 1e-10 下的判定。
def error_table(named_errors):
    rows = []
    for name, errors in named_errors.items():
        values = [errors["full_logits"], errors["cached_logits"]]
        values += [e for pair in zip(errors["k"], errors["v"]) for e in pair]
        rows.append([f"`{name}`"] + [f"{e:.1e}" for e in values] + [f"`{agrees(errors)}`"])
    layers = [(i, t) for i in range(cfg.layers) for t in "KV"]
    say_table(rows,
              en=["mapping", "full logits", "cached logits"] + [f"layer {i} {t}" for i, t in layers]
              + [f"agrees at {PEER_TOL:.0e}"],
              zh=["映射", "完整 logits", "缓存 logits"] + [f"第 {i} 层 {t}" for i, t in layers]
              + [f"在 {PEER_TOL:.0e} 内一致"])


if HAVE_TRANSFORMERS:
    trap_errors = {}

    # [en] 1. Tied embeddings: one tensor, two different matrices loaded into it; the last one wins.
    # [zh] 1. 共享嵌入权重：同一个张量先后装入两个不同的矩阵，后装入的那个生效。
    tied = build_gpt2(ours64, tie_word_embeddings=True)
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert not torch.equal(ours64.wte.weight, ours64.lm_head.weight)
    assert torch.equal(tied.transformer.wte.weight, ours64.lm_head.weight)
    trap_errors["tied_embeddings"] = compare_with_gpt2(ours64, tied, peer_ids, PEER_CHUNKS)

    # [en] 2. Missing transpose: refused for a non-square matrix, silently accepted for a square one.
    # [zh] 2. 漏了转置：非方阵会被拒绝加载，方阵却悄无声息地被接受。
    wrong = gpt2_state_dict(ours64)
    wrong["transformer.h.0.mlp.c_fc.weight"] = ours64.blocks[0].mlp.fc.weight.detach().clone()
    try:
        build_gpt2(ours64, state_dict=wrong)
        raise AssertionError("a [256, 64] matrix in a [64, 256] slot should not load")
    except RuntimeError as error:
        non_square_refusal = str(error).strip().splitlines()[-1].strip()
    wrong = gpt2_state_dict(ours64)
    wrong["transformer.h.0.attn.c_proj.weight"] = ours64.blocks[0].attn.proj.weight.detach().clone()
    square = build_gpt2(ours64, state_dict=wrong)
    trap_errors["square_without_transpose"] = compare_with_gpt2(ours64, square, peer_ids, PEER_CHUNKS)

    # [en] 3. The tanh approximation of GELU.
    # [zh] 3. GELU 的 tanh 近似。
    tanh_model = build_gpt2(ours64, activation_function="gelu_new")
    trap_errors["gelu_new"] = compare_with_gpt2(ours64, tanh_model, peer_ids, PEER_CHUNKS)

    say(en=f"Non-square matrix without transpose, refused at loading: `{non_square_refusal}`",
        zh=f"非方阵漏了转置，加载时被拒绝：`{non_square_refusal}`")
    error_table({"correct": peer_errors, **trap_errors})
    for name, errors in trap_errors.items():
        assert not agrees(errors), name

# %% [markdown] lang="en"
# The per-layer K and V columns tell the traps apart. A wrong embedding table changes the input of
# every layer, so all K and V differ. The untransposed output projection of layer 0 acts after layer 0
# has produced its keys and values, so layer 0's cache still agrees to rounding and the damage first
# appears in layer 1's cache. The GELU trap lives in the MLP, which also comes after attention: again
# layer 0's cache is exact and layer 1's is not. The cell checks this reading of the table.

# %% [markdown] lang="zh"
# 从逐层的 K、V 误差可以分辨出是哪个陷阱。嵌入表错了，每一层的输入都会变，所以所有层的 K 和 V 都对不上。第 0 层未转置的输出投影在第 0 层算出 K 和 V 之后才起作用，所以第 0 层的缓存仍然只差舍入误差，错误要到第 1 层的缓存才显现出来。GELU 陷阱出在 MLP 里，而 MLP 同样位于注意力之后：第 0 层的缓存依然精确，第 1 层则不然。下面的单元格验证对这张表的这种解读。

# %%
if HAVE_TRANSFORMERS:
    for name in ["square_without_transpose", "gelu_new"]:
        assert trap_errors[name]["k"][0] <= PEER_TOL and trap_errors[name]["v"][0] <= PEER_TOL, name
        assert trap_errors[name]["k"][1] > PEER_TOL and trap_errors[name]["v"][1] > PEER_TOL, name
    assert all(e > PEER_TOL for e in trap_errors["tied_embeddings"]["k"] + trap_errors["tied_embeddings"]["v"])
    say(en="Layer 0's cache intact, layer 1's wrong: `square_without_transpose`, `gelu_new`. "
           "Every layer's cache wrong: `tied_embeddings`.",
        zh="第 0 层缓存完好、第 1 层出错：`square_without_transpose`、`gelu_new`。"
           "每一层缓存都出错：`tied_embeddings`。")
