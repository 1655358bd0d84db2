# %% [markdown] lang="en"
# ## 10. Appendix (optional): Hugging Face as a referee
#
# Everything above compares our code with our code. Two of the mechanisms also exist in Hugging Face
# `transformers`, written by other people: left-padded batches driven by an `attention_mask`, and a
# preallocated `StaticCache`. Our decoder has GPT-2's architecture, so its weights can be copied into
# `GPT2LMHeadModel` (the first notebook's appendix explains the mapping field by field; no shared
# section holds it yet, so a compact copy of it is below). In FP64, with a tolerance of $10^{-10}$:
#
# * **padding**: GPT-2 runs the padded batch of section 4 through prefill and 20 greedy steps, with
#   the batch's `attention_mask` and positions `cumsum - 1` (the rule `generate` itself uses); its
#   logits at real positions and its tokens must equal ours;
# * **static cache**: the same loop over a `StaticCache` of `T_max` = 32; logits and tokens must equal
#   ours, and the K and V in its buffers, at the real slots, must equal those in our static buffers.
#
# This appendix needs `transformers` (Colab ships it); it was written against version 5.23.0. Without
# it, or with a version whose cache API differs, each cell says so in one sentence and does nothing.

# %% [markdown] lang="zh"
# ## 10. 附录（可选）：请 Hugging Face 当裁判
#
# 前面的比较都是拿我们自己的代码对照我们自己的代码。其中两种机制在 Hugging Face `transformers` 里也有实现，而且出自别人之手：由 `attention_mask` 驱动的左填充 batch，以及预分配的 `StaticCache`。我们的解码器采用的是 GPT-2 的结构，所以它的权重可以复制进 `GPT2LMHeadModel`（第一份笔记本的附录逐项解释了这套权重映射；目前还没有可以共享的章节收录它，所以下面写了一份精简的副本）。比较在 FP64 下进行，容差为 $10^{-10}$：
#
# * **填充**：GPT-2 用 batch 的 `attention_mask` 和位置 `cumsum - 1`（也就是 `generate` 自己用的规则），对第 4 节填充后的 batch 做预填充和 20 步贪心生成；它在真实位置上的 logits 和生成的 token 都必须与我们的相同；
# * **静态缓存**：同样的循环，改用 `T_max` = 32 的 `StaticCache`；logits 和 token 必须与我们的相同，而且它缓冲区里真实槽位上的 K 和 V，也必须与我们静态缓冲区里的相同。
#
# 本附录需要 `transformers`（Colab 已预装），是按 5.23.0 版编写的。没有安装它，或者所装版本的缓存接口不同时，下面每个单元格都只用一句话说明原因，不做别的事。

# %%
import warnings

# [en] tqdm's notice about widgets is noise here: no progress bars.
# [zh] tqdm 关于控件的提示在这里是噪声：没有进度条。
warnings.filterwarnings("ignore", message="IProgress not found")
HF_TOL = TOLERANCE[torch.float64]
try:
    import transformers
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, StaticCache
    HF_SKIP = None
except ImportError:
    HF_SKIP = "transformers is not installed: the appendix is skipped."


def gpt2_twin(ours):
    # [en] Our weights in GPT2LMHeadModel: Conv1D stores [in, out], so matrices are transposed; q, k, v stack into c_attn.
    # [zh] 把我们的权重放进 GPT2LMHeadModel：Conv1D 按 [in, out] 存储，所以矩阵要转置；q、k、v 拼成 c_attn。
    c = ours.config
    config = GPT2Config(vocab_size=c.vocab, n_positions=c.max_positions, n_embd=c.width, n_layer=c.layers, n_head=c.heads,
                        n_inner=c.mlp, activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=1e-5, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                        pad_token_id=None, attn_implementation="eager")
    sd = {"transformer.wte.weight": ours.wte.weight, "transformer.wpe.weight": ours.wpe.weight,
          "transformer.ln_f.weight": ours.ln_f.weight, "transformer.ln_f.bias": ours.ln_f.bias,
          "lm_head.weight": ours.lm_head.weight}
    for i, block in enumerate(ours.blocks):
        h, a, m = f"transformer.h.{i}.", block.attn, block.mlp
        sd |= {h + "ln_1.weight": block.ln_1.weight, h + "ln_1.bias": block.ln_1.bias,
               h + "ln_2.weight": block.ln_2.weight, h + "ln_2.bias": block.ln_2.bias,
               h + "attn.c_attn.weight": torch.cat([a.q.weight, a.k.weight, a.v.weight]).T,
               h + "attn.c_attn.bias": torch.cat([a.q.bias, a.k.bias, a.v.bias]),
               h + "attn.c_proj.weight": a.proj.weight.T, h + "attn.c_proj.bias": a.proj.bias,
               h + "mlp.c_fc.weight": m.fc.weight.T, h + "mlp.c_fc.bias": m.fc.bias,
               h + "mlp.c_proj.weight": m.proj.weight.T, h + "mlp.c_proj.bias": m.proj.bias}
    twin = GPT2LMHeadModel(config).to(ours.lm_head.weight.dtype).eval()
    twin.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=True)
    return twin


if HF_SKIP is None:
    try:
        model64 = in_dtype(model, torch.float64)
        gpt2 = gpt2_twin(model64)
        probe = StaticCache(config=gpt2.config, max_cache_len=4)
        with torch.inference_mode():
            gpt2(input_ids=torch.zeros(1, 2, dtype=torch.long), past_key_values=probe, use_cache=True,
                 cache_position=torch.arange(2))
        assert tuple(probe.layers[0].keys.shape) == (1, cfg.heads, 4, cfg.head_dim)
    # [en] Any failure: another cache API than this appendix uses.
    # [zh] 任何失败都说明：缓存接口与本附录所用的不同。
    except Exception as error:
        problem = f"{type(error).__name__}: {error}".strip().splitlines()[0]
        HF_SKIP = f"transformers {transformers.__version__} lacks the cache API this appendix uses ({problem}): the appendix is skipped."


def say_skipped():
    if HF_SKIP.startswith("transformers is not installed"):
        say(en=HF_SKIP, zh="未安装 transformers：跳过本附录。")
    else:
        say(en=HF_SKIP, zh=f"所装的 transformers 缺少本附录所用的缓存接口，跳过本附录：`{HF_SKIP}`")


if HF_SKIP is None:
    say(en=f"transformers {transformers.__version__}: our FP64 decoder copied into `GPT2LMHeadModel`.",
        zh=f"transformers {transformers.__version__}：已把我们的 FP64 解码器复制进 `GPT2LMHeadModel`。")
else:
    say_skipped()

# %% [markdown] lang="en"
# One greedy loop serves both comparisons. It passes GPT-2 the attention mask of the whole sequence so
# far, explicit `position_ids` and `cache_position` (the slots to write), exactly as
# `GPT2LMHeadModel.generate` does internally. We drive the loop by hand because `generate` returns its
# logits in FP32, too coarse for an FP64 comparison; its greedy tokens are checked as well.
#
# A trap shows that the comparison can fail: the same loop **without `position_ids`**. GPT-2 then
# numbers the slots from `cache_position`, padding included: the `arange` mistake of section 4, made
# this time with a library. It must be caught.

# %% [markdown] lang="zh"
# 两项比较共用一个贪心生成循环。它把目前为止整个序列的注意力掩码、显式的 `position_ids` 和 `cache_position`（要写入的槽位）交给 GPT-2，与 `GPT2LMHeadModel.generate` 内部的做法完全一样。之所以手写这个循环，是因为 `generate` 返回的 logits 是 FP32，用来做 FP64 比较太粗；它贪心生成的 token 我们也一并核对。
#
# 一个陷阱用来说明这项比较能够失败：同样的循环，但**不传 `position_ids`**。这时 GPT-2 按 `cache_position` 给槽位编号，填充位也算在内：这正是第 4 节 `arange` 的错误，只不过这次是在调用库时犯的。它必须被查出来。

# %%
@torch.inference_mode()
def gpt2_padded_loop(gpt2, prompts, cache, steps=DECODE_STEPS, pass_positions=True):
    ids, key_mask = left_pad(prompts)
    mask = key_mask.long()
    position_ids = (lambda m, n: padded_positions(m, n)) if pass_positions else (lambda m, n: None)
    logits = gpt2(input_ids=ids, attention_mask=mask, position_ids=position_ids(key_mask, ids.shape[1]),
                  past_key_values=cache, use_cache=True, cache_position=torch.arange(ids.shape[1])).logits
    rows, tokens = [[logits[r, key_mask[r]]] for r in range(len(prompts))], [[] for _ in prompts]
    for step in range(steps + 1):
        next_ids = logits[:, -1].argmax(dim=-1)
        for r in range(len(prompts)):
            tokens[r].append(int(next_ids[r]))
        if step == steps:
            break
        mask = torch.cat((mask, torch.ones(len(prompts), 1, dtype=mask.dtype)), dim=1)
        logits = gpt2(input_ids=next_ids[:, None], attention_mask=mask, position_ids=position_ids(mask.bool(), 1),
                      past_key_values=cache, use_cache=True, cache_position=torch.tensor([mask.shape[1] - 1])).logits
        for r in range(len(prompts)):
            rows[r].append(logits[r])
    return {"logits": [torch.cat(r) for r in rows], "tokens": tokens}


if HF_SKIP is None:
    ours64 = generate_padded(model64, PROMPTS)
    static64 = STATIC["fp64"]["store"]
    hf_dynamic = gpt2_padded_loop(gpt2, PROMPTS, DynamicCache(config=gpt2.config))
    hf_no_positions = gpt2_padded_loop(gpt2, PROMPTS, DynamicCache(config=gpt2.config), pass_positions=False)
    hf_static_cache = StaticCache(config=gpt2.config, max_cache_len=T_MAX)
    hf_static = gpt2_padded_loop(gpt2, PROMPTS, hf_static_cache)
    with torch.inference_mode():
        ids, key_mask = left_pad(PROMPTS)
        generated = gpt2.generate(input_ids=ids, attention_mask=key_mask.long(), max_new_tokens=DECODE_STEPS + 1,
                                  do_sample=False, pad_token_id=PAD_ID)
    real = torch.cat((key_mask, torch.ones(len(PROMPTS), DECODE_STEPS, dtype=torch.bool)), dim=1)   # [B, T_MAX]
    kv_err = max(max_err(hf_layer.keys[real[:, None, :, None].expand_as(hf_layer.keys)],
                         ours_k[real[:, None, :, None].expand_as(ours_k)])
                 for hf_layer, ours_k in zip(hf_static_cache.layers, static64.k))
    kv_err = max(kv_err, max(max_err(hf_layer.values[real[:, None, :, None].expand_as(hf_layer.values)],
                                     ours_v[real[:, None, :, None].expand_as(ours_v)])
                             for hf_layer, ours_v in zip(hf_static_cache.layers, static64.v)))
    PEER = {
        "transformers": transformers.__version__,
        "padding": {"max_abs_logit_err": worst(max_err(a, b) for a, b in zip(hf_dynamic["logits"], ours64["logits"])),
                    "tokens_identical": hf_dynamic["tokens"] == ours64["tokens"],
                    "generate_tokens_identical": generated[:, ids.shape[1]:].tolist() == ours64["tokens"]},
        "static_cache": {"max_abs_logit_err": worst(max_err(a, b) for a, b in zip(hf_static["logits"], ours64["logits"])),
                         "tokens_identical": hf_static["tokens"] == ours64["tokens"],
                         "max_abs_kv_err_real_slots": kv_err,
                         "buffer_shape": list(hf_static_cache.layers[0].keys.shape)},
        "trap_no_position_ids": {"max_abs_logit_err": worst(max_err(a, b) for a, b in zip(hf_no_positions["logits"], ours64["logits"])),
                                 "detected": not all(torch.allclose(a, b, atol=HF_TOL, rtol=HF_TOL)
                                                     for a, b in zip(hf_no_positions["logits"], ours64["logits"]))},
    }
    say_table([["`attention_mask`, `DynamicCache`", f"{PEER['padding']['max_abs_logit_err']:.1e}", "-", str(PEER["padding"]["tokens_identical"])],
               ["`StaticCache`", f"{PEER['static_cache']['max_abs_logit_err']:.1e}", f"{kv_err:.1e}", str(PEER["static_cache"]["tokens_identical"])],
               ["`generate()`", "-", "-", str(PEER["padding"]["generate_tokens_identical"])],
               ["`position_ids=None`", f"{PEER['trap_no_position_ids']['max_abs_logit_err']:.1e}", "-", "-"]],
              en=["GPT-2 (FP64)", "max abs logit error vs ours", "max abs K/V error, real slots", "tokens identical"],
              zh=["GPT-2（FP64）", "与我们相比的最大 logits 绝对误差", "真实槽位上 K/V 的最大绝对误差", "token 一致"])
    assert PEER["padding"]["max_abs_logit_err"] <= HF_TOL and PEER["padding"]["tokens_identical"]
    assert PEER["padding"]["generate_tokens_identical"]
    assert PEER["static_cache"]["max_abs_logit_err"] <= HF_TOL and PEER["static_cache"]["tokens_identical"]
    assert kv_err <= HF_TOL and PEER["static_cache"]["buffer_shape"] == list(static64.k[0].shape)
    # [en] The comparison can fail.
    # [zh] 这项比较是能够失败的。
    assert PEER["trap_no_position_ids"]["detected"]
else:
    PEER = {"skipped": HF_SKIP}
    say_skipped()

# %% [markdown] lang="en"
# The appendix adds its block, `peer`, to `results.json` (rewritten atomically: a temporary file, then
# `os.replace`).

# %% [markdown] lang="zh"
# 附录把它自己的部分 `peer` 追加到 `results.json` 中（以原子方式写回：先写临时文件，再 `os.replace`）。

# %%
import os

saved = json.loads(RESULTS_JSON.read_text(encoding="utf-8"))
saved["peer"] = PEER
temporary = RESULTS_JSON.with_suffix(".json.tmp")
temporary.write_text(json.dumps(saved, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
os.replace(temporary, RESULTS_JSON)
assert json.loads(RESULTS_JSON.read_text(encoding="utf-8"))["peer"] == json.loads(json.dumps(PEER))
