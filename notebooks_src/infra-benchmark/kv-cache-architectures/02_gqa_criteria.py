# %% [markdown] lang="en"
# **Criterion 1: with $H_{kv} = H$ the generalized decoder is the decoder of section 3.** We load the weights
# of section 3's `model` into `build(ArchConfig())` with `strict=True` (every name must match) and compare the
# logits of a full call and of a cached run in chunks of 5, and both layers' cached K and V. The two models
# run the same operations in the same order, but on keys in different memory layouts (`repeat_interleave`
# copies), and different layouts can round differently in the last bits, so we compare within the FP32
# tolerance $10^{-5}$ (the aside right after this check shows why) and report whether this run happened to
# be bit-exact. What does hold bit for bit on any machine is layer 0's cache: its keys and values
# are the same projection of the same inputs, concatenated the same way, before any attention has run.

# %% [markdown] lang="zh"
# **判据 1：当 $H_{kv} = H$ 时，通用解码器就是第 3 节的解码器。** 我们把第 3 节 `model` 的权重以 `strict=True`（参数名必须一一对应）加载进 `build(ArchConfig())`，比较一次完整调用和一次分块长度为 5 的带缓存运行给出的 logits，以及两层缓存中的 K 和 V。两个模型按相同的顺序执行相同的运算，但键的内存布局不同（`repeat_interleave` 会复制），而不同的布局可能在最后几个比特上舍入不同，所以我们在 FP32 容差 $10^{-5}$ 内比较（紧接在这项检查之后的旁注说明了原因），并报告本次运行是否恰好逐比特相同。在任何机器上都逐比特相同的，是第 0 层的缓存：在任何注意力计算之前，它的 K 和 V 是同样的输入经过同样的投影、以同样的方式拼接得到的。

# %%
mha = build(ArchConfig())
mha.load_state_dict(model.state_dict(), strict=True)
with torch.inference_mode():
    reference_full, _ = model(STREAM)
    reference_cache, reference_pieces = None, []
    for start in range(0, STREAM_LEN, 5):
        logits, reference_cache = model(STREAM[:, start:start + 5], reference_cache)
        reference_pieces.append(logits)
    ours_full, _ = mha(STREAM)
ours_cached, ours_cache = run_chunked(mha, STREAM, 5)
MHA_PAIRS = {"full_logits": (reference_full, ours_full), "cached_logits": (torch.cat(reference_pieces, 1), ours_cached)}
MHA_PAIRS |= {f"layer{i}_{name}": pair for i, ((k, v), c) in enumerate(zip(reference_cache, ours_cache))
              for name, pair in (("k", (k, c.k)), ("v", (v, c.v)))}
MHA_SAME = {name: {"max_abs_err": max_abs_err(a, b), "close": close(a, b), "bit_exact": torch.equal(a, b)}
            for name, (a, b) in MHA_PAIRS.items()}
say_table([[f"`{name}`", f"{r['max_abs_err']:.1e}", f"`{r['close']}`", f"`{r['bit_exact']}`"] for name, r in MHA_SAME.items()],
          en=["compared (section 3's decoder vs `Decoder`)", "max abs error", "within tolerance", "bit-exact on this run"],
          zh=["比较项（第 3 节的解码器与 `Decoder`）", "最大绝对误差", "在容差之内", "本次运行逐比特相同"])
assert all(r["close"] for r in MHA_SAME.values())
assert MHA_SAME["layer0_k"]["bit_exact"] and MHA_SAME["layer0_v"]["bit_exact"]

# %% [markdown] lang="en"
# > **Aside (optional): why criterion 1 asks for a tolerance.** The logits above may differ in their last bits; here is
# > the rounding difference, shown on the product itself:
# > `q @ k.T` for a batch of 2, with `k` a transposed view of a projection (as section 3's decoder passes it)
# > and with its contiguous copy (as `repeat_interleave` passes it), for every length from 1 to 24. The two
# > hold the same values in different layouts. On the machine that ran this notebook,
# > {{run:gqa.layout_lengths_differing}} of the 24 lengths rounded differently, by up to
# > {{run:gqa.layout_max_diff:.1e}}; every length agrees within the tolerance. Asserting bit-for-bit equality
# > here would assert a property of the machine, not of the code.

# %% [markdown] lang="zh"
# > **旁注（可跳过）：判据 1 为什么要用容差。** 上表中的 logits 可能在最后几个比特上不同；下面直接在乘积上展示这种舍入差异：batch 为 2 的 `q @ k.T`，`k` 分别取投影结果转置后的视图（第 3 节的解码器就这样传递）和它的连续副本（`repeat_interleave` 传递的就是副本），长度从 1 取到 24。两者的数值相同，只是内存布局不同。在运行本笔记本的机器上，24 个长度中有 {{run:gqa.layout_lengths_differing}} 个的舍入结果不同，最大绝对误差为 {{run:gqa.layout_max_diff:.1e}}；每个长度上两者都在容差内一致。如果在这里断言逐比特相同，断言的其实是机器的性质，而不是代码的性质。

# %% tags=["hide-input"]
def by_view_and_by_copy(length: int):
    # [en] q @ k.T with k a transposed view of a projection, and with its contiguous copy.
    # [zh] q @ k.T：k 分别取投影结果转置后的视图和它的连续副本。
    gen = torch.Generator().manual_seed(SEED + length)
    q, k = (torch.randn(2, length, cfg.heads, cfg.head_dim, generator=gen).transpose(1, 2) for _ in range(2))   # [2, H, T, D]
    return q @ k.transpose(-2, -1), q @ k.contiguous().transpose(-2, -1)


def runs(values: list[int]) -> list[tuple[int, int]]:
    # [en] Consecutive integers grouped: [5, 6, 7, 9] -> [(5, 7), (9, 9)].
    # [zh] 把连续的整数归为一段：[5, 6, 7, 9] -> [(5, 7), (9, 9)]。
    spans = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], v)
        else:
            spans.append((v, v))
    return spans


with torch.inference_mode():
    LAYOUT_PAIRS = {length: by_view_and_by_copy(length) for length in range(1, STREAM_LEN + 1)}
LAYOUT_DIFF = {length: max_abs_err(*pair) for length, pair in LAYOUT_PAIRS.items()}
LAYOUT = {"lengths_differing": [t for t, d in LAYOUT_DIFF.items() if d > 0], "max_abs_diff": max(LAYOUT_DIFF.values())}
DIFFERING = runs(LAYOUT["lengths_differing"])
say(en=f"`q @ k.T` by view and by copy, lengths 1 to {STREAM_LEN}, on this machine: "
       + (f"rounded differently at lengths {', '.join(str(a) if a == b else f'{a} to {b}' for a, b in DIFFERING)}"
          if DIFFERING else "bit-identical at every length")
       + f" (largest difference {LAYOUT['max_abs_diff']:.1e}).",
    zh=f"`k` 取视图和取连续副本时的 `q @ k.T`，长度 1 到 {STREAM_LEN}，在这台机器上："
       + (f"长度为 {'、'.join(str(a) if a == b else f'{a} 到 {b}' for a, b in DIFFERING)} 时两者的舍入结果不同"
          if DIFFERING else "每个长度上两者都逐比特相同")
       + f"（最大绝对误差 {LAYOUT['max_abs_diff']:.1e}）。")
assert all(close(*pair) for pair in LAYOUT_PAIRS.values())

# %% tags=["prose-values"]
# [en] The run's numbers that the text quotes: the text is filled in from this cell's output when the notebook is built.
# [zh] 正文引用的本次运行结果：构建笔记本时，正文就是用这个单元格的输出填写的。
{"gqa": {"layout_lengths_differing": len(LAYOUT["lengths_differing"]), "layout_max_diff": float(LAYOUT["max_abs_diff"])}}

# %% [markdown] lang="en"
# **Criterion 2: with $H_{kv} = 2$ (GQA) and $H_{kv} = 1$ (MQA), the cached path equals full recomputation**
# over the grid of `check_cached`: every logit and every cached tensor, 12 configurations per model (`GQA2` and
# `MQA` are the two configurations). The GQA grid is shown in full, then one summary row per model.

# %% [markdown] lang="zh"
# **判据 2：当 $H_{kv} = 2$（GQA）和 $H_{kv} = 1$（MQA）时，缓存路径与完整重算一致。** 检查用的是 `check_cached` 的网格：比较每个 logit 和每个缓存的张量，每个模型 12 种配置（两种配置分别记为 `GQA2` 和 `MQA`）。先完整列出 GQA 的网格，再为每个模型各列一行汇总。

# %%
GQA2, MQA = ArchConfig(kv_heads=2), ArchConfig(kv_heads=1)
GQA_GRIDS = {"gqa2": run_grid(lambda: build(GQA2)), "mqa": run_grid(lambda: build(MQA))}
grid_table(GQA_GRIDS["gqa2"])
summary_table({"`GQA2`": GQA_GRIDS["gqa2"], "`MQA`": GQA_GRIDS["mqa"]})
assert all(r["passed"] for rows in GQA_GRIDS.values() for r in rows)

# %% [markdown] lang="en"
# **Criterion 3: the cache holds $H_{kv}$ heads, and the payload formula says so.** The first notebook's
# formula holds with the number of K/V heads in place of the number of heads:
# $M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$ (the series' `kv_bytes_per_token` times
# $B \cdot T$). At batch 2, $T = 24$, FP32, the cell compares it with `nbytes()` summed over the real caches
# of MHA, GQA and MQA models. The parameter count shrinks too: each layer's K and V projections lose
# $2 (H - H_{kv}) D_h (W + 1)$ parameters.

# %% [markdown] lang="zh"
# **判据 3：缓存中保存的是 $H_{kv}$ 个头，数据量公式也是这么算的。** 把第一份笔记本公式中的头数换成 K/V 头数，公式依然成立：$M_{KV} = 2 \cdot B \cdot T \cdot L \cdot H_{kv} \cdot D_h \cdot s$（即本系列的 `kv_bytes_per_token` 乘以 $B \cdot T$）。下面的单元格取 batch 2、$T = 24$、FP32，把公式算出的字节数与 MHA、GQA、MQA 三个模型真实缓存的 `nbytes()` 之和相比较。参数量也随之减少：每层的 K、V 投影少了 $2 (H - H_{kv}) D_h (W + 1)$ 个参数。

# %%
GQA_PAYLOAD = {}
for kv_heads in (4, 2, 1):
    config = ArchConfig(kv_heads=kv_heads)
    net = build(config)
    with torch.inference_mode():
        _, cache = net(STREAM)
    GQA_PAYLOAD[kv_heads] = {
        "measured_bytes": sum(c.nbytes() for c in cache),
        "formula_bytes": kv_bytes_per_token(config.layers, kv_heads, config.head_dim, 4) * STREAM.numel(),
        "params": sum(p.numel() for p in net.parameters()),
        "params_formula": N_PARAMS - config.layers * 2 * (config.heads - kv_heads) * config.head_dim * (config.width + 1)}
say_table([[str(h), f"{v['formula_bytes']:,}", f"{v['measured_bytes']:,}", f"{v['params']:,}"] for h, v in GQA_PAYLOAD.items()],
          en=["`kv_heads`", "formula (bytes)", "measured (bytes)", "parameters"],
          zh=["`kv_heads`", "公式（字节）", "实测（字节）", "参数量"])
assert all(v["measured_bytes"] == v["formula_bytes"] and v["params"] == v["params_formula"] for v in GQA_PAYLOAD.values())
