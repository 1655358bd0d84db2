# %% [markdown] lang="en"
# ### 5.2 Referee: Hugging Face's Ministral with per-layer types (optional)
#
# A self-consistent mistake passes cached-versus-full: if the pattern were shifted by one layer (the global layer
# first), the full path and the cached path would share the mistake. An outside referee catches it.
# `MinistralForCausalLM` is Llama's architecture plus a `sliding_window` and a per-layer `layer_types` list
# (`"sliding_attention"` or `"full_attention"`); its `DynamicCache`, built from the configuration, gives each
# sliding layer a `DynamicSlidingWindowLayer`, which keeps the last `sliding_window - 1` positions, and each full
# layer a `DynamicLayer`. That is exactly our mix, so the weights map as for Llama and the caches can be compared
# layer by layer. The precision is handled as in 3.1 (`with_hf_precision`, `sdpa` attention); Gemma 3 would add
# parts that do not touch the cache. transformers has no model with our shared pairs alone (Gemma
# 3n and Gemma 4 share K/V inside much larger architectures), so 5.1 has no referee.

# %% [markdown] lang="zh"
# ### 5.2 裁判：按层指定类型的 Hugging Face Ministral（可选）
#
# 自洽的错误能通过“缓存对照完整重算”：如果层的模式错开了一层（全局层放在最前面），完整路径和缓存路径会犯同一个错误。外部裁判才能发现它。`MinistralForCausalLM` 就是 Llama 的结构加上 `sliding_window` 和一个按层指定类型的 `layer_types` 列表（取值为 `"sliding_attention"` 或 `"full_attention"`）；它根据配置构造的 `DynamicCache` 为每个局部层（即 Hugging Face 所说的滑动窗口层）创建一个保留最后 `sliding_window - 1` 个位置的 `DynamicSlidingWindowLayer`，为每个全局层创建一个 `DynamicLayer`。这与我们的混合模式完全一致，所以权重映射与 Llama 相同，缓存也可以逐层比较。精度的处理与第 3.1 节相同（`with_hf_precision`，`sdpa` 注意力）；换成 Gemma 3 则会多出一些与缓存无关的部分。transformers 中没有哪个模型只做了我们这种两两共享（Gemma 3n 和 Gemma 4 是在大得多的架构里共享 K/V），所以第 5.1 节没有裁判。

# %% tags=["hide-input"]
if HAVE_HF:
    from transformers import MinistralConfig, MinistralForCausalLM

    def hf_ministral(ours: Decoder, pattern: list[str]):
        c = ours.config
        config = MinistralConfig(**hf_fields(c), head_dim=c.head_dim, sliding_window=WINDOW,
                                 layer_types=["sliding_attention" if kind == "local" else "full_attention" for kind in pattern])
        return copy_weights(ours, MinistralForCausalLM(config).eval(), LLAMA_NAMES | KV_NAMES)

# %%
MINISTRAL_REFEREE = None
if HAVE_HF:
    ours = build(six_cfg, local_global()).double()
    hf = hf_ministral(ours, LOCAL_GLOBAL)
    HF_CACHE_LAYERS = [type(layer).__name__ for layer in DynamicCache(config=hf.config).layers]
    say(en=f"The layer caches of Hugging Face's `DynamicCache` for this configuration: {', '.join(f'`{n}`' for n in HF_CACHE_LAYERS)}.",
        zh=f"按这个配置构造的 Hugging Face `DynamicCache` 中各层的缓存：{'、'.join(f'`{n}`' for n in HF_CACHE_LAYERS)}。")
    shifted = ["global"] + ["local"] * 5
    MINISTRAL_REFEREE = {"hf_precision": referee_errors(with_hf_precision(ours), hf),
                         "pure_fp64": referee_errors(ours, hf)}
    with torch.inference_mode():
        control = with_hf_precision(build(six_cfg, local_global(shifted)).double())
        MINISTRAL_REFEREE["shifted_pattern"] = {"full": max_abs_err(control(STREAM)[0], hf(input_ids=STREAM).logits)}
    shifted_own = check_cached(lambda: build(six_cfg, local_global(shifted)), 2, 5, torch.float64)
    CONTROLS["pattern_shifted_by_one_layer"] = {
        "section": 5, "check": "hf_ministral", "measured": MINISTRAL_REFEREE["shifted_pattern"]["full"],
        "caught": MINISTRAL_REFEREE["shifted_pattern"]["full"] > 1e-2}
    referee_table(MINISTRAL_REFEREE, {"hf_precision": "`with_hf_precision(local_global())`", "pure_fp64": "`local_global()`",
                                      "shifted_pattern": "`with_hf_precision(local_global(shifted))`"})
    assert HF_CACHE_LAYERS == ["DynamicSlidingWindowLayer"] * 5 + ["DynamicLayer"]
    assert max(MINISTRAL_REFEREE["hf_precision"].values()) < TOLERANCE[torch.float64]
    assert shifted_own["passed"] and CONTROLS["pattern_shifted_by_one_layer"]["caught"]
    say(en="Hugging Face's Ministral with `layer_types` agrees with our local/global model within $10^{-10}$ in FP64 (logits, "
           f"and each layer's cache: {WINDOW - 1} positions in the sliding layers, all of them in the full one); the shifted pattern "
           "passes its own cached-versus-full check but is rejected here.",
        zh="设置了 `layer_types` 的 Hugging Face Ministral 与我们的局部/全局模型在 FP64 下的最大绝对误差小于 $10^{-10}$（logits，以及每一层的缓存："
           f"局部层 {WINDOW - 1} 个位置，全局层保存全部位置）；错开一层的模式能通过它自己的“缓存对照完整重算”，在这里却被判为不一致。")
else:
    say(en=f"The Ministral referee is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"Ministral 裁判已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
