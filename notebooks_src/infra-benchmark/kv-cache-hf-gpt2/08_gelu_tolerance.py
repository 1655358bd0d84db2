# %% [markdown] lang="en"
# ## 8. Why the tolerance is $10^{-10}$: the GELU trap in FP32 and FP64
#
# The GELU trap is the quiet one, and it is the reason for the tight tolerance. The tanh curve stays
# close to the exact one everywhere: the gap is zero at 0, tiny near 0 and for large $|x|$ (where both
# curves approach $x$ or 0), and largest in between. So the damage depends on the *activation inputs*, the
# values `mlp.fc` feeds to the activation. The next cell measures the largest gap between the two curves
# on $[-8, 8]$, and the typical gap at the activation inputs our MLPs actually produce.

# %% [markdown] lang="zh"
# ## 8. 容差为什么取 $10^{-10}$：FP32 与 FP64 下的 GELU 陷阱
#
# GELU 陷阱是最不显眼的一个，容差之所以定得这么紧，正是因为它。tanh 近似曲线处处都贴近精确曲线：两者之差在 0 处为零，在 0 附近以及 $|x|$ 很大时都极小（$|x|$ 很大时两条曲线都趋于 $x$ 或 0），在两者之间最大。因此，这个错误造成多大的偏差，取决于**激活函数的输入**，即 `mlp.fc` 送入激活函数的值。下一个单元格测量两条曲线在 $[-8, 8]$ 上的最大绝对误差，以及在我们的 MLP 实际产生的激活函数输入上的典型差距。

# %%
def worst_logit_error(errors):
    return max(errors["full_logits"], errors["cached_logits"])


if HAVE_TRANSFORMERS:
    tanh_gelu, exact_gelu = transformers.activations.ACT2FN["gelu_new"], nn.GELU()
    grid = torch.linspace(-8, 8, 16001, dtype=torch.float64)
    grid_gap = (tanh_gelu(grid) - exact_gelu(grid)).abs()
    curve_gap, peak_at = grid_gap.max().item(), grid[grid_gap.argmax()].abs().item()

    # [en] The activation inputs (`mlp.fc` outputs) of every block, on section 4's token IDs.
    # [zh] 在第 4 节的 token ID 上，每个 Transformer 块的激活函数输入（`mlp.fc` 的输出）。
    mlp_inputs = []
    handles = [block.mlp.fc.register_forward_hook(lambda module, args, out: mlp_inputs.append(out.flatten()))
               for block in ours64.blocks]
    try:
        with torch.inference_mode():
            ours64(peer_ids)
    finally:
        for handle in handles:
            handle.remove()
    mlp_inputs = torch.cat(mlp_inputs)
    median_gap = (tanh_gelu(mlp_inputs) - exact_gelu(mlp_inputs)).abs().median().item()
    say(en=f"tanh curve against exact GELU on $[-8, 8]$: largest gap {curve_gap:.1e}, at $|x| = {peak_at:.2f}$. "
           f"Activation inputs: median $|x|$ {mlp_inputs.abs().median().item():.2f}, median gap there {median_gap:.1e}.",
        zh=f"在 $[-8, 8]$ 上 tanh 近似与精确 GELU 之间的最大绝对误差为 {curve_gap:.1e}，位于 $|x| = {peak_at:.2f}$ 处。"
           f"激活函数的输入：$|x|$ 的中位数为 {mlp_inputs.abs().median().item():.2f}，在这些值上差距的中位数为 {median_gap:.1e}。")

# %% [markdown] lang="en"
# The next cells run the correct mapping and the GELU trap in FP32, judged with the FP32 tolerance
# $10^{-5}$, and in FP64, judged with $10^{-10}$, for two sets of weights: the decoder as it is, and the
# same decoder with the weights and biases of both `mlp.fc` layers multiplied by 0.1, which shrinks the
# activation inputs (10× in layer 0, whose input is unchanged; roughly 10× in layer 1, whose
# input also carries layer 0's changed MLP output; the table calls the two sets `model` and `mlp_fc_x0.1`). The first cell
# builds that second set of weights; the second runs the eight comparisons; the third, folded, prints
# the table.

# %% [markdown] lang="zh"
# 下面几个单元格分别在 FP32（按 FP32 容差 $10^{-5}$ 判定）和 FP64（按 $10^{-10}$ 判定）下运行正确映射和 GELU 陷阱，两组权重各跑一遍：一组是原样的解码器；另一组是同一个解码器，但两个 `mlp.fc` 层的权重和偏置都乘以 0.1，使激活函数的输入变小（第 0 层的输入不变，所以它的激活函数输入缩小为原来的 1/10；第 1 层的输入还带着第 0 层已经改变的 MLP 输出，所以大致缩小为 1/10；表中两组权重分别记作 `model` 和 `mlp_fc_x0.1`）。第一个单元格构造第二组权重；第二个单元格做这 8 次比较；第三个单元格（代码已折叠）打印结果表。

# %%
if HAVE_TRANSFORMERS:
    # [en] The second weight set: both `mlp.fc` layers scaled by 0.1, everything else unchanged.
    # [zh] 第二组权重：两个 `mlp.fc` 层乘以 0.1，其余不变。
    small_mlp = copy.deepcopy(model)
    with torch.no_grad():
        for block in small_mlp.blocks:
            block.mlp.fc.weight.mul_(0.1)
            block.mlp.fc.bias.mul_(0.1)

# %%
WEIGHT_SETS = ("model", "mlp_fc_x0.1")
GELU_COLUMNS = [("fp32", "correct"), ("fp32", "gelu_new"), ("fp64", "correct"), ("fp64", "gelu_new")]

if HAVE_TRANSFORMERS:
    tolerance_of = {"fp32": TOLERANCE[torch.float32], "fp64": TOLERANCE[torch.float64]}
    gelu_rows = {}
    for label, fp32_model in zip(WEIGHT_SETS, (model, small_mlp)):
        candidates = {"fp32": fp32_model, "fp64": copy.deepcopy(fp32_model).to(torch.float64)}
        changes = {"correct": {}, "gelu_new": {"activation_function": "gelu_new"}}
        gelu_rows[label] = {(dtype, variant): compare_with_gpt2(candidates[dtype],
                                                                build_gpt2(candidates[dtype], **changes[variant]),
                                                                peer_ids, PEER_CHUNKS)
                            for dtype, variant in GELU_COLUMNS}
    gelu_verdicts = {label: [agrees(row[c], tolerance_of[c[0]]) for c in GELU_COLUMNS] for label, row in gelu_rows.items()}

# %% tags=["hide-input"]
if HAVE_TRANSFORMERS:
    say_table([[f"`{label}`"] + [f"{worst_error(row[c]):.2e} (`{verdict}`)"
                                 for c, verdict in zip(GELU_COLUMNS, gelu_verdicts[label])]
               for label, row in gelu_rows.items()],
              en=["weights", "FP32, correct", "FP32, `gelu_new`", "FP64, correct", "FP64, `gelu_new`"],
              zh=["权重", "FP32，正确映射", "FP32，`gelu_new`", "FP64，正确映射", "FP64，`gelu_new`"])
    say(en="The worst quantity of each comparison, GPT-2 against ours: the largest absolute error over the logits and "
           "every layer's cached K and V. In brackets the verdict of `agrees`: is that number within $10^{-5}$ (FP32) "
           "or $10^{-10}$ (FP64)?",
        zh="表中是每次比较的最差一项：GPT-2 与我们的解码器之间，logits 以及每一层缓存的 K、V 各自的最大绝对误差中"
           "最大的那个。括号里是 `agrees` 的判定：这个数是否在 $10^{-5}$（FP32）或 $10^{-10}$（FP64）的容差以内？")


# %% [markdown] lang="en"
# What to read in the table:
#
# - In FP32 even the correct mapping differs by rounding noise, {{run:gelu.fp32_correct:.1e}}, far above
#   $10^{-10}$: an FP32 comparison has to allow something like $10^{-5}$.
# - With the decoder as it is, that FP32 tolerance still catches the GELU trap
#   ({{run:gelu.fp32_trap:.1e}}), but its largest absolute error is only {{run:gelu.fp32_margin:.0f}} times the
#   tolerance.
# - With the scaled weights, the trap's FP32 error, {{run:gelu.fp32_small_trap:.1e}}, is of the order of the
#   correct mapping's rounding noise and passes: in FP32 the wrong GELU is invisible.
# - In FP64 the correct mapping stays at rounding level, and the trap is caught with both sets of
#   weights.
#
# The other two traps of section 7 are far louder: the smaller of their logit errors is
# {{run:gelu.other_over_gelu:,.0f}} times the GELU trap's, so of the three only the GELU trap can slip through an
# FP32 comparison. Why exactly $10^{-10}$? In the FP64 columns the correct mapping stays at or below
# {{run:gelu.fp64_noise:.1e}} and the weakest trap, `gelu_new`, at or above {{run:gelu.fp64_trap:.1e}}, on
# both weight sets. Any tolerance between the two would do; $10^{-10}$ is a round number inside that gap.
# The next cell checks these readings of the table.

# %% [markdown] lang="zh"
# 表中要看的是：
#
# - 在 FP32 下，即使映射完全正确，也有 {{run:gelu.fp32_correct:.1e}} 的舍入噪声，远大于 $10^{-10}$：FP32 的比较必须留出 $10^{-5}$ 左右的容差。
# - 对原样的解码器，这个 FP32 容差仍能查出 GELU 陷阱（{{run:gelu.fp32_trap:.1e}}），但它的最大绝对误差只有容差的 {{run:gelu.fp32_margin:.0f}} 倍。
# - 换成缩小后的权重，陷阱在 FP32 下的误差为 {{run:gelu.fp32_small_trap:.1e}}，与正确映射的舍入噪声处于同一量级，于是通过了比较：在 FP32 下，用错了 GELU 根本看不出来。
# - 在 FP64 下，正确映射的误差始终停留在舍入误差的水平，两组权重下的陷阱都被查出。
#
# 第 7 节另外两个陷阱造成的误差要大得多：两者中较小的那个 logits 误差也是 GELU 陷阱的 {{run:gelu.other_over_gelu:,.0f}} 倍，所以三个陷阱里，只有 GELU 陷阱可能在 FP32 的比较中蒙混过关。为什么恰好取 $10^{-10}$？看表中 FP64 的两列：两组权重下，正确映射的最差一项都不超过 {{run:gelu.fp64_noise:.1e}}，最弱的陷阱 `gelu_new` 则都不低于 {{run:gelu.fp64_trap:.1e}}。介于两者之间的任何容差都可以；$10^{-10}$ 只是这个区间里一个取整的值。下一个单元格核对从表中读出的这些结论。

# %%
if HAVE_TRANSFORMERS:
    # [en] The verdicts the text reads from the table: FP32 misses the trap only with the scaled weights, FP64
    # [en] separates the correct mapping from the trap on both ...
    # [zh] 正文从表中读出的判定：只有换成缩小后的权重时，FP32 才漏掉陷阱；FP64 在两组权重下都能把正确映射与陷阱分开……
    assert gelu_verdicts == {"model": [True, False, True, False], "mlp_fc_x0.1": [True, True, True, False]}
    # [en] ... FP32 rounding alone exceeds the FP64 tolerance, and the other traps are far above FP32's.
    # [zh] ……单是 FP32 的舍入噪声就超过了 FP64 的容差，而另外两个陷阱远远高于 FP32 的容差。
    fp32_noise = min(worst_logit_error(row[("fp32", "correct")]) for row in gelu_rows.values())
    other_traps = min(worst_logit_error(trap_errors[name]) for name in ["tied_embeddings", "square_without_transpose"])
    assert fp32_noise > TOLERANCE[torch.float64] and other_traps > 1000 * TOLERANCE[torch.float32]

# %% tags=["prose-values"]
{"gelu": {
    "curve_gap": curve_gap, "peak_at": peak_at, "median_gap": median_gap,
    "median_input": mlp_inputs.abs().median().item(),
    "fp32_correct": worst_error(gelu_rows["model"][("fp32", "correct")]),
    "fp32_trap": worst_error(gelu_rows["model"][("fp32", "gelu_new")]),
    "fp32_margin": worst_error(gelu_rows["model"][("fp32", "gelu_new")]) / TOLERANCE[torch.float32],
    "fp32_small_trap": worst_error(gelu_rows["mlp_fc_x0.1"][("fp32", "gelu_new")]),
    "fp64_noise": max(worst_error(row[("fp64", "correct")]) for row in gelu_rows.values()),
    "fp64_trap": min(worst_error(row[("fp64", "gelu_new")]) for row in gelu_rows.values()),
    "other_over_gelu": other_traps / worst_logit_error(trap_errors["gelu_new"]),
}} if HAVE_TRANSFORMERS else {}
