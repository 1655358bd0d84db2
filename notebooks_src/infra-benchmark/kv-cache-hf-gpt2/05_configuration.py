# %% [markdown] lang="en"
# ## 5. The configuration and the weights, field by field
#
# Section 4 listed only the fields we change. Here is why each of them matters, and which fields keep
# their default on purpose:
#
# - `n_inner`, the MLP width, is given explicitly rather than left to the default rule of 4 × width
#   (`None` in the configuration). The rule happens to give the same 256 here; a decoder with another
#   MLP width would silently get the wrong one.
# - `activation_function="gelu"` is the exact GELU, x·Φ(x) with the error function, the same as our
#   `nn.GELU()`. The default, `"gelu_new"`, is the tanh approximation that the original GPT-2 used.
# - All three dropout probabilities are 0. `layer_norm_epsilon` keeps its default, 1e-5, which is
#   also PyTorch's LayerNorm default.
# - `tie_word_embeddings=False`: our output projection has its own matrix. The default ties it to the
#   token embedding table.
# - Our 97-token vocabulary has no special tokens, so `bos_token_id` and `eos_token_id` are `None`
#   instead of the default 50256, an ID that does not exist here.
# - `scale_attn_weights=True` (the default) divides attention scores by √head_dim, as we do; the
#   per-layer extra scaling (`scale_attn_by_inverse_layer_idx`) and the reordered FP32 upcast
#   (`reorder_and_upcast_attn`) stay off, as by default.
# - `attn_implementation="eager"` selects the plain matmul → softmax → matmul function
#   `eager_attention_forward` in `modeling_gpt2.py`, so the arithmetic we compare against is explicit.
#
# The cell shows every field next to its default and checks these statements.

# %% [markdown] lang="zh"
# ## 5. 逐项核对配置和权重
#
# 第 4 节只列出了我们改动过的配置项。这里逐一说明每一项为什么要紧，以及哪些项是有意保留默认值的：
#
# - `n_inner` 是 MLP 的宽度。我们显式给出它，而不是交给“4 × 宽度”的默认规则（配置中写作 `None`）。这条规则在这里恰好也得到 256；但如果解码器的 MLP 宽度不是这个值，就会悄无声息地得到错误的宽度。
# - `activation_function="gelu"` 是精确 GELU，即用误差函数计算的 x·Φ(x)，与我们的 `nn.GELU()` 相同。默认值 `"gelu_new"` 是原版 GPT-2 使用的 tanh 近似。
# - 三个 dropout 概率都设为 0。`layer_norm_epsilon` 保留默认值 1e-5，它也是 PyTorch 中 LayerNorm 的默认值。
# - `tie_word_embeddings=False`：我们的输出投影有自己独立的矩阵；默认设置则让它与 token 嵌入表共享权重。
# - 我们的词表只有 97 个 token，没有特殊 token，所以 `bos_token_id` 和 `eos_token_id` 设为 `None`，而不是默认的 50256：这个 ID 在这里根本不存在。
# - `scale_attn_weights=True`（默认值）让注意力分数除以 √head_dim，和我们的做法一样；按层号追加的缩放（`scale_attn_by_inverse_layer_idx`）以及调整计算顺序并提升到 FP32 的做法（`reorder_and_upcast_attn`）都保持默认的关闭状态。
# - `attn_implementation="eager"` 选用 `modeling_gpt2.py` 里的 `eager_attention_forward`，即最直接的“矩阵乘 → softmax → 矩阵乘”，这样我们拿来对照的运算每一步都清清楚楚。
#
# 下面的单元格把每一项和它的默认值并排列出，并核对以上说法。

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

    assert (default_config.n_embd, default_config.n_layer, default_config.n_head, default_config.vocab_size) == (
        768, 12, 12, 50257)
    assert default_config.n_inner is None and hf_config.n_inner == cfg.mlp == 4 * cfg.width
    assert nn.LayerNorm(cfg.width).eps == default_config.layer_norm_epsilon == hf_config.layer_norm_epsilon == 1e-5
    assert all(m.eps == hf_config.layer_norm_epsilon for m in model.modules() if isinstance(m, nn.LayerNorm))
    assert hf_config.resid_pdrop == hf_config.embd_pdrop == hf_config.attn_pdrop == 0.0
    assert hf_config.bos_token_id is None and hf_config.eos_token_id is None and hf_config.pad_token_id is None
    assert hf_config.scale_attn_weights and not hf_config.scale_attn_by_inverse_layer_idx
    assert not hf_config.reorder_and_upcast_attn and hf_config._attn_implementation == "eager"
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    exact_gelu = transformers.activations.ACT2FN["gelu"]
    # [en] The same kernel on the same input: equal bit for bit. The erf formula is another computation of the
    # [en] same function, so it agrees within the FP64 tolerance (the tanh approximation lies far outside it).
    # [zh] 同一个算子作用于同一个输入：逐比特相同。按 erf 公式计算是同一函数的另一种算法，所以只要求在 FP64 容差内
    # [zh] 一致（tanh 近似远在这个容差之外）。
    assert torch.equal(exact_gelu(x), nn.GELU()(x))
    assert max_abs(exact_gelu(x), 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))) < PEER_TOL

# %% [markdown] lang="en"
# The weights, in detail. `nn.Linear(in, out)` keeps its weight as `[out, in]` and computes
# `x @ W.T + b`. GPT-2's projections are `Conv1D` modules (the name comes from OpenAI's original GPT
# code; they are plain linear layers), which keep the weight as `[in, out]` and compute `x @ W + b`.
# GPT-2's `c_attn` of width 3 × 64 produces Q, K and V side by side and splits them in that order;
# both models then cut the 64 features into 4 heads of 16 consecutive features, so no per-head
# reordering is needed.
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
# The cell checks the layout on layer 0 with a random input: what `Conv1D` computes, and GPT-2's Q, K,
# V and output projection against ours. It checks the attention scaling and the parameter counts, and
# shows that strict loading refuses a state dict with a weight left out.

# %% [markdown] lang="zh"
# 再细看权重。`nn.Linear(in, out)` 把权重存成 `[out, in]`，计算 `x @ W.T + b`。GPT-2 的各个投影层是 `Conv1D` 模块（这个名字沿用自 OpenAI 最初的 GPT 代码，实际上就是普通的线性层），权重存成 `[in, out]`，计算 `x @ W + b`。GPT-2 中宽度为 3 × 64 的 `c_attn` 一次并排算出 Q、K、V，再按这个顺序切开；随后两个模型都把 64 个特征切成 4 个头，每个头 16 个连续特征，所以不需要逐头重新排列。
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
# 下面的单元格用一个随机输入在第 0 层上核对这种布局：`Conv1D` 实际算的是什么，GPT-2 的 Q、K、V 和输出投影是否与我们的一致。它还核对注意力的缩放系数和两边的参数量，并演示：`state_dict` 里缺了一个权重时，严格模式会拒绝加载。

# %%
if HAVE_TRANSFORMERS:
    c_attn, c_proj = gpt2_64.transformer.h[0].attn.c_attn, gpt2_64.transformer.h[0].attn.c_proj
    assert isinstance(c_proj, Conv1D) and isinstance(gpt2_64.lm_head, nn.Linear)
    assert tuple(c_attn.weight.shape) == (cfg.width, 3 * cfg.width)
    assert tuple(ours64.blocks[0].mlp.fc.weight.shape) == (cfg.mlp, cfg.width)
    assert tuple(gpt2_64.transformer.h[0].mlp.c_fc.weight.shape) == (cfg.width, cfg.mlp)
    probe = torch.randn(3, cfg.width, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    attn0 = ours64.blocks[0].attn
    with torch.inference_mode():
        assert max_abs(c_proj(probe), probe @ c_proj.weight + c_proj.bias) < PEER_TOL
        # [en] GPT-2 splits c_attn's output in the order Q, K, V.
        # [zh] GPT-2 按 Q、K、V 的顺序切分 c_attn 的输出。
        q, k, v = c_attn(probe).split(cfg.width, dim=-1)
        layer0 = {"Q": max_abs(q, attn0.q(probe)), "K": max_abs(k, attn0.k(probe)),
                  "V": max_abs(v, attn0.v(probe)), "c_proj": max_abs(c_proj(probe), attn0.proj(probe))}
    say_table([[f"{e:.1e}" for e in layer0.values()]],
              en=[f"layer 0 {name}" for name in layer0], zh=[f"第 0 层 {name}" for name in layer0])
    assert max(layer0.values()) < PEER_TOL

    # [en] Scores are scaled by 1/sqrt(16) only: 5.x stores the factor as `attn.scaling`, 4.x derives it
    # [en] from the same two flags inside eager_attention_forward.
    # [zh] 注意力分数只乘以 1/sqrt(16)：5.x 把这个系数存为 `attn.scaling`，4.x 则在
    # [zh] eager_attention_forward 里根据同样的两个开关算出它。
    for block in gpt2_64.transformer.h:
        assert block.attn.head_dim == cfg.head_dim == 16
        assert block.attn.scale_attn_weights and not block.attn.scale_attn_by_inverse_layer_idx
        assert getattr(block.attn, "scaling", 16 ** -0.5) == 16 ** -0.5
    n_gpt2, n_ours = (sum(p.numel() for p in m.parameters()) for m in (gpt2_64, ours64))
    assert n_gpt2 == n_ours == parameter_formula(cfg)

    incomplete = gpt2_state_dict(ours64)
    del incomplete["lm_head.weight"]
    try:
        build_gpt2(ours64, state_dict=incomplete)
        raise AssertionError("strict loading should refuse a missing weight")
    except RuntimeError as error:
        refusal = str(error).strip().splitlines()[-1].strip()
    say(en=f"Both models have {n_ours:,} parameters. Strict loading with `lm_head.weight` left out is refused: "
           f"`{refusal}`",
        zh=f"两个模型都有 {n_ours:,} 个参数。去掉 `lm_head.weight` 后，严格模式拒绝加载：`{refusal}`")
