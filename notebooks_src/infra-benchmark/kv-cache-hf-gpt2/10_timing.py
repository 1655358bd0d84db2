# %% [markdown] lang="en"
# ## 10. Timing against the library, same weights
#
# The two implementations compute the same numbers; do they take the same time? They race on one job:
# after a 256-token prompt, 16 predetermined tokens are consumed one per call (16 decode steps), and
# the logits are returned after every token. Both models hold the FP32 weights of section 3 and run on
# one thread: `WARMUPS` warm-up rounds and `REPEATS` measured rounds (5 and 41, or 1 and 5 with
# `QUICK = True`), the order of the two contestants rotated every round, timed with
# `time.perf_counter_ns`, the median (p50) and the 95th percentile (p95) reported.
#
# The first cell defines the two loops (one call per token, logits kept) and the percentile summary.
# The second builds the FP32 GPT-2, prefills the prompt once on both sides and checks with `close` that the
# two loops give the same logits within the FP32 tolerance. The third runs the race: our decoder restarts every
# round from its prefix list, which no call writes into; the library's `DynamicCache` grows with every
# call, so, as section 9 showed, each of its rounds starts from a deep copy of the prefix cache, made
# outside the timed window. The fourth, folded, prints the table.

# %% [markdown] lang="zh"
# ## 10. 与库比速度：同一组权重
#
# 两种实现算出的数相同，花的时间也一样吗？让它们在同一个任务上比一比：在 256 个 token 的提示之后，每次调用送入一个预先确定的 token，共 16 个（即 16 个解码步），每个 token 之后都返回 logits。两个模型都使用第 3 节的 FP32 权重，都只用一个线程：先做 `WARMUPS` 轮预热，再做 `REPEATS` 轮正式测量（分别为 5 和 41；`QUICK = True` 时为 1 和 5），每一轮轮换两者的先后顺序，用 `time.perf_counter_ns` 计时，报告中位数（p50）和第 95 百分位数（p95）。
#
# 第一个单元格定义两个循环（每个 token 调用一次，保留 logits）和百分位数汇总。第二个单元格构建 FP32 的 GPT-2，在两边各预填充一次提示，并用 `close` 确认两个循环在 FP32 容差内给出相同的 logits。第三个单元格进行比赛：我们的解码器每一轮都从前缀列表重新开始，任何调用都不会改写它；库的 `DynamicCache` 每调用一次就变长，所以按第 9 节的做法，它的每一轮都从前缀缓存的一份深拷贝出发，拷贝在计时窗口之外完成。第四个单元格（代码已折叠）打印结果表。

# %%
PEER_PROMPT, CONTINUATION = 256, 16
WARMUPS, REPEATS = (1, 5) if QUICK else (5, 41)
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

# %%
if HAVE_TRANSFORMERS:
    gpt2_32 = build_gpt2(model)
    race_stream = torch.randint(0, cfg.vocab, (1, PEER_PROMPT + CONTINUATION),
                                generator=torch.Generator().manual_seed(SEED + 20))
    race_prompt, race_continuation = race_stream[:, :PEER_PROMPT], race_stream[:, PEER_PROMPT:]
    with torch.inference_mode():
        _, ours_prefix = model(race_prompt)
        gpt2_prefix = DynamicCache(config=gpt2_32.config)
        gpt2_32(input_ids=race_prompt, past_key_values=gpt2_prefix, use_cache=True)

    # [en] The same job with the same answers (untimed).
    # [zh] 同一个任务、同样的答案（不计时）。
    ours_steps = ours_continuation(model, ours_prefix, race_continuation)
    gpt2_steps = gpt2_continuation(gpt2_32, copy.deepcopy(gpt2_prefix), race_continuation)
    assert close(gpt2_steps, ours_steps)

# %%
if HAVE_TRANSFORMERS:
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
    race_timing = {path: percentile_summary(samples) for path, samples in race_samples.items()}
    race_ratio = race_timing["gpt2"]["p50"] / race_timing["ours"]["p50"]

# %% tags=["hide-input"]
if HAVE_TRANSFORMERS:
    say_table([[f"`{name}`", f"{race_timing[path]['p50']:.3f}", f"{race_timing[path]['p95']:.3f}",
                f"{race_timing[path]['p50'] / CONTINUATION:.3f}"]
               for path, name in [("ours", "CacheDecoder"), ("gpt2", "GPT2LMHeadModel")]],
              en=["model", "16 steps, p50 (ms)", "16 steps, p95 (ms)", "per step, p50 / 16 (ms)"],
              zh=["模型", "16 步，p50（毫秒）", "16 步，p95（毫秒）", "每步，p50 / 16（毫秒）"])
    say(en=f"{CONTINUATION} cached steps after a {PEER_PROMPT}-token prompt; FP32, 1 thread, {WARMUPS} warm-up "
           f"and {REPEATS} measured rounds, order rotated. p50 ratio, `GPT2LMHeadModel` / ours: {race_ratio:.2f}.",
        zh=f"在 {PEER_PROMPT} 个 token 的提示之后，带缓存逐个处理 {CONTINUATION} 个 token；FP32，单线程，"
           f"{WARMUPS} 轮预热、{REPEATS} 轮测量，轮换顺序。p50 之比（`GPT2LMHeadModel` / 我们的）：{race_ratio:.2f}。")

# %% [markdown] lang="en"
# **The result.** On the machine that built this notebook, the 16 steps took {{run:race.ours_p50:.2f}} ms
# with our decoder and {{run:race.gpt2_p50:.2f}} ms with `GPT2LMHeadModel` (p50), about
# {{run:race.ours_step_ms:.2f}} ms and {{run:race.gpt2_step_ms:.2f}} ms per step: the library's time was
# {{run:race.ratio:.2f}} times ours. Rounds of one run already spread (p95 / p50: {{run:race.ours_spread:.2f}}
# for ours, {{run:race.gpt2_spread:.2f}} for GPT-2), and the factor can change on another machine, under another
# load or with another library version, so no assertion is made about it; the rest of this section
# explains what each step spends its time on instead.

# %% [markdown] lang="zh"
# **结果。** 在构建本笔记本的机器上，这 16 步用我们的解码器耗时 {{run:race.ours_p50:.2f}} 毫秒，用 `GPT2LMHeadModel` 耗时 {{run:race.gpt2_p50:.2f}} 毫秒（p50），折合每步约 {{run:race.ours_step_ms:.2f}} 毫秒和 {{run:race.gpt2_step_ms:.2f}} 毫秒：库所用的时间是我们的 {{run:race.ratio:.2f}} 倍。同一次运行的各轮之间本就有波动（p95 / p50：我们的为 {{run:race.ours_spread:.2f}}，GPT-2 为 {{run:race.gpt2_spread:.2f}}），而这个倍数换一台机器、换一种负载或换一个库版本都可能改变，所以这里不对它做断言；本节余下的部分转而解释每一步的时间花在了哪里。

# %% tags=["prose-values"]
{"race": {
    "ours_p50": race_timing["ours"]["p50"], "gpt2_p50": race_timing["gpt2"]["p50"], "ratio": race_ratio,
    "ours_step_ms": race_timing["ours"]["p50"] / CONTINUATION, "gpt2_step_ms": race_timing["gpt2"]["p50"] / CONTINUATION,
    "ours_spread": race_timing["ours"]["p95"] / race_timing["ours"]["p50"],
    "gpt2_spread": race_timing["gpt2"]["p95"] / race_timing["gpt2"]["p50"],
    "gap_step_ms": (race_timing["gpt2"]["p50"] - race_timing["ours"]["p50"]) / CONTINUATION,
}} if HAVE_TRANSFORMERS else {}
