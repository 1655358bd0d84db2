# %% [markdown] lang="en"
# ## 11. Optional: speculative decoding against Hugging Face's assisted generation
#
# Section 6 checked our speculative loop against our own plain loop. Hugging Face `transformers` has its own
# implementation, written by other people: `generate(..., assistant_model=draft)`, called assisted
# generation. With greedy decoding it follows the same rule as ours: the draft proposes, the target verifies
# all candidates in one call and keeps the agreeing prefix plus its own next token, and the target's cache is
# rolled back with `crop` (`generation/utils.py`, `_assisted_decoding`). We load the target (our two-layer decoder) and the draft (its first layer) into
# two `GPT2LMHeadModel`s with the mapping of section 10, in FP64, and set the draft to propose exactly $k$
# tokens per round (`num_assistant_tokens = k`, schedule `"constant"`, and `assistant_confidence_threshold = 0`,
# which turns off the early stop on an unsure draft). For every $k$ of section 6 and every prompt, three things
# must agree with our loop run in FP64: the tokens, the number of target calls (counted with a forward hook),
# and the target logits that chose each token. The library hands these logits back in FP32 (its assisted loop
# casts them), so they are compared with ours rounded to FP32, within the FP32 tolerance. As a control, the
# referee must reject the tokens of section 6's loop without the target's rollback.
#
# This section needs `transformers` (written against 5.23.0); without it, it says so in one sentence.

# %% [markdown] lang="zh"
# ## 11. 可选：用 Hugging Face 的辅助生成检验投机解码
#
# 第 6 节拿我们的投机解码循环与我们自己的普通循环比较。Hugging Face `transformers` 有自己的实现，出自别人之手：`generate(..., assistant_model=draft)`，称为辅助生成（assisted generation）。在贪心解码下，它遵循与我们相同的规则：草稿模型提出候选，目标模型在一次调用中验证全部候选，保留一致的前缀再加上自己的下一个 token，并用 `crop` 回滚目标模型的缓存（`generation/utils.py` 中的 `_assisted_decoding`）。我们用第 10 节的映射，把目标模型（我们的两层解码器）和草稿模型（它的第一层）分别装进两个 `GPT2LMHeadModel`，使用 FP64，并让草稿模型每轮恰好提出 $k$ 个 token（`num_assistant_tokens = k`，调度方式为 `"constant"`，再设 `assistant_confidence_threshold = 0`，关掉草稿模型没把握时提前停止的机制）。对第 6 节的每个 $k$ 和每个提示，有三样东西必须与我们在 FP64 下运行的循环一致：生成的 token、目标模型的调用次数（用前向钩子统计），以及选出每个 token 的目标模型 logits。这个库返回的 logits 是 FP32 的（它的辅助生成循环做了类型转换），所以拿我们的 logits 舍入到 FP32 之后与之比较，容差也取 FP32 的容差。作为负对照，裁判必须判定第 6 节中不回滚目标模型缓存的那个循环给出的 token 不一致。
#
# 本节需要 `transformers`（按 5.23.0 版编写）；没有安装时，只用一句话说明。

# %%
@contextmanager
def quiet_transformers():
    # [en] Assisted generation passes both a generation config and loose arguments to the draft's generate(),
    # [en] and transformers logs a deprecation notice about its own call; silence its logger meanwhile.
    # [zh] 辅助生成在调用草稿模型的 generate() 时，同时传入了生成配置和零散参数，transformers 会为它自己的
    # [zh] 这次调用记录一条弃用提示；在此期间让它的日志保持安静。
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)


@torch.inference_mode()
def assisted_generate(gpt2_target, gpt2_draft, prompt, k) -> dict:
    gpt2_draft.generation_config.num_assistant_tokens = k
    gpt2_draft.generation_config.num_assistant_tokens_schedule = "constant"
    gpt2_draft.generation_config.assistant_confidence_threshold = 0.0
    calls = []
    hook = gpt2_target.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        ids = torch.tensor([prompt])
        with quiet_transformers():
            out = gpt2_target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=gpt2_draft, do_sample=False,
                                       max_new_tokens=SPEC_NEW, return_dict_in_generate=True, output_logits=True)
    finally:
        hook.remove()
    return {"tokens": out.sequences[0, len(prompt):].tolist(), "logits": torch.cat(out.logits), "target_calls": len(calls)}


if HAVE_TRANSFORMERS:
    draft64 = early_exit_draft(ours64)
    gpt2_draft64 = build_gpt2(draft64)
    ASSISTED = []
    for k in SPEC_KS:
        rows = []
        for prompt, (_, plain_tokens) in zip(SPEC_PROMPTS, PLAIN):
            hf, ours = assisted_generate(gpt2_64, gpt2_draft64, prompt, k), Speculator(ours64, draft64, k).generate(prompt, SPEC_NEW)
            rows.append({"tokens": hf["tokens"] == ours["tokens"] == plain_tokens, "calls": (hf["target_calls"], ours["target_calls"]),
                         "error": max_abs_err(hf["logits"], ours["logits"].float()), "close": close(hf["logits"], ours["logits"].float())})
        ASSISTED.append({"k": k, "tokens_identical": all(r["tokens"] for r in rows),
                         "target_calls_hf": sum(r["calls"][0] for r in rows), "target_calls_ours": sum(r["calls"][1] for r in rows),
                         "max_abs_logit_err": max(r["error"] for r in rows), "logits_close": all(r["close"] for r in rows)})
    hf_tokens = [assisted_generate(gpt2_64, gpt2_draft64, prompt, 4)["tokens"] for prompt in SPEC_PROMPTS]
    unrolled = [NoTargetRollback(model, draft, 4).generate(prompt, SPEC_NEW)["tokens"] for prompt in SPEC_PROMPTS]
    ASSISTED_CONTROL = {"caught": hf_tokens != unrolled}
    say_table([[str(r["k"]), f"{r['target_calls_hf']} / {r['target_calls_ours']}", f"{r['max_abs_logit_err']:.1e}"] for r in ASSISTED],
              en=["k", "target calls, Hugging Face / ours", "max abs logit error (fp32)"],
              zh=["$k$", "目标模型调用次数（Hugging Face / 我们）", "logits 的最大绝对误差（FP32）"])
    assert all(r["tokens_identical"] and r["target_calls_hf"] == r["target_calls_ours"] and r["logits_close"] for r in ASSISTED)
    assert ASSISTED_CONTROL["caught"]
    worst = max(r["max_abs_logit_err"] for r in ASSISTED)
    say(en=f"Hugging Face's assisted generation agrees with our loop for every $k$: same tokens, same number of target calls, logits "
           + ("bit-identical (largest absolute error 0)" if worst == 0 else f"within {worst:.1e}")
           + ". The referee rejects the tokens of the loop without rollback: the control is caught.",
        zh="对每个 $k$，Hugging Face 的辅助生成都与我们的循环一致：token 相同，目标模型调用次数相同，"
           + ("logits 逐比特相同（最大绝对误差为 0）" if worst == 0 else f"logits 的最大绝对误差不超过 {worst:.1e}")
           + "。裁判把不回滚缓存的循环生成的 token 判为不一致：负对照已查出。")
else:
    ASSISTED, ASSISTED_CONTROL = None, None
    say(en="The comparison with assisted generation is skipped, for the reason given in section 10.",
        zh="跳过与辅助生成的比较，原因见第 10 节。")
