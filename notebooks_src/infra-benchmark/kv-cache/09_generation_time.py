# %% [markdown] lang="en"
# ### 9.4 A whole generation: prefill, then decode
#
# The windows of 9.1 isolate one kind of call each. A generation strings them together: one prefill over
# the prompt, then one decode step per new token. The cell runs the greedy loop of section 6 twice on one
# prompt of {{run:gen_time.prompt}} tokens, with the cache and without it, and reads the clock around
# every call of the model.
# It generates {{run:gen_time.tokens}} tokens each time (32 with `QUICK = True`). This is one run, after
# one short warm-up, not a benchmark: none of the protocol of 9.1 (rounds, rotation, percentiles) is
# applied, so read the shapes of the curves rather than the last digit.

# %% [markdown] lang="zh"
# ### 9.4 一次完整的生成：先预填充，再解码
#
# 9.1 的每个计时窗口只测一种调用。一次生成则把它们串起来：先对提示做一次预填充，然后每生成一个新 token 做一个解码步。下面的单元格在同一个 {{run:gen_time.prompt}} 个 token 的提示上把第 6 节的贪心循环运行两次，一次用缓存，一次不用，并在每次调用模型的前后读取时钟。每次运行生成 {{run:gen_time.tokens}} 个 token（`QUICK = True` 时为 32 个）。这只是一次短暂预热之后的单次运行，不是基准测试：9.1 的测量规程（多轮测量、轮换顺序、百分位数）在这里都没有采用，所以要看的是曲线的形状，而不是最后一位数字。

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
# The figure. Left ("the first calls of each loop"), the first calls of both loops on one time axis,
# in milliseconds since the loop began: each bar is one call of the model. With the cache (top row,
# "prefill, then decode") the first, wide blue bar is the prefill over the {{run:gen_time.prompt}} prompt
# tokens and each narrow green bar after it is a decode step of one token; without the cache (bottom
# row, "full pass per token") every orange bar is a pass over the whole sequence, one token longer each
# time. The gaps between bars are the loop's own work (argmax, `torch.cat` of the token IDs). Right, the
# time until the $g$-th new token is ready, against $g$ (green: with the cache, orange: without). With the
# cache it grows by one decode step per token, a straight line after the prefill. Without it each token
# costs a pass over $P + g - 1$ positions, more than the token before, so the total bends upward. How
# fast? Every pass is one position longer than the last, so the total grows at least with the square of
# the number of tokens; and by the count of 8.1 a pass over $T$ positions costs about $TW^2 + T^2W$
# multiply-adds, so once the attention term $T^2W$ dominates, beyond about {{run:gen_time.crossover}}
# positions for this model, the total grows with the cube of the length (this run ends at
# {{run:gen_time.final_len}} positions). The curves come from a single run: without the cache, the slowest pass (over {{run:gen_time.slowest_len}} positions) took
# {{run:gen_time.slowest_over_first:.1f}} times as long as the first (over {{run:gen_time.prompt}}), where
# the count of 8.1 grows {{run:gen_time.slowest_count_growth:.2f}}-fold. Whatever a pass takes beyond its
# count is time the count does not model (the allocator, the operating system, the matrix library, the
# score passes of 9.3), not a property of the cache, and the total time without the cache includes it.
# The plotting code is folded.

# %% [markdown] lang="zh"
# 下图左侧（标题 the first calls of each loop (one bar per call)，意为“每个循环最初的若干次调用，每条横条是一次调用”）把两个循环最初的若干次调用画在同一条时间轴上，横轴 ms since the loop began 是从循环开始算起的毫秒数。用缓存时（上面一行，标签 with cache: prefill, then decode，意为“用缓存：先预填充，再解码”），第一条宽的蓝色横条是对 {{run:gen_time.prompt}} 个提示 token 的预填充，其后每条窄的绿色横条是一个单 token 的解码步；不用缓存时（下面一行，标签 without cache: full pass per token，意为“不用缓存：每个 token 做一次完整调用”），每条橙色横条都是对整个序列的一次计算，序列每次长一个 token。横条之间的空隙是循环自身的工作（argmax、拼接 token ID 的 `torch.cat`）。
#
# 右侧（标题 total time, prompt of {{run:gen_time.prompt}} tokens，意为“总时间，提示长 {{run:gen_time.prompt}} 个 token”）画的是第 $g$ 个新 token 就绪所需的总时间随 $g$ 的变化：横轴 new tokens generated g 是已生成的新 token 数 $g$，纵轴 ms until token g is ready 是第 $g$ 个 token 就绪时经过的毫秒数；绿线（图例 with cache）用缓存，橙线（图例 without cache）不用缓存。用缓存时，每个 token 只多一个解码步，预填充之后是一条直线。不用缓存时，每个 token 都要把 $P + g - 1$ 个位置算一遍，比前一个 token 更费时，所以总时间向上弯曲。弯得有多快？每次计算都比上一次多一个位置，所以总时间至少随 token 数的平方增长；而按 8.1 的计数，对 $T$ 个位置做一次计算约需 $TW^2 + T^2W$ 次乘加，一旦注意力项 $T^2W$ 占了上风（对这个模型，约在 {{run:gen_time.crossover}} 个位置以上），总时间就随长度的立方增长（这次运行最后到达 {{run:gen_time.final_len}} 个位置）。这些曲线只来自一次运行：不用缓存时，最慢的一次计算（对 {{run:gen_time.slowest_len}} 个位置）耗时是第一次（对 {{run:gen_time.prompt}} 个位置）的 {{run:gen_time.slowest_over_first:.1f}} 倍，而按 8.1 的计数，工作量只增长到 {{run:gen_time.slowest_count_growth:.2f}} 倍。一次计算超出其计数的那部分时间，是计数没有建模的开销（内存分配器、操作系统、矩阵库，以及 9.3 中扫过分数矩阵的几遍运算），并不是缓存本身的性质；不用缓存的总时间也包含了它。总标题 one greedy generation, CPU, 1 thread, fp32 (prefill in blue, decode steps in green) 意为“一次贪心生成，CPU、单线程、FP32（预填充为蓝色，解码步为绿色）”。绘图代码已折叠。

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
# cache the first token waited for the prefill ({{run:gen_time.cached_first_ms:.2f}} ms) and every later
# one for a decode step (median {{run:gen_time.decode_ms:.3f}} ms). That split, the wait for the first token
# and the wait between tokens, is what serving systems report as time to first token (TTFT) and
# inter-token latency (ITL); here it is one sequence on one CPU thread, not a served request.

# %% [markdown] lang="zh"
# 在这次运行中，生成 {{run:gen_time.tokens}} 个 token，用缓存花了 {{run:gen_time.cached_total_ms:,.0f}} 毫秒，不用缓存花了 {{run:gen_time.full_total_ms:,.0f}} 毫秒，是前者的 {{run:gen_time.ratio:.1f}} 倍。用缓存时，第一个 token 要等预填充完成（{{run:gen_time.cached_first_ms:.2f}} 毫秒），之后每个 token 只等一个解码步（中位数 {{run:gen_time.decode_ms:.3f}} 毫秒）。等第一个 token 的时间和 token 之间的间隔，正是推理服务系统所说的首 token 延迟（TTFT）和 token 间延迟（ITL）；不过这里测的是单线程 CPU 上的一条序列，而不是一个被服务的请求。

# %% tags=["prose-values"]
def slowest_pass() -> dict:
    # [en] The slowest call without the cache, against the first: time ratio and count ratio.
    # [zh] 不用缓存时最慢的一次调用与第一次调用相比：耗时之比与计数之比。
    times = [end - start for start, end in GEN_TIME["full"]]
    i = int(np.argmax(times))
    P = int(GEN_TIME_PROMPT.shape[1])
    return {"slowest_len": P + i, "slowest_over_first": times[i] / times[0],
            "slowest_count_growth": sum(full_step_macs(cfg, P + i).values()) / sum(full_step_macs(cfg, P).values())}


{"gen_time": {"prompt": int(GEN_TIME_PROMPT.shape[1]), "tokens": GEN_TIME_TOKENS,
              "cached_total_ms": GEN_TIME["cached"][-1][1], "full_total_ms": GEN_TIME["full"][-1][1],
              "ratio": GEN_TIME["full"][-1][1] / GEN_TIME["cached"][-1][1], "cached_first_ms": GEN_TIME["cached"][0][1],
              "decode_ms": float(np.median(decode_ms)), "final_len": int(GEN_TIME_PROMPT.shape[1]) + GEN_TIME_TOKENS - 1,
              **slowest_pass(),
              "crossover": next(T for T in range(1, 100 * cfg.max_positions) if full_step_macs(cfg, T)["attention"]
                                > sum(macs for part, macs in full_step_macs(cfg, T).items() if part != "attention"))}}
