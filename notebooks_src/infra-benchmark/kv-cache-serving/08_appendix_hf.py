# %% [markdown] lang="en"
# ## 10. Optional: padding and the static cache against Hugging Face
#
# Section 9 put our decoder into `GPT2LMHeadModel` and showed that the two compute the same function,
# with and without a cache. Two mechanisms of this notebook also exist in Hugging Face `transformers`,
# written by other people: left-padded batches driven by an `attention_mask`, and a preallocated
# `StaticCache`. With the same FP64 model `gpt2_64` and the same tolerance, $10^{-10}$:
#
# * **padding**: GPT-2 runs the padded batch of section 4 through prefill and 20 greedy steps, with
#   the batch's `attention_mask` and positions `cumsum - 1`; its logits at real positions and its
#   tokens must equal ours;
# * **static cache**: the same loop over a `StaticCache` of `T_max = 32`; logits and tokens must equal
#   ours, and the K and V in its buffers, at the real slots, must equal those in our static buffers.
#
# First, the difference section 5 described: `StaticCache` hands attention its whole buffer at every
# step, not the valid prefix as our store does. A probe with room for 4 positions receives 2 from a
# prefill, then one more through the cache's own `update`, a K/V filled with the marker value 7. The
# buffer starts as zeros, so a slot that holds anything but zeros has been written: the cell lists, slot
# by slot, what the first key holds and who wrote it. What `update` returns must be all 4 slots, the
# unwritten one included, which the attention mask then hides.
#
# Like section 9 this needs `transformers` (written against 5.23.0); without it, or with a version
# whose `StaticCache` differs, the cells say so in one sentence and do nothing else.

# %% [markdown] lang="zh"
# ## 10. 可选：用 Hugging Face 检验填充和静态缓存
#
# 第 9 节把我们的解码器放进了 `GPT2LMHeadModel`，并表明无论用不用缓存，两者计算的都是同一个函数。本笔记本中有两种机制在 Hugging Face `transformers` 里也有实现，而且出自别人之手：由 `attention_mask` 驱动的左填充 batch，以及预分配的 `StaticCache`。沿用同一个 FP64 模型 `gpt2_64` 和同样的容差 $10^{-10}$：
#
# * **填充**：GPT-2 用 batch 的 `attention_mask` 和位置 `cumsum - 1`，对第 4 节填充后的 batch 做预填充和 20 步贪心生成；它在真实位置上的 logits 和生成的 token 都必须与我们的相同；
# * **静态缓存**：同样的循环，改用 `T_max = 32` 的 `StaticCache`；logits 和 token 必须与我们的相同，而且它缓冲区里真实槽位上的 K 和 V，也必须与我们静态缓冲区里的相同。
#
# 先看第 5 节说过的那个区别：`StaticCache` 每一步都把整个缓冲区交给注意力，而不是像我们的存储对象那样只交出有效前缀。一个能容纳 4 个位置的探针先通过预填充接收 2 个位置，再通过缓存自己的 `update` 接收 1 个位置，这个位置的 K/V 全部填成标记值 7。缓冲区一开始全是 0，所以凡是不全为 0 的槽位都已被写入：单元格逐个槽位列出第一个键的值以及是谁写入的。`update` 返回的必须是全部 4 个槽位，包括尚未写入的那一个，再由注意力掩码把它遮住。
#
# 与第 9 节一样，这里需要 `transformers`（按 5.23.0 版编写）。如果没有安装它，或者所装版本的 `StaticCache` 接口不同，下面的单元格只用一句话说明原因，不做别的事。

# %%
HF_TOL = TOLERANCE[torch.float64]
HF_SKIP = None if HAVE_TRANSFORMERS else {"reason": "transformers_missing"}
if HAVE_TRANSFORMERS:
    try:
        from transformers import StaticCache
        probe = StaticCache(config=gpt2_64.config, max_cache_len=4)
        with torch.inference_mode():
            gpt2_64(input_ids=torch.zeros(1, 2, dtype=torch.long), past_key_values=probe, use_cache=True)
            marker = torch.full((1, cfg.heads, 1, cfg.head_dim), 7.0, dtype=torch.float64)
            returned_k, _ = probe.update(marker, marker, 0)
        if tuple(probe.layers[0].keys.shape) != (1, cfg.heads, 4, cfg.head_dim):
            raise ValueError(f"probe.layers[0].keys.shape == {tuple(probe.layers[0].keys.shape)}")
    except Exception as error:
        # [en] Any failure: another StaticCache API than this section uses.
        # [zh] 任何失败都说明：StaticCache 的接口与本节所用的不同。
        HF_SKIP = {"reason": "static_cache_api", "error": f"{type(error).__name__}: {error}".strip().splitlines()[0]}

if HF_SKIP is None:
    probe_keys = probe.layers[0].keys[0]                                  # [H, 4, Dh]
    written = [bool(probe_keys[:, slot].ne(0).any()) for slot in range(4)]
    writers = ["`gpt2_64(...)`", "`gpt2_64(...)`", "`probe.update(...)`", "-"]
    say_table([[str(slot), f"{float(probe_keys[0, slot, 0]):.3f}", f"`{w}`", writer] for slot, (w, writer) in enumerate(zip(written, writers))],
              en=["slot", "first key, first number", "written", "by"], zh=["槽位", "第一个键的第一个数", "已写入", "写入者"])
    say(en=f"transformers {transformers.__version__}: after slots 0 and 1 (prefill) and 2 (`update`) were written, `update` returned "
           f"keys of shape `{list(returned_k.shape)}`: the whole buffer, the unwritten slot 3 included.",
        zh=f"transformers {transformers.__version__}：槽位 0、1（预填充）和 2（`update`）写入之后，`update` 返回的 K 形状为 "
           f"`{list(returned_k.shape)}`：整个缓冲区，包括尚未写入的槽位 3。")
    assert returned_k.shape[-2] == 4 and written == [True, True, True, False] and bool(probe_keys[:, 2].eq(7).all())
elif HF_SKIP["reason"] == "transformers_missing":
    say(en="transformers is not installed: this section is skipped.", zh="未安装 transformers：跳过本节。")
else:
    say(en=f"transformers {transformers.__version__} lacks the `StaticCache` API this section uses, so the section is skipped "
           f"(`{HF_SKIP['error']}`).",
        zh=f"所装的 transformers {transformers.__version__} 缺少本节所用的 `StaticCache` 接口，跳过本节（`{HF_SKIP['error']}`）。")

# %% [markdown] lang="en"
# One greedy loop serves both comparisons. It passes GPT-2 the attention mask of the whole sequence so
# far and explicit `position_ids`, computed as `generate` computes them in transformers 5.23.0
# (`_prepare_position_ids_for_generation` in `generation/utils.py`): `cumsum - 1` over the attention
# mask, padding slots at position 0 (section 4 showed that the padding slots' position cannot matter),
# and after each step the last position plus one. Which slot a new K/V goes to is the cache's own
# business, not an argument: `DynamicCache` appends, and `StaticCache` keeps a counter of the slots it has
# written, `cumulative_length`, and writes the next ones (`StaticLayer.update` in `cache_utils.py`). We
# drive the loop by hand because `generate` hands back its logits in FP32 even for an FP64 model (the cell
# checks this), too coarse for an FP64 comparison; its greedy tokens are checked as well.
#
# A trap shows that the comparison can fail: the same loop **without `position_ids`**. `GPT2Model.forward`
# (`models/gpt2/modeling_gpt2.py`) then numbers the new tokens `arange(T_new) + cache.get_seq_length()`:
# from the number of slots the cache holds, padding slots included, so a left-padded row gets positions
# too large by its padding. That is the `arange` mistake of section 4, made this time with a library. It
# must be caught, and if that is the mechanism, GPT-2's trap must also agree, within $10^{-10}$, with our
# decoder run with section 4's broken `arange_positions`.
#
# The next cell (folded; its table stays in view) runs the three GPT-2 loops, `generate` and our `arange_positions` run, and
# checks, in one line: with padding and with `StaticCache`, GPT-2's logits within $10^{-10}$ of ours and
# its tokens identical (those of `generate` too), the K/V in `StaticCache`'s real slots within $10^{-10}$
# of ours, and the trap caught, its logits within $10^{-10}$ of our `arange_positions` run.

# %% [markdown] lang="zh"
# 两项比较共用一个贪心生成循环。它把目前为止整个序列的注意力掩码和显式的 `position_ids` 交给 GPT-2。`position_ids` 的算法与 transformers 5.23.0 中 `generate` 的相同（`generation/utils.py` 里的 `_prepare_position_ids_for_generation`）：由注意力掩码按 `cumsum - 1` 算出，填充位取位置 0（第 4 节已经表明填充位取什么位置都没有影响），此后每一步取上一个位置加 1。新的 K/V 写进哪个槽位由缓存自己决定，不由参数指定：`DynamicCache` 接在末尾，`StaticCache` 用计数器 `cumulative_length` 记下已写入的槽位数，接着往后写（`cache_utils.py` 里的 `StaticLayer.update`）。之所以手写这个循环，是因为即使模型是 FP64，`generate` 返回的 logits 也是 FP32（单元格会核对这一点），用来做 FP64 比较太粗；它贪心生成的 token 我们也一并核对。
#
# 再用一个陷阱说明这项比较确实能失败：同样的循环，但**不传 `position_ids`**。这时 `GPT2Model.forward`（`models/gpt2/modeling_gpt2.py`）把新 token 的位置取为 `arange(T_new) + cache.get_seq_length()`，即从缓存已有的槽位数接着编号，填充槽位也算在内，于是左填充的行得到的位置比应有的大，多出的正好是它的填充长度。这正是第 4 节 `arange` 的错误，只不过这次是在调用库时犯的。它必须被查出来；而且如果机制确实如此，GPT-2 的这个陷阱还必须与我们的解码器换用第 4 节故意写错的 `arange_positions` 后的结果相差不超过 $10^{-10}$。
#
# 下一个单元格（代码默认折叠，表格照常显示）运行 GPT-2 的三个循环、`generate` 以及我们 `arange_positions` 的那次运行。概括地说，它核对：无论是填充还是 `StaticCache`，GPT-2 的 logits 与我们的相差都不超过 $10^{-10}$，token 完全相同（`generate` 的 token 也是）；`StaticCache` 真实槽位上的 K/V 与我们的相差不超过 $10^{-10}$；陷阱被查出，而且它的 logits 与我们 `arange_positions` 那次运行的相差不超过 $10^{-10}$。

# %%
@torch.inference_mode()
def gpt2_padded_loop(gpt2, prompts, cache, steps=DECODE_STEPS, pass_positions=True):
    ids, key_mask = left_pad(prompts)
    mask = key_mask.long()
    position_ids = (lambda m, n: padded_positions(m, n)) if pass_positions else (lambda m, n: None)
    logits = gpt2(input_ids=ids, attention_mask=mask, position_ids=position_ids(key_mask, ids.shape[1]),
                  past_key_values=cache, use_cache=True).logits
    rows, tokens = [[logits[r, key_mask[r]]] for r in range(len(prompts))], [[] for _ in prompts]
    for step in range(steps + 1):
        next_ids = logits[:, -1].argmax(dim=-1)
        for r in range(len(prompts)):
            tokens[r].append(int(next_ids[r]))
        if step == steps:
            break
        mask = torch.cat((mask, torch.ones(len(prompts), 1, dtype=mask.dtype)), dim=1)
        logits = gpt2(input_ids=next_ids[:, None], attention_mask=mask, position_ids=position_ids(mask.bool(), 1),
                      past_key_values=cache, use_cache=True).logits
        for r in range(len(prompts)):
            rows[r].append(logits[r])
    return {"logits": [torch.cat(r) for r in rows], "tokens": tokens}

# %% tags=["hide-input"]
if HF_SKIP is None:
    ours_run = generate_padded(ours64, PROMPTS)
    ours_arange = generate_padded(ours64, PROMPTS, rules=dict(CORRECT_RULES, positions=arange_positions))
    static64 = STATIC["fp64"]["store"]
    hf_dynamic = gpt2_padded_loop(gpt2_64, PROMPTS, DynamicCache(config=gpt2_64.config))
    hf_no_positions = gpt2_padded_loop(gpt2_64, PROMPTS, DynamicCache(config=gpt2_64.config), pass_positions=False)
    hf_static_cache = StaticCache(config=gpt2_64.config, max_cache_len=T_MAX)
    hf_static = gpt2_padded_loop(gpt2_64, PROMPTS, hf_static_cache)
    with torch.inference_mode():
        ids, key_mask = left_pad(PROMPTS)
        generated = gpt2_64.generate(input_ids=ids, attention_mask=key_mask.long(), max_new_tokens=DECODE_STEPS + 1,
                                     do_sample=False, pad_token_id=PAD_ID, output_logits=True, return_dict_in_generate=True)
    assert generated.logits[0].dtype == torch.float32 and gpt2_64.lm_head.weight.dtype == torch.float64
    generated = generated.sequences
    real = torch.cat((key_mask, torch.ones(len(PROMPTS), DECODE_STEPS, dtype=torch.bool)), dim=1)[:, None, :, None]   # [B, 1, T_MAX, 1]
    buffers = [(hf_layer.keys, k) for hf_layer, k in zip(hf_static_cache.layers, static64.k)]
    buffers += [(hf_layer.values, v) for hf_layer, v in zip(hf_static_cache.layers, static64.v)]
    kv_err = float(torch.tensor([max_abs_err(hf[real.expand_as(hf)], ours[real.expand_as(ours)]) for hf, ours in buffers]).max())
    versus_dynamic = compare(hf_dynamic["logits"], ours_run["logits"])
    versus_static = compare(hf_static["logits"], ours_run["logits"])
    versus_trap = compare(hf_no_positions["logits"], ours_run["logits"])
    trap_versus_arange = compare(hf_no_positions["logits"], ours_arange["logits"])
    PEER = {
        "transformers": transformers.__version__,
        "padding": {"max_abs_logit_err": versus_dynamic["max_abs_logit_err"],
                    "tokens_identical": hf_dynamic["tokens"] == ours_run["tokens"],
                    "generate_tokens_identical": generated[:, ids.shape[1]:].tolist() == ours_run["tokens"]},
        "static_cache": {"max_abs_logit_err": versus_static["max_abs_logit_err"],
                         "tokens_identical": hf_static["tokens"] == ours_run["tokens"],
                         "max_abs_kv_err_real_slots": kv_err,
                         "buffer_shape": list(hf_static_cache.layers[0].keys.shape)},
        "trap_no_position_ids": {"max_abs_logit_err": versus_trap["max_abs_logit_err"], "detected": not versus_trap["close"],
                                 "max_abs_logit_err_vs_our_arange": trap_versus_arange["max_abs_logit_err"],
                                 "tokens_identical_to_our_arange": hf_no_positions["tokens"] == ours_arange["tokens"]},
    }
    say_table([["`attention_mask`, `DynamicCache`", f"{PEER['padding']['max_abs_logit_err']:.1e}", "-", f"`{PEER['padding']['tokens_identical']}`"],
               ["`StaticCache`", f"{PEER['static_cache']['max_abs_logit_err']:.1e}", f"{kv_err:.1e}", f"`{PEER['static_cache']['tokens_identical']}`"],
               ["`generate()`", "-", "-", f"`{PEER['padding']['generate_tokens_identical']}`"],
               ["`position_ids=None`", f"{PEER['trap_no_position_ids']['max_abs_logit_err']:.1e}", "-", "-"],
               ["`position_ids=None` / `arange_positions`", f"{trap_versus_arange['max_abs_logit_err']:.1e}", "-",
                f"`{PEER['trap_no_position_ids']['tokens_identical_to_our_arange']}`"]],
              en=["GPT-2 (FP64)", "max abs logit error vs ours", "max abs K/V error, real slots", "tokens identical"],
              zh=["GPT-2（FP64）", "与我们相比 logits 的最大绝对误差", "真实槽位上 K/V 的最大绝对误差", "token 一致"])
    padding_agrees = PEER["padding"]["max_abs_logit_err"] <= HF_TOL and PEER["padding"]["tokens_identical"]
    assert padding_agrees and PEER["padding"]["generate_tokens_identical"]
    static_agrees = PEER["static_cache"]["max_abs_logit_err"] <= HF_TOL and PEER["static_cache"]["tokens_identical"]
    assert static_agrees and kv_err <= HF_TOL and PEER["static_cache"]["buffer_shape"] == list(static64.k[0].shape)
    # [en] The comparison can fail.
    # [zh] 这项比较确实能失败。
    assert PEER["trap_no_position_ids"]["detected"]
    # [en] The trap is section 4's `arange` mistake: it agrees with our decoder run with `arange_positions`.
    # [zh] 这个陷阱就是第 4 节的 `arange` 错误：它与我们的解码器换用 `arange_positions` 后的结果一致。
    assert trap_versus_arange["close"] and PEER["trap_no_position_ids"]["tokens_identical_to_our_arange"]
else:
    PEER = {"skipped": HF_SKIP}
