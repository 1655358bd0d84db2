# %% [markdown] lang="en"
# ### 9.3 A whole generation: prefill, then decode
#
# A generation strings the windows together: one prefill over the prompt, then one decode step per new
# token. The cell runs the greedy loop of section 6 twice on one prompt of {{run:gen_time.prompt}} tokens,
# with the cache and without it, generating {{run:gen_time.tokens}} tokens (32 with `QUICK = True`), and
# reads the clock around every call of the model. It is one run after a short warm-up, not a benchmark.

# %% [markdown] lang="zh"
# ### 9.3 一次完整的生成：先预填充，再解码
#
# 一次生成把这些窗口串了起来：先对提示做一次预填充，然后每生成一个新 token 做一个解码步。下面的单元格在同一个 {{run:gen_time.prompt}} 个 token 的提示上把第 6 节的贪心循环运行两次，一次用缓存，一次不用，各生成 {{run:gen_time.tokens}} 个 token（`QUICK = True` 时为 32 个），并在每次调用模型的前后读取时钟。这只是短暂预热之后的单次运行，不是基准测试。

# %%
GEN_TIME_PROMPT = TIMING_STREAM[:, :max(PROMPTS)]                      # [1, 256]
GEN_TIME_TOKENS = 32 if QUICK else 128


# [en] The loop of greedy_generate, with the clock read around every call of the model:
# [en] returns the new tokens and (start, end) of each call in ms since the loop began.
# [zh] greedy_generate 的循环，在每次调用模型的前后读取时钟：返回新生成的 token，
# [zh] 以及每次调用的（开始，结束）时刻，单位为毫秒，从循环开始时算起。
@torch.inference_mode()
def timed_generation(model, prompt, new_tokens: int, use_cache: bool):
    ids, cache, step_input, calls = prompt, None, prompt, []
    origin = time.perf_counter_ns()
    for _ in range(new_tokens):
        begin = time.perf_counter_ns()
        if use_cache:
            logits, cache = model(step_input, cache)             # [B, T_new, vocab]
        else:
            logits, _ = model(ids)                               # [B, T, vocab]
        calls.append(((begin - origin) / 1e6, (time.perf_counter_ns() - origin) / 1e6))
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)     # [B, 1]
        ids = torch.cat((ids, next_id), dim=1)
        step_input = next_id
    return ids[:, prompt.shape[1]:], calls


for use_cache in (True, False):
    timed_generation(model, GEN_TIME_PROMPT, 8, use_cache)
GEN_TIME = {("cached" if use_cache else "full"): timed_generation(model, GEN_TIME_PROMPT, GEN_TIME_TOKENS, use_cache)[1]
            for use_cache in (True, False)}
decode_ms = [end - start for start, end in GEN_TIME["cached"][1:]]
say_table(
    [["`use_cache=True`", f"{GEN_TIME['cached'][0][1]:.2f}", f"{np.median(decode_ms):.3f}", f"{GEN_TIME['cached'][-1][1]:,.1f}"],
     ["`use_cache=False`", f"{GEN_TIME['full'][0][1]:.2f}",
      f"{np.median([end - start for start, end in GEN_TIME['full'][1:]]):.3f}", f"{GEN_TIME['full'][-1][1]:,.1f}"]],
    en=["loop", "first token, ms", "each later call, ms (median)", f"all {GEN_TIME_TOKENS} tokens, ms"],
    zh=["循环", "第一个 token（毫秒）", "之后每次调用（毫秒，中位数）", f"全部 {GEN_TIME_TOKENS} 个 token（毫秒）"],
)


# %% [markdown] lang="en"
# The figure (plotting code folded). Left, the first calls of both loops on one time axis, one bar per
# call: with the cache (top row) a wide blue prefill bar, then narrow green decode steps; without it
# (bottom row) every orange bar is a pass over the whole sequence. Right, the time until the $g$-th new
# token is ready: with the cache a straight line after the prefill; without it each token costs a pass
# over $P + g - 1$ positions, so the total bends upward (by the count of 8.1, at least quadratically, and
# cubically only beyond about {{run:gen_time.crossover}} positions; this run ends at
# {{run:gen_time.final_len}}).

# %% [markdown] lang="zh"
# 下面是图（绘图代码已折叠）。图中文字是英文。左图（the first calls of each loop (one bar per call)，“每个循环最初的若干次调用，每条横条是一次调用”）把两个循环最初的调用画在同一条时间轴上，横轴 ms since the loop began 是从循环开始算起的毫秒数：用缓存时（上面一行，with cache: prefill, then decode）先是一条宽的蓝色预填充横条，其后是窄的绿色解码步；不用缓存时（下面一行，without cache: full pass per token），每条橙色横条都是对整个序列的一次计算。右图（total time, prompt of {{run:gen_time.prompt}} tokens，“总时间，提示长 {{run:gen_time.prompt}} 个 token”）画的是第 $g$ 个新 token 就绪所需的总时间（横轴 new tokens generated g，纵轴 ms until token g is ready）：用缓存（with cache）时，预填充之后是一条直线；不用缓存（without cache）时，每个 token 都要把 $P + g - 1$ 个位置算一遍，所以总时间向上弯曲（按 8.1 的计数至少是平方增长，要超过约 {{run:gen_time.crossover}} 个位置才是立方增长；这次运行最后到达 {{run:gen_time.final_len}} 个位置）。总标题 one greedy generation, CPU, 1 thread, fp32 (prefill in blue, decode steps in green) 意为“一次贪心生成，CPU、单线程、FP32（预填充为蓝色，解码步为绿色）”。

# %% tags=["hide-input"]
fig, (ax_line, ax_total) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
shown_ms = GEN_TIME["cached"][min(12, GEN_TIME_TOKENS - 1)][1]
for row, (path, colors) in enumerate((("full", ("tab:orange", "tab:orange")), ("cached", ("tab:blue", "tab:green")))):
    bars = [(start, end - start) for start, end in GEN_TIME[path] if start < shown_ms]
    ax_line.broken_barh(bars, (row - 0.3, 0.6), facecolors=[colors[0]] + [colors[1]] * (len(bars) - 1), edgecolor="white")
ax_line.set_yticks([0, 1], ["without cache:\nfull pass per token", "with cache:\nprefill, then decode"])
ax_line.set_xlim(0, shown_ms)
ax_line.set_xlabel("ms since the loop began")
ax_line.set_title("the first calls of each loop (one bar per call)", fontsize=10)
tokens = np.arange(1, GEN_TIME_TOKENS + 1)
for path, color, label in (("cached", "tab:green", "with cache"), ("full", "tab:orange", "without cache")):
    ax_total.plot(tokens, [end for _, end in GEN_TIME[path]], color=color, label=label)
ax_total.set_xlabel("new tokens generated g")
ax_total.set_ylabel("ms until token g is ready")
ax_total.set_title(f"total time, prompt of {GEN_TIME_PROMPT.shape[1]} tokens", fontsize=10)
ax_total.grid(alpha=0.3)
ax_total.legend(fontsize=8)
fig.suptitle("one greedy generation, CPU, 1 thread, fp32 (prefill in blue, decode steps in green)", fontsize=10)
fig.tight_layout()
GENERATION_PNG = OUT / "generation.png"
fig.savefig(GENERATION_PNG, dpi=120)
plt.show()


# %% [markdown] lang="en"
# On this run, {{run:gen_time.tokens}} tokens took {{run:gen_time.cached_total_ms:,.0f}} ms with the cache
# and {{run:gen_time.full_total_ms:,.0f}} ms without it, {{run:gen_time.ratio:.1f}} times as long. With the
# cache the first token waited for the prefill ({{run:gen_time.cached_first_ms:.2f}} ms) and every later one
# for a decode step (median {{run:gen_time.decode_ms:.3f}} ms): the two waits serving systems call time to
# first token (TTFT) and inter-token latency (ITL), here for one sequence on one CPU thread.
#
# **The steep end of the orange curve is not the count.** Without the cache, the last 16 passes took
# {{run:gen_time.tail_over_head:.1f}} times as long as the first 16 (median against median), while their
# count grows only {{run:gen_time.tail_count_growth:.2f}}-fold; from token $g = {{run:gen_time.tail_from}}$
# on, every pass took more than twice the early median. Like the row of $P = {{run:timing.p_max}}$ in 9.1, that is time the
# count does not model (the allocator, the score-matrix passes, the machine), and the total of
# {{run:gen_time.ratio:.1f}} times includes it.

# %% [markdown] lang="zh"
# 在这次运行中，生成 {{run:gen_time.tokens}} 个 token，用缓存花了 {{run:gen_time.cached_total_ms:,.0f}} 毫秒，不用缓存花了 {{run:gen_time.full_total_ms:,.0f}} 毫秒，是前者的 {{run:gen_time.ratio:.1f}} 倍。用缓存时，第一个 token 要等预填充完成（{{run:gen_time.cached_first_ms:.2f}} 毫秒），之后每个 token 只等一个解码步（中位数 {{run:gen_time.decode_ms:.3f}} 毫秒）：这两种等待就是推理服务系统所说的首 token 延迟（TTFT）和 token 间延迟（ITL），只不过这里是单线程 CPU 上的一条序列。
#
# **橙色曲线末端的陡升不是计数造成的。** 不用缓存时，最后 16 次计算的耗时是最初 16 次的 {{run:gen_time.tail_over_head:.1f}} 倍（中位数相比），而它们的计数只增长到 {{run:gen_time.tail_count_growth:.2f}} 倍；从第 $g = {{run:gen_time.tail_from}}$ 个 token 起，每次计算的耗时都超过了最初中位数的两倍。和 9.1 中 $P = {{run:timing.p_max}}$ 那一行一样，这是计数没有建模的时间（内存分配器、扫过分数矩阵的几遍运算、机器本身），{{run:gen_time.ratio:.1f}} 倍的总时间之比也包含了它。

# %% tags=["prose-values"]
def steep_tail() -> dict:
    # [en] Passes without the cache: the last 16 against the first 16 (medians), in time and in count, and the
    # [en] first token from which every pass took more than twice the early median ("–" if none).
    # [zh] 不用缓存时的各次计算：最后 16 次与最初 16 次相比（取中位数）的耗时之比与计数之比，以及从哪个 token
    # [zh] 起每次计算都超过最初中位数的两倍（没有则为 "–"）。
    times = [end - start for start, end in GEN_TIME["full"]]
    head, n, P = float(np.median(times[:16])), len(times), int(GEN_TIME_PROMPT.shape[1])
    count = [sum(full_step_macs(cfg, P + i).values()) for i in range(n)]
    slow_from = next((i for i in range(n) if all(t > 2 * head for t in times[i:])), None)
    return {"tail_over_head": float(np.median(times[-16:])) / head,
            "tail_count_growth": float(np.median(count[-16:]) / np.median(count[:16])),
            "tail_from": "–" if slow_from is None else slow_from + 1}


{"gen_time": {"prompt": int(GEN_TIME_PROMPT.shape[1]), "tokens": GEN_TIME_TOKENS,
              "cached_total_ms": GEN_TIME["cached"][-1][1], "full_total_ms": GEN_TIME["full"][-1][1],
              "ratio": GEN_TIME["full"][-1][1] / GEN_TIME["cached"][-1][1], "cached_first_ms": GEN_TIME["cached"][0][1],
              "decode_ms": float(np.median(decode_ms)), "final_len": int(GEN_TIME_PROMPT.shape[1]) + GEN_TIME_TOKENS - 1,
              **steep_tail(),
              "crossover": next(T for T in range(1, 100 * cfg.max_positions) if full_step_macs(cfg, T)["attention"]
                                > sum(macs for part, macs in full_step_macs(cfg, T).items() if part != "attention"))}}
