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
    [["`use_cache=True`", f"{GEN_TIME['cached'][0][1]:.2f}", f"{np.median(decode_ms):.3f}", f"{GEN_TIME['cached'][-1][1]:.1f}"],
     ["`use_cache=False`", f"{GEN_TIME['full'][0][1]:.2f}",
      f"{np.median([end - start for start, end in GEN_TIME['full'][1:]]):.3f}", f"{GEN_TIME['full'][-1][1]:.1f}"]],
    en=["loop", "first token, ms", "each later call, ms (median)", f"all {GEN_TIME_TOKENS} tokens, ms"],
    zh=["循环", "第一个 token（毫秒）", "之后每次调用（毫秒，中位数）", f"全部 {GEN_TIME_TOKENS} 个 token（毫秒）"],
)

# %% [markdown] lang="en"
# The figure. Left, the first calls of both loops on one time axis (milliseconds since the loop began):
# each bar is one call of the model. With the cache (top row) the first, wide bar is the prefill over the
# {{run:gen_time.prompt}} prompt tokens and each narrow bar after it is a decode step of one token; without the cache (bottom
# row) every bar is a pass over the whole sequence, one token longer each time. The gaps between bars are
# the loop's own work (argmax, `torch.cat` of the token IDs). Right, the time until the $g$-th new token
# is ready, against $g$: with the cache it grows by one decode step per token, a straight line after the
# prefill; without it each token costs a pass over $P + g - 1$ positions, more than the token before, so
# the total bends upward (quadratically in the long run, since every pass grows by one position).

# %% [markdown] lang="zh"
# 下图左侧把两个循环最初的若干次调用画在同一条时间轴上（从循环开始算起的毫秒数）：每个条块是一次模型调用。用缓存时（上面一行），第一个宽条块是对 {{run:gen_time.prompt}} 个提示 token 的预填充，其后每个窄条块是一个单 token 的解码步；不用缓存时（下面一行），每个条块都是对整个序列的一次计算，序列每次长一个 token。条块之间的空隙是循环自身的工作（argmax、拼接 token ID 的 `torch.cat`）。右侧画的是第 $g$ 个新 token 就绪所需的总时间随 $g$ 的变化：用缓存时，每个 token 只多一个解码步，预填充之后是一条直线；不用缓存时，每个 token 都要把 $P + g - 1$ 个位置算一遍，比前一个 token 更费时，所以总时间向上弯曲（长远看按平方增长，因为每次计算都比上一次多一个位置）。

# %%
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
# On this run, {{run:gen_time.tokens}} tokens took {{run:gen_time.cached_total_ms:.0f}} ms with the cache
# and {{run:gen_time.full_total_ms:.0f}} ms without it, {{run:gen_time.ratio:.1f}} times as long. With the
# cache the first token waited for the prefill ({{run:gen_time.cached_first_ms:.2f}} ms) and every later
# one for a decode step (median {{run:gen_time.decode_ms:.3f}} ms). That split, the wait for the first token
# and the wait between tokens, is what serving systems report as time to first token (TTFT) and
# inter-token latency (ITL); here it is one sequence on one CPU thread, not a served request.

# %% [markdown] lang="zh"
# 在这次运行中，生成 {{run:gen_time.tokens}} 个 token，用缓存花了 {{run:gen_time.cached_total_ms:.0f}} 毫秒，不用缓存花了 {{run:gen_time.full_total_ms:.0f}} 毫秒，是前者的 {{run:gen_time.ratio:.1f}} 倍。用缓存时，第一个 token 要等预填充完成（{{run:gen_time.cached_first_ms:.2f}} 毫秒），之后每个 token 只等一个解码步（中位数 {{run:gen_time.decode_ms:.3f}} 毫秒）。等第一个 token 的时间和 token 之间的间隔，正是推理服务系统所说的首 token 延迟（TTFT）和 token 间延迟（ITL）；不过这里测的是单线程 CPU 上的一条序列，而不是一个被服务的请求。

# %% tags=["prose-values"]
{"gen_time": {"prompt": int(GEN_TIME_PROMPT.shape[1]), "tokens": GEN_TIME_TOKENS,
              "cached_total_ms": GEN_TIME["cached"][-1][1], "full_total_ms": GEN_TIME["full"][-1][1],
              "ratio": GEN_TIME["full"][-1][1] / GEN_TIME["cached"][-1][1], "cached_first_ms": GEN_TIME["cached"][0][1],
              "decode_ms": float(np.median(decode_ms))}}
