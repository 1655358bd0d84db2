# %% [markdown] lang="en"
# ## 9. Timing against the library, same weights
#
# Finally the two implementations race on the same job, the cached decoding window that the main
# notebook times at its longest prompt: after a 256-token prompt, 16 predetermined tokens are
# consumed one per call, and the logits are returned after every token. Both models hold the FP32
# weights of section 3 and run on one thread: `WARMUPS` warm-up rounds and `REPEATS` measured rounds
# (3 and 15, or 1 and 3 with `QUICK = True`), the order of the two contestants rotated every round,
# `time.perf_counter_ns`, and the median (p50) reported.
#
# Every round starts both models from the same prefilled prompt, prefilled once before the race. Our
# decoder simply starts from the prefix list again, since no call writes into it. The library's
# `DynamicCache` object is extended by every round, so, as section 8 showed, each round starts from a
# deep copy of the prefix cache, made outside the timed window. Before timing, the cell checks that the
# two produce the same logits within the FP32 tolerance 1e-5. Because the rounds are built differently
# (two contestants instead of three paths, another token stream), our p50 here is not necessarily the
# main notebook's cached p50 for the same job: compare the two implementations within this table, not
# across notebooks.
#
# This compares two small implementations of the same arithmetic, each with its own per-call overhead.
# It says nothing about how either would fare at realistic sizes, and nothing is asserted about it.

# %% [markdown] lang="zh"
# ## 9. 与库比速度：同一组权重
#
# 最后，让两种实现在同一个任务上比速度。这个任务就是主笔记本在最长提示（prompt）下计时的那个带缓存的解码窗口：在 256 个 token 的提示之后，每次调用送入一个预先确定的 token，共 16 个，每个 token 之后都返回 logits。两个模型都使用第 3 节的 FP32 权重，都只用一个线程：先做 `WARMUPS` 轮预热，再做 `REPEATS` 轮正式测量（分别为 3 和 15；`QUICK = True` 时为 1 和 3），每一轮轮换两者的先后顺序，用 `time.perf_counter_ns` 计时，报告中位数（p50）。
#
# 每一轮都让两个模型从同一个预填充好的提示出发，这个提示在比赛开始前只预填充一次。我们的解码器直接从前缀列表重新开始即可，因为任何调用都不会改写它。库的 `DynamicCache` 对象则每一轮都会被加长，所以按第 8 节的做法，每一轮都从前缀缓存的一份深拷贝出发，拷贝在计时窗口之外完成。正式计时之前，这个单元格先确认两者在 FP32 容差 1e-5 内给出相同的 logits。由于这里每一轮的构成与主笔记本不同（参赛的是两种实现而不是三条路径，token 序列也不同），我们自己的 p50 未必等于主笔记本中同一任务的缓存路径 p50：请只在这张表内比较两种实现，不要跨笔记本比较。
#
# 这里比较的是同一套运算的两个小规模实现，各有各的每次调用的固定开销。至于两者在实际规模下表现如何，这个比较说明不了什么，我们也不对此做任何断言。

# %%
PEER_PROMPT, CONTINUATION = 256, 16
WARMUPS, REPEATS = (1, 3) if QUICK else (3, 15)
PEER_PATHS = ("ours", "gpt2")


@torch.inference_mode()
def ours_continuation(model, cache, continuation):
    steps = []
    for t in range(continuation.shape[1]):
        logits, cache = model(continuation[:, t:t + 1], cache)
        steps.append(logits[:, -1])
    return torch.stack(steps, dim=1)


@torch.inference_mode()
def gpt2_continuation(gpt2, cache, continuation):
    steps = []
    for t in range(continuation.shape[1]):
        out = gpt2(input_ids=continuation[:, t:t + 1], past_key_values=cache, use_cache=True)
        steps.append(out.logits[:, -1])
    return torch.stack(steps, dim=1)


def percentile_summary(samples_ns):
    ms = np.array(samples_ns) / 1e6
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "samples": [round(float(x), 6) for x in ms]}


if HAVE_TRANSFORMERS:
    gpt2_32 = build_gpt2(model)
    assert torch.get_num_threads() == 1 and not model.training and not gpt2_32.training
    race_stream = torch.randint(0, cfg.vocab, (1, PEER_PROMPT + CONTINUATION),
                                generator=torch.Generator().manual_seed(SEED + 20))
    race_prompt, race_continuation = race_stream[:, :PEER_PROMPT], race_stream[:, PEER_PROMPT:]
    with torch.inference_mode():
        _, ours_prefix = model(race_prompt)
        ours_prefix_copy = [(k.clone(), v.clone()) for k, v in ours_prefix]
        gpt2_prefix = DynamicCache(config=gpt2_32.config)
        gpt2_32(input_ids=race_prompt, past_key_values=gpt2_prefix, use_cache=True)

    # [en] The same job with the same answers (untimed).
    # [zh] 同一个任务、同样的答案（不计时）。
    ours_steps = ours_continuation(model, ours_prefix, race_continuation)
    gpt2_steps = gpt2_continuation(gpt2_32, copy.deepcopy(gpt2_prefix), race_continuation)
    torch.testing.assert_close(gpt2_steps, ours_steps, atol=FP32_TOL, rtol=FP32_TOL)
    assert gpt2_prefix.get_seq_length() == ours_prefix[0][0].shape[2] == PEER_PROMPT

    starting_cache = {"ours": lambda: ours_prefix, "gpt2": lambda: copy.deepcopy(gpt2_prefix)}
    window = {"ours": lambda cache: ours_continuation(model, cache, race_continuation),
              "gpt2": lambda cache: gpt2_continuation(gpt2_32, cache, race_continuation)}
    race_samples = {path: [] for path in PEER_PATHS}
    for round_index in range(WARMUPS + REPEATS):
        shift = round_index % len(PEER_PATHS)
        for path in PEER_PATHS[shift:] + PEER_PATHS[:shift]:
            cache = starting_cache[path]()
            start = time.perf_counter_ns()
            window[path](cache)
            elapsed = time.perf_counter_ns() - start
            if round_index >= WARMUPS:
                race_samples[path].append(elapsed)
    assert all(len(samples) == REPEATS for samples in race_samples.values())
    # [en] No call wrote into our prefix cache: every round really started from the same prompt cache.
    # [zh] 没有任何调用往我们的前缀缓存里写数据：每一轮确实都从同一份提示缓存出发。
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(ours_prefix, ours_prefix_copy))
    assert gpt2_prefix.get_seq_length() == ours_prefix[0][0].shape[2] == PEER_PROMPT
    race_timing = {path: percentile_summary(samples) for path, samples in race_samples.items()}
    race_ratio = race_timing["gpt2"]["p50"] / race_timing["ours"]["p50"]

    say_table([[f"`{name}`", f"{race_timing[path]['p50']:.3f}", f"{race_timing[path]['p95']:.3f}"]
               for path, name in [("ours", "CacheDecoder"), ("gpt2", "GPT2LMHeadModel")]],
              en=["model", "p50 (ms)", "p95 (ms)"], zh=["模型", "p50（毫秒）", "p95（毫秒）"])
    say(en=f"{CONTINUATION} cached steps after a {PEER_PROMPT}-token prompt; FP32, 1 thread, {WARMUPS} warm-up "
           f"and {REPEATS} measured rounds, order rotated. p50 ratio, `GPT2LMHeadModel` / ours: {race_ratio:.2f}.",
        zh=f"在 {PEER_PROMPT} 个 token 的提示之后，带缓存逐个处理 {CONTINUATION} 个 token；FP32，单线程，"
           f"{WARMUPS} 轮预热、{REPEATS} 轮测量，轮换顺序。p50 之比（`GPT2LMHeadModel` / 我们的）：{race_ratio:.2f}。")
