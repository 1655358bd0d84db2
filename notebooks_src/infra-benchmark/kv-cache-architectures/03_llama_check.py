# %% [markdown] lang="en"
# The comparison, full and cached (chunks of 1, 2 and 5), logits and every layer's cached K/V.

# %% [markdown] lang="zh"
# 比较完整调用和缓存路径（分块长度 1、2、5）的 logits 以及每一层缓存的 K/V。

# %%
LLAMA_CROSS = None
if HAVE_HF:
    from transformers import LlamaConfig, LlamaForCausalLM

    def hf_llama(ours: Decoder):
        config = LlamaConfig(**hf_fields(ours.config), head_dim=ours.config.head_dim, attention_bias=False, mlp_bias=False)
        return copy_weights(ours, LlamaForCausalLM(config).eval(), LLAMA_NAMES | KV_NAMES)

    llama64 = build(LLAMA_CFG).double()
    hf = hf_llama(llama64)
    # [en] One row for the model; the pure-FP64 row is appendix B's finding (kept in results.json).
    # [zh] 表中只列模型一行；纯 FP64 模型的结果属于附录 B 的发现（仍保存在 results.json 中）。
    LLAMA_CROSS = {"hf_precision": referee_errors(with_hf_precision(llama64), hf), "pure_fp64": referee_errors(llama64, hf)}
    referee_table({"hf_precision": LLAMA_CROSS["hf_precision"]}, {"hf_precision": "`with_hf_precision(build(LLAMA_CFG))`"})
    llama_err = max(LLAMA_CROSS["hf_precision"].values())
    if llama_err == 0:
        say(en="Largest difference 0: bit for bit equal in this run.", zh="最大绝对误差为 0：本次运行中两者逐比特相同。")
    else:
        say(en=f"Largest difference {llama_err:.1e}, within $10^{{-10}}$.", zh=f"最大绝对误差为 {llama_err:.1e}，小于 $10^{{-10}}$。")
    assert llama_err < 1e-10
else:
    say(en=f"The cross-check with Hugging Face Llama is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"与 Hugging Face Llama 的交叉核对已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")

# %% [markdown] lang="en"
# The referee also rejects section 4's negative control, the tiled K/V heads, in a full call. The one mistake
# has three numbers, one per comparison, on two models: section 4's `GQA2` (learned positions) and this
# section's `LLAMA_CFG` (RoPE):
#
# | model | what is compared | where | max abs difference |
# |---|---|---|---|
# | `tiled(GQA2)` | logits, against the interleaved model | section 4.2 | {{run:gqa.tile_logit_diff:.2f}} |
# | `tiled(GQA2).blocks[0].attn` | one layer's output, against the head loop | section 4.2 | {{run:gqa.head_loop_tiled:.3f}} |
# | `tiled(LLAMA_CFG)` | logits, against Hugging Face's model | the table below | {{run:referee.tiled_full:.1e}} |

# %% [markdown] lang="zh"
# 裁判同样能在完整调用中查出第 4 节的负对照，即平铺的 K/V 头。同一个错误在三种比较中得到三个数，涉及两个模型：第 4 节的 `GQA2`（可学习的位置嵌入）和本节的 `LLAMA_CFG`（RoPE）。
#
# | 模型 | 比较什么 | 出处 | 最大绝对误差 |
# |---|---|---|---|
# | `tiled(GQA2)` | logits，与交错模型比较 | 第 4.2 节 | {{run:gqa.tile_logit_diff:.2f}} |
# | `tiled(GQA2).blocks[0].attn` | 一个注意力层的输出，与逐头循环比较 | 第 4.2 节 | {{run:gqa.head_loop_tiled:.3f}} |
# | `tiled(LLAMA_CFG)` | logits，与 Hugging Face 的模型比较 | 下表 | {{run:referee.tiled_full:.1e}} |

# %%
if HAVE_HF:
    with torch.inference_mode():
        tiled_error = max_abs_err(with_hf_precision(tiled(LLAMA_CFG).double())(STREAM)[0], hf(input_ids=STREAM).logits)
    LLAMA_CROSS["tiled_kv_heads"] = {"full": tiled_error}
    referee_table({"tiled_kv_heads": LLAMA_CROSS["tiled_kv_heads"]}, {"tiled_kv_heads": "`with_hf_precision(tiled(LLAMA_CFG))`"})
    assert tiled_error > 1e-2
else:
    say(en="Skipped without `transformers`.", zh="没有 `transformers`，已跳过。")

# %% tags=["prose-values"]
{"referee": {"pure_fp64_full": float(LLAMA_CROSS["pure_fp64"]["full"]) if HAVE_HF else float("nan"),
             "tiled_full": float(LLAMA_CROSS["tiled_kv_heads"]["full"]) if HAVE_HF else float("nan")}}
