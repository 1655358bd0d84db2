# %% [markdown] lang="en"
# ### 6.1 Cross-check with Hugging Face Mistral (optional)
#
# `MistralForCausalLM` is Llama's architecture plus `sliding_window`. With the pinned transformers it builds the
# band mask `kv_idx > q_idx - sliding_window` itself, and its `DynamicCache`, built from the configuration,
# gives each layer a `DynamicSlidingWindowLayer` that keeps the last $W - 1$ positions, in position order. The
# weights map exactly as for Llama, and our copy again computes Hugging Face's two FP32 steps. Besides the
# logits we compare the caches: ours returns its slots oldest first, so the two hold the same positions in the
# same order. A second cell runs the window one key too wide (negative control 1), which the referee must reject.

# %% [markdown] lang="zh"
# ### 6.1 与 Hugging Face Mistral 交叉核对（可选）
#
# `MistralForCausalLM` 就是 Llama 的结构加上 `sliding_window`。在锁定的 transformers 版本中，它自己构造带状掩码 `kv_idx > q_idx - sliding_window`；它按配置构造的 `DynamicCache` 为每一层创建一个 `DynamicSlidingWindowLayer`，按位置顺序保留最后 $W - 1$ 个位置。权重映射与 Llama 完全相同，我们的副本同样在 FP32 下完成 Hugging Face 的那两步。除了 logits，我们还比较缓存：我们的缓存按位置从旧到新返回槽位，所以两者以相同的顺序保存相同的位置。第二个单元格运行宽了一个键的窗口（负对照 1），裁判必须把它判为不一致。

# %%
MISTRAL_CROSS = None
if HAVE_HF:
    from transformers import MistralConfig, MistralForCausalLM

    mistral_config = MistralConfig(**hf_fields(LLAMA_CFG), head_dim=LLAMA_CFG.head_dim, sliding_window=WINDOW)
    hf = copy_weights(window_model(), MistralForCausalLM(mistral_config).eval(), LLAMA_NAMES | KV_NAMES)
    HF_WINDOW_LAYERS = [type(layer).__name__ for layer in DynamicCache(config=hf.config).layers]
    MISTRAL_CROSS = {"hf_precision": referee_errors(with_hf_precision(window_model().double()), hf)}
    referee_table(MISTRAL_CROSS, {"hf_precision": f"`with_hf_precision(window_model({WINDOW}))`"})
    mistral_err = max(MISTRAL_CROSS["hf_precision"].values())
    say(en=f"Hugging Face Mistral with `sliding_window={WINDOW}` agrees with our ring-buffer model within $10^{{-10}}$ in FP64 "
           f"(logits, and the {WINDOW - 1} cached positions of every layer): "
           + ("bit for bit equal in this run, appendix B says why." if mistral_err == 0
              else f"largest difference {mistral_err:.1e}."),
        zh=f"`sliding_window={WINDOW}` 的 Hugging Face Mistral 与我们基于环形缓冲区的模型在 FP64 下的最大绝对误差小于 $10^{{-10}}$"
           f"（logits 以及每一层缓存中的 {WINDOW - 1} 个位置都是如此）："
           + ("本次运行中两者逐比特相同，原因见附录 B。" if mistral_err == 0 else f"最大绝对误差为 {mistral_err:.1e}。"))
    assert HF_WINDOW_LAYERS == ["DynamicSlidingWindowLayer"] * LLAMA_CFG.layers
    assert mistral_err < 1e-10
else:
    say(en=f"The cross-check with Hugging Face Mistral is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"与 Hugging Face Mistral 的交叉核对已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")

# %%
if HAVE_HF:
    with torch.inference_mode():
        MISTRAL_CROSS["window_one_key_too_wide"] = {"full": max_abs_err(with_hf_precision(wider().double())(STREAM)[0],
                                                                        hf(input_ids=STREAM).logits)}
    referee_table({"window_one_key_too_wide": MISTRAL_CROSS["window_one_key_too_wide"]},
                  {"window_one_key_too_wide": "`with_hf_precision(wider())`"})
    assert MISTRAL_CROSS["window_one_key_too_wide"]["full"] > 1e-2
else:
    say(en="Skipped without `transformers`.", zh="没有 `transformers`，已跳过。")
