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


# [en] The loop of greedy_generate, with the clock read around every call of the model: returns the new
# [en] tokens, (start, end) of each call in ms since the loop began, each call's CPU time in ms and its
# [en] minor page faults (None without `resource`, see 9.1).
# [zh] greedy_generate 的循环，在每次调用模型的前后读取时钟：返回新生成的 token、每次调用的（开始，结束）
# [zh] 时刻（毫秒，从循环开始时算起）、每次调用的 CPU 时间（毫秒）和次缺页次数（没有 `resource` 时为 None，见 9.1）。
@torch.inference_mode()
def timed_generation(model, prompt, new_tokens: int, use_cache: bool):
    ids, cache, step_input, calls, cpu_ms, faults = prompt, None, prompt, [], [], []
    origin = time.perf_counter_ns()
    for _ in range(new_tokens):
        faults_before = minor_faults()
        begin, cpu_begin = time.perf_counter_ns(), time.process_time_ns()
        if use_cache:
            logits, cache = model(step_input, cache)             # [B, T_new, vocab]
        else:
            logits, _ = model(ids)                               # [B, T, vocab]
        calls.append(((begin - origin) / 1e6, (time.perf_counter_ns() - origin) / 1e6))
        cpu_ms.append((time.process_time_ns() - cpu_begin) / 1e6)
        faults.append(None if faults_before is None else minor_faults() - faults_before)
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)     # [B, 1]
        ids = torch.cat((ids, next_id), dim=1)
        step_input = next_id
    return ids[:, prompt.shape[1]:], calls, cpu_ms, faults


for use_cache in (True, False):
    timed_generation(model, GEN_TIME_PROMPT, 8, use_cache)
GEN_RUNS = {path: timed_generation(model, GEN_TIME_PROMPT, GEN_TIME_TOKENS, path == "cached") for path in ("cached", "full")}
GEN_TIME = {path: calls for path, (_, calls, _, _) in GEN_RUNS.items()}
GEN_CPU = {path: cpu_ms for path, (_, _, cpu_ms, _) in GEN_RUNS.items()}
LATER_CALLS_MS = {path: [end - start for start, end in calls[1:]] for path, calls in GEN_TIME.items()}
say_table(
    [[f"`use_cache={path == 'cached'}`", f"{GEN_TIME[path][0][1]:.2f}",
      f"{np.median(LATER_CALLS_MS[path]):.3f}", f"{np.median(GEN_CPU[path][1:]):.3f}",
      f"{GEN_TIME[path][-1][1]:,.1f}", f"{sum(GEN_CPU[path]):,.1f}"] for path in ("cached", "full")],
    en=["loop", "first token, ms", "each later call, ms (median)", "each later call, CPU ms (median)",
        f"all {GEN_TIME_TOKENS} tokens, ms", f"all {GEN_TIME_TOKENS} tokens, CPU ms"],
    zh=["循环", "第一个 token（毫秒）", "之后每次调用（毫秒，中位数）", "之后每次调用（CPU 毫秒，中位数）",
        f"全部 {GEN_TIME_TOKENS} 个 token（毫秒）", f"全部 {GEN_TIME_TOKENS} 个 token（CPU 毫秒）"],
)


# [en] The later calls beside 9.1's steps at its longest prompt: this loop's median call against 9.1's median
# [en] window divided by its 16 steps, in CPU time, in the count of 8.1 (call i of this loop feeds a prefix of
# [en] P + i tokens) and in minor page faults ("–" without `resource`).
# [zh] 把之后的各次调用与 9.1 在最长提示下的每一步对照：本循环调用的中位数对 9.1 窗口的中位数除以 16 步，
# [zh] 分别比较 CPU 时间、8.1 的计数（本循环第 i 次调用送入 P + i 个 token 的前缀）和次缺页次数（没有 `resource` 时为“–”）。
def loop_vs_window(path: str) -> dict:
    step_macs = full_step_macs if path == "full" else cached_step_macs
    loop_macs = [sum(step_macs(cfg, GEN_TIME_PROMPT.shape[1] + i).values()) for i in range(1, GEN_TIME_TOKENS)]
    loop_faults = [f for f in GEN_RUNS[path][3][1:] if f is not None]
    window_median = longest[f"{path}_faults"]
    return {"loop_ms": float(np.median(GEN_CPU[path][1:])), "step_ms": longest[f"{path}_cpu_ms"]["p50"] / CONTINUATION,
            "count_ratio": float(np.median(loop_macs)) / window_macs(P_MAX, path),
            "faults": (f"{np.median(loop_faults):,.0f}" if loop_faults else "–") + " / "
                      + ("–" if window_median is None else f"{window_median / CONTINUATION:,.0f}")}


VS_91 = {path: loop_vs_window(path) for path in ("full", "cached")}
say(en=f"Medians beside 9.1's steps at $P = {P_MAX}$ (this loop / 9.1): "
       + "; ".join(f"{path} call {v['loop_ms']:.3f} / {v['step_ms']:.3f} CPU ms, "
                   f"{v['loop_ms'] / v['step_ms']:.2f} times (the count predicts {v['count_ratio']:.2f}), "
                   f"minor page faults {v['faults']}" for path, v in VS_91.items()) + ".",
    zh=f"与 9.1 在 $P = {P_MAX}$ 时的每一步相比（本循环 / 9.1，中位数）："
       + "；".join(f"{'完整重算' if path == 'full' else '缓存续写'}的一次调用 CPU 时间 {v['loop_ms']:.3f} / {v['step_ms']:.3f} 毫秒，"
                  f"为 {v['loop_ms'] / v['step_ms']:.2f} 倍（按计数应为 {v['count_ratio']:.2f} 倍），次缺页 {v['faults']} 次"
                  for path, v in VS_91.items()) + "。")


# %% [markdown] lang="en"
# The figure (plotting code folded) puts the two loops side by side in CPU time. Left, each call's CPU
# time against the token $g$ it produced (logarithmic axis): what one token costs on each loop, call by
# call; call 1 of the cached loop is the prefill. Right, the CPU time until token $g$ is ready.

# %% [markdown] lang="zh"
# 下面的图（绘图代码已折叠）按 CPU 时间把两个循环放在一起比较。图中文字是英文。左图（CPU time of each call，“每次调用的 CPU 时间”）的横轴 new token g 是该次调用产生的第 $g$ 个新 token，纵轴 CPU ms per call 是每次调用的 CPU 毫秒数（对数刻度）：它逐次给出每个循环生成一个 token 的代价；用缓存（with cache）的循环中，第 1 次调用就是预填充。右图（CPU time until token g，“第 $g$ 个 token 就绪前的 CPU 时间”）画的是第 $g$ 个 token 就绪所需的 CPU 时间，without cache 指不用缓存的循环。总标题 one greedy generation, CPU, 1 thread, fp32 意为“一次贪心生成，CPU、单线程、FP32”。

# %% tags=["hide-input"]
fig, (ax_calls, ax_total) = plt.subplots(1, 2, figsize=(11, 3.6))
tokens = np.arange(1, GEN_TIME_TOKENS + 1)
for path, color, marker, label in (("cached", "tab:green", "^", "with cache"), ("full", "tab:orange", "o", "without cache")):
    ax_calls.plot(tokens, GEN_CPU[path], linestyle="none", marker=marker, markersize=3, color=color, label=label)
    ax_total.plot(tokens, np.cumsum(GEN_CPU[path]), color=color, label=label)
ax_calls.set_yscale("log")
ax_calls.set_xlabel("new token g")
ax_calls.set_ylabel("CPU ms per call")
ax_calls.set_title("CPU time of each call", fontsize=10)
ax_total.set_xlabel("new token g")
ax_total.set_ylabel("CPU ms until token g is ready")
ax_total.set_title("CPU time until token g", fontsize=10)
for ax in (ax_calls, ax_total):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle("one greedy generation, CPU, 1 thread, fp32", fontsize=10)
fig.tight_layout()
GENERATION_PNG = OUT / "generation.png"
fig.savefig(GENERATION_PNG, dpi=120)
plt.show()


# %% [markdown] lang="en"
# On this run, {{run:gen_time.tokens}} tokens took {{run:gen_time.cached_total_ms:,.0f}} ms with the cache
# and {{run:gen_time.full_total_ms:,.0f}} ms without it; in CPU time the loop without the cache took
# {{run:gen_time.ratio:.1f}} times as long. With the cache the first token waited for the prefill
# ({{run:gen_time.cached_first_ms:.2f}} ms) and every later one for a decode step (median
# {{run:gen_time.decode_ms:.3f}} ms): the two waits serving systems call time to first token (TTFT) and
# inter-token latency (ITL), here for one sequence on one CPU thread. This is a single run and its points
# are noisy (the memory allocator, the CPU's clock frequency, other programs), so take from the figure only the gap between the two
# loops, not the shape of either curve. Call 1 is the same prefill in both loops, so any gap between their
# first calls is such noise. The line under the table sets the later calls beside 9.1's steps at
# $P = {{run:timing.p_max}}$: a full call took {{run:gen_time.full_vs_91:.2f}} times the median CPU time of a full step
# there (the count of 8.1 predicts {{run:gen_time.full_count_vs_91:.2f}} for this loop's longer prefixes), a cached
# call {{run:gen_time.cached_vs_91:.2f}} times a cached step's; this loop does not follow 9.1's protocol (no warm-up
# rounds at each length; its lengths $T$ run once from {{run:timing.t_first}} to {{run:gen_time.t_last}}, not
# {{run:timing.t_first}} to {{run:timing.t_last}} over repeated rounds), and this run does not isolate which of these,
# or the page faults listed there, accounts for the difference.

# %% [markdown] lang="zh"
# 在这次运行中，生成 {{run:gen_time.tokens}} 个 token，用缓存花了 {{run:gen_time.cached_total_ms:,.0f}} 毫秒，不用缓存花了 {{run:gen_time.full_total_ms:,.0f}} 毫秒；按 CPU 时间，不用缓存的循环耗时是前者的 {{run:gen_time.ratio:.1f}} 倍。用缓存时，第一个 token 要等预填充完成（{{run:gen_time.cached_first_ms:.2f}} 毫秒），之后每个 token 只等一个解码步（中位数 {{run:gen_time.decode_ms:.3f}} 毫秒）：这两种等待就是推理服务系统所说的首 token 延迟（TTFT）和 token 间延迟（ITL），只不过这里是单线程 CPU 上的一条序列。这只是一次运行，图中各点有噪声（内存分配器、CPU 的时钟频率、同时运行的其他程序），所以从图中只应读出两个循环之间的差距，而不是任何一条曲线的形状。两个循环的第 1 次调用是同一次预填充，它们之间的任何差距也都是这种噪声。表格下面那一行把之后的各次调用与 9.1 在 $P = {{run:timing.p_max}}$ 时的每一步放在一起：完整重算的一次调用，CPU 时间的中位数是 9.1 中完整重算一步的 {{run:gen_time.full_vs_91:.2f}} 倍（本循环的前缀更长，按 8.1 的计数应为 {{run:gen_time.full_count_vs_91:.2f}} 倍）；缓存续写的一次调用是 9.1 中缓存续写一步的 {{run:gen_time.cached_vs_91:.2f}} 倍。这个循环并不遵循 9.1 的测量规程（不在每个长度上预热；它的长度 $T$ 从 {{run:timing.t_first}} 到 {{run:gen_time.t_last}} 只走一遍，而不是在多轮中重复 {{run:timing.t_first}} 到 {{run:timing.t_last}}），这次运行也没有分离出差别究竟来自其中哪一项，还是来自那一行列出的缺页。

# %% tags=["prose-values"]
{"gen_time": {"prompt": int(GEN_TIME_PROMPT.shape[1]), "tokens": GEN_TIME_TOKENS,
              "cached_total_ms": GEN_TIME["cached"][-1][1], "full_total_ms": GEN_TIME["full"][-1][1],
              "ratio": sum(GEN_CPU["full"]) / sum(GEN_CPU["cached"]), "cached_first_ms": GEN_TIME["cached"][0][1],
              "decode_ms": float(np.median(LATER_CALLS_MS["cached"])),
              **{f"{path}_vs_91": v["loop_ms"] / v["step_ms"] for path, v in VS_91.items()},
              "full_count_vs_91": VS_91["full"]["count_ratio"],
              "t_last": int(GEN_TIME_PROMPT.shape[1]) + GEN_TIME_TOKENS - 1}}
