# %% [markdown] lang="en"
# ### 4.2 GQA and MQA, proved
#
# **Criterion 1: with $H_{kv} = H$ the generalized decoder is the decoder of section 3.** Loaded with section
# 3's weights (`strict=True`: every name must match), it gives the same logits, full and cached (chunks of 5),
# and the same cached K and V in both layers, within the FP32 tolerance (appendix A shows why not bit for bit).

# %% [markdown] lang="zh"
# ### 4.2 检验 GQA 与 MQA 的实现
#
# **判据 1：当 $H_{kv} = H$ 时，通用解码器就是第 3 节的解码器。** 以 `strict=True`（参数名必须一一对应）加载第 3 节的权重后，它给出的 logits（完整调用和分块长度为 5 的带缓存运行）以及两层缓存中的 K 和 V，都与第 3 节的解码器在 FP32 容差内一致（为什么不是逐比特相同，见附录 A）。

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
worst = max(MHA_SAME, key=lambda name: MHA_SAME[name]["max_abs_err"])
say(en=f"Section 3's decoder vs `Decoder` over {len(MHA_SAME)} tensors (logits full and cached, K and V of both layers): "
       f"largest difference {MHA_SAME[worst]['max_abs_err']:.1e} (`{worst}`), "
       f"{'all within tolerance' if all(r['close'] for r in MHA_SAME.values()) else 'NOT all within tolerance'}.",
    zh=f"第 3 节的解码器与 `Decoder` 比较 {len(MHA_SAME)} 个张量（完整调用和带缓存运行的 logits，两层的 K 和 V）："
       f"最大绝对误差为 {MHA_SAME[worst]['max_abs_err']:.1e}（`{worst}`），"
       f"{'全部在容差之内' if all(r['close'] for r in MHA_SAME.values()) else '并非全部在容差之内'}。")
assert all(r["close"] for r in MHA_SAME.values())
# [en] Layer 0's cache is bit for bit the same on any CPU: the same projection of the same inputs, before any attention.
# [zh] 第 0 层的缓存在任何 CPU 上都逐比特相同：在任何注意力计算之前，它是同样的输入经过同样的投影得到的。
assert MHA_SAME["layer0_k"]["bit_exact"] and MHA_SAME["layer0_v"]["bit_exact"]

# %% [markdown] lang="en"
# **Criterion 2: with $H_{kv} = 2$ (GQA) and $H_{kv} = 1$ (MQA), the cached path equals full recomputation**
# over the grid of `check_cached`: every logit and every cached tensor, 12 configurations per model (`GQA2`, `MQA`). The GQA grid is shown in full, then one summary row per model.

# %% [markdown] lang="zh"
# **判据 2：当 $H_{kv} = 2$（GQA）和 $H_{kv} = 1$（MQA）时，缓存路径与完整重算一致。** 检查用的是 `check_cached` 的网格：比较每个 logit 和每个缓存的张量，每个模型 12 种配置（`GQA2`、`MQA`）。先完整列出 GQA 的网格，再为每个模型各列一行汇总。

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
