# %% [markdown] lang="en"
# ### 9.3 Where the time of a decode step goes
#
# One measurement above is far from the count: sixteen cached calls took
# {{run:clock.cached16_over_prefill16:.0f}} times as long as one 16-token prefill, though their
# multiply-adds differ by {{run:clock.cached16_extra_macs:.1%}}. A profiler shows what each call ran.
# `torch.profiler` records every PyTorch operator (`aten::...`) a call executes, how many times, and the
# time spent inside it (its *self* time, without the operators it called). We profile three calls, each
# ten times after one warm-up, and divide by ten:
#
# * **cached step:** one token with a cache of {{run:profile.past}} positions, a decode step at the longest prompt;
# * **prefill of 16 tokens:** one call that pushes 16 positions through the network;
# * **full step:** the whole sequence of {{run:profile.full_len}} tokens, one step of full recomputation.
#
# The table lists the operators that take the most time in any of the three, with their calls and self
# time per call of the model, in microseconds. The profiler adds its own overhead to every operator, so
# compare these times with each other, not with the tables of 9.1.

# %% [markdown] lang="zh"
# ### 9.3 解码一步的时间花在哪里
#
# 上面有一处测量结果与计数相去甚远：16 次缓存调用的耗时是一次 16 个 token 的预填充的 {{run:clock.cached16_over_prefill16:.0f}} 倍，而两者的乘加次数只差 {{run:clock.cached16_extra_macs:.1%}}。性能分析器（profiler）能告诉我们每次调用实际执行了什么。`torch.profiler` 记录一次调用执行的每一个 PyTorch 算子（`aten::...`）、它被调用了多少次，以及花在它内部的时间（*自身*耗时，不含它再调用的算子）。我们分析三种调用，每种先预热一次，再连续执行十次，结果除以十：
#
# * **缓存路径的一步**：一个 token，带着 {{run:profile.past}} 个位置的缓存，即最长提示下的一个解码步；
# * **16 个 token 的预填充**：一次调用，让 16 个位置经过网络；
# * **完整重算的一步**：把 {{run:profile.full_len}} 个 token 的整个序列送入模型，即完整重算的一步。
#
# 表中列出在任一种调用中耗时最多的算子，以及模型每被调用一次时它们的调用次数和自身耗时（微秒）。性能分析器会给每个算子加上它自己的开销，所以这些时间只宜相互比较，不宜与 9.1 的表格比较。

# %%
from torch.profiler import ProfilerActivity, profile

# [en] Kineto, the profiler's engine, logs a "profiler_start" and a "profiler_stop" line to stderr on every
# [en] profile; log level 6 silences it (read once, when the process first profiles).
# [zh] 性能分析器的底层引擎 Kineto 每次分析都会向 stderr 写一行 "profiler_start" 和一行 "profiler_stop"；
# [zh] 日志级别 6 让它不再输出（进程第一次做性能分析时读取这个设置）。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
PROFILE_REPEATS = 10


# [en] Per call of `call`: each operator's (calls, self time in microseconds), and the number of operators
# [en] the Python code called directly (the top level of the profile).
# [zh] 每调用一次 `call`：每个算子的（调用次数，自身耗时，单位微秒），以及 Python 代码直接调用的算子个数
# [zh] （性能分析结果的最顶层）。
@torch.inference_mode()
def profile_call(call) -> dict:
    call()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(PROFILE_REPEATS):
            call()
    return {"ops": {e.key: (e.count / PROFILE_REPEATS, e.self_cpu_time_total / PROFILE_REPEATS) for e in prof.key_averages()},
            "top_level": sum(e.cpu_parent is None for e in prof.events()) // PROFILE_REPEATS}


PROFILED_IDS = TIMING_STREAM[:, :max(PROMPTS) + 1]                     # [1, 257]
with torch.inference_mode():
    _, profiled_cache = model(PROFILED_IDS[:, :-1])
PROFILES = {
    "cached_step": profile_call(lambda: model(PROFILED_IDS[:, -1:], profiled_cache)),
    "prefill_16": profile_call(lambda: model(PROFILED_IDS[:, :16])),
    "full_step": profile_call(lambda: model(PROFILED_IDS)),
}
busiest = sorted({name for run in PROFILES.values()
                  for name, _ in sorted(run["ops"].items(), key=lambda item: -item[1][1])[:5]},
                 key=lambda name: -PROFILES["cached_step"]["ops"].get(name, (0, 0))[1])


def calls_and_us(run: dict, name: str) -> str:
    calls, us = run["ops"].get(name, (0, 0))
    return f"{calls:g} / {us:.1f}"


say_table([[f"`{name}`"] + [calls_and_us(run, name) for run in PROFILES.values()] for name in busiest],
          en=["operator", "cached step: calls / us", "prefill, 16 tokens: calls / us", "full step: calls / us"],
          zh=["算子", "缓存路径一步：调用次数 / 微秒", "16 个 token 的预填充：调用次数 / 微秒", "完整重算一步：调用次数 / 微秒"])
totals = [(run["top_level"], sum(c for c, _ in run["ops"].values()), sum(u for _, u in run["ops"].values()))
          for run in PROFILES.values()]
say(en="All operators, per call of the model (called by Python / in total, including nested ones; self time): "
       + "; ".join(f"{name} {top} / {n:g}, {us:.0f} us"
                   for name, (top, n, us) in zip(["cached step", "prefill of 16 tokens", "full step"], totals)) + ".",
    zh="模型每被调用一次的全部算子（Python 直接调用的 / 连同嵌套调用在内的总数；自身耗时）："
       + "；".join(f"{name} {top} / {n:g}，{us:.0f} 微秒"
                  for name, (top, n, us) in zip(["缓存路径一步", "16 个 token 的预填充", "完整重算一步"], totals)) + "。")

# %% [markdown] lang="en"
# How to read it. The cached step and the 16-token prefill run nearly the same list of operators:
# {{run:profile.top_cached}} operator calls from Python for the cached step, {{run:profile.top_prefill}}
# for the prefill (the difference comes from the cache, its `torch.cat` calls). A cached step took
# {{run:profile.us_cached:.0f}} µs of operator time, the prefill {{run:profile.us_prefill:.0f}} µs, for 16
# times the positions: most operators cost a few microseconds whatever the size of their input. Sixteen
# cached steps make sixteen times as many operator calls as one prefill, and that, with the Python around
# them, is the gap of 9.2. The full step makes as few calls, but spends its time in large ones:
# {{run:profile.us_full:.0f}} µs, most of it in `{{run:profile.top_full}}` and the other operators of the
# projections and of the dense $[H, T, T]$ score matrix of 8.1 (masked half included). The cell asserts
# the claim the explanation rests on: a cached step runs at least as many operators as the whole prefill.

# %% [markdown] lang="zh"
# 如何解读这张表：缓存路径的一步与 16 个 token 的预填充执行的算子几乎完全相同：Python 代码直接调用的算子，缓存路径一步为 {{run:profile.top_cached}} 个，预填充为 {{run:profile.top_prefill}} 个（差别来自缓存，即它的 `torch.cat` 调用）。缓存路径的一步在算子上花了 {{run:profile.us_cached:.0f}} 微秒，预填充花了 {{run:profile.us_prefill:.0f}} 微秒，而预填充处理的位置数是前者的 16 倍：大多数算子不论输入多大，都要花几微秒。16 个缓存步的算子调用次数是一次预填充的 16 倍，这一点再加上外围的 Python 代码，就是 9.2 中那个差距的来源。完整重算的一步调用算子的次数同样不多，但时间花在大的算子上：共 {{run:profile.us_full:.0f}} 微秒，大部分花在 `{{run:profile.top_full}}` 以及投影和 8.1 中稠密的 $[H, T, T]$ 分数矩阵（包括被遮住的那一半）的其他算子上。下面的单元格断言这个解释所依据的事实：缓存路径的一步执行的算子至少和整个预填充一样多。

# %% tags=["prose-values"]
full_ops = PROFILES["full_step"]["ops"]
{"profile": {"past": int(profiled_cache[0][0].shape[-2]), "full_len": int(PROFILED_IDS.shape[1]),
             "top_cached": PROFILES["cached_step"]["top_level"], "top_prefill": PROFILES["prefill_16"]["top_level"],
             "us_cached": sum(u for _, u in PROFILES["cached_step"]["ops"].values()),
             "us_prefill": sum(u for _, u in PROFILES["prefill_16"]["ops"].values()),
             "us_full": sum(u for _, u in full_ops.values()),
             "top_full": max(full_ops, key=lambda name: full_ops[name][1])}}

# %%
assert PROFILES["cached_step"]["top_level"] >= PROFILES["prefill_16"]["top_level"]
