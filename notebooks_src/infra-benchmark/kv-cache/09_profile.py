# %% [markdown] lang="en"
# ### 9.5 Optional appendix: where the time of a decode step goes
#
# *Optional, like 9.4: a profiler checks the explanation of 9.2.*
#
# `torch.profiler` records every PyTorch operator (`aten::...`) a call executes, how many times, and its
# *self* time (without the operators it called). We profile three calls: a **cached step** (one token, a
# cache of {{run:profile.past}} positions), a **prefill of 16 tokens**, and a **full step** over
# {{run:profile.full_len}} tokens. Each runs ten times per session; after a warm-up session there are
# {{run:profile.sessions}} more, and each self time is the median over them (in microseconds per call of
# the model). The first table lists the busiest operators and those the text names; the second gives
# totals per call: the operators our Python code called directly (events without a parent operator), and
# all operator calls, those nested inside them included. The profiler adds its own cost to every operator call, so compare these times with
# each other, not with 9.1. The profiler plumbing is folded.

# %% [markdown] lang="zh"
# ### 9.5 可选附录：解码一步的时间花在哪里
#
# *与 9.4 一样是可选内容：用性能分析器检验 9.2 的解释。*
#
# `torch.profiler` 记录一次调用执行的每一个 PyTorch 算子（`aten::...`）、调用次数以及*自身*耗时（不含它再调用的算子）。我们分析三种调用：**缓存路径的一步**（一个 token，带 {{run:profile.past}} 个位置的缓存）、**16 个 token 的预填充**，以及对 {{run:profile.full_len}} 个 token 的**完整重算一步**。每种调用在一次性能分析中执行 10 次；先做一次预热，再做 {{run:profile.sessions}} 次分析，自身耗时取各次的中位数（单位是模型每被调用一次的微秒数）。第一张表列出最忙的算子和正文提到的算子，第二张表给出每次调用的总数：我们的 Python 代码直接调用的算子数（没有上层算子的事件），以及算子调用的总次数（包括嵌套在它们内部的调用）。性能分析器会给每次算子调用加上它自己的开销，所以这些时间只宜相互比较，不宜与 9.1 比较。调用性能分析器的辅助代码已折叠。

# %% tags=["hide-input"]
from torch.profiler import ProfilerActivity, profile

# [en] Kineto, the profiler's engine, logs a "profiler_start" and a "profiler_stop" line to stderr on every
# [en] profile; log level 6 silences it (read once, when the process first profiles).
# [zh] 性能分析器的底层引擎 Kineto 每次分析都会向 stderr 写一行 "profiler_start" 和一行 "profiler_stop"；
# [zh] 日志级别 6 让它不再输出（进程第一次做性能分析时读取这个设置）。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
PROFILE_REPEATS, PROFILE_SESSIONS = 10, 5


# [en] Per call of `call`: each operator's (calls, self time in microseconds, the median over the
# [en] sessions), and the number of operators the Python code called directly (the top level of the
# [en] profile). The first session warms up and is left out.
# [zh] 每调用一次 `call`：每个算子的（调用次数，自身耗时，单位微秒，取各次分析的中位数），以及 Python 代码
# [zh] 直接调用的算子个数（性能分析结果的最顶层）。第一次分析用于预热，不计入。
@torch.inference_mode()
def profile_call(call) -> dict:
    sessions = []
    for _ in range(PROFILE_SESSIONS + 1):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(PROFILE_REPEATS):
                call()
        sessions.append(({e.key: (e.count / PROFILE_REPEATS, e.self_cpu_time_total / PROFILE_REPEATS)
                          for e in prof.key_averages()},
                         sum(e.cpu_parent is None for e in prof.events()) // PROFILE_REPEATS))
    ops, top_level = sessions[-1]
    return {"ops": {name: (calls, float(np.median([run.get(name, (0, 0.0))[1] for run, _ in sessions[1:]])))
                    for name, (calls, _) in ops.items()},
            "top_level": top_level}


PROFILED_IDS = TIMING_STREAM[:, :max(PROMPTS) + 1]                     # [1, 257]
with torch.inference_mode():
    _, profiled_cache = model(PROFILED_IDS[:, :-1])
PROFILES = {
    "cached_step": profile_call(lambda: model(PROFILED_IDS[:, -1:], profiled_cache)),
    "prefill_16": profile_call(lambda: model(PROFILED_IDS[:, :16])),
    "full_step": profile_call(lambda: model(PROFILED_IDS)),
}
# [en] The five busiest operators of each call, plus every operator the text below names.
# [zh] 每种调用中耗时最多的五个算子，再加上下文提到的每一个算子。
NAMED_OPS = {"aten::cat"}
busiest = sorted(NAMED_OPS | {name for run in PROFILES.values()
                              for name, _ in sorted(run["ops"].items(), key=lambda item: -item[1][1])[:5]},
                 key=lambda name: -PROFILES["cached_step"]["ops"].get(name, (0, 0))[1])


def calls_and_us(run: dict, name: str) -> str:
    calls, us = run["ops"].get(name, (0, 0))
    return f"{calls:g} / {us:,.1f}"


say_table([[f"`{name}`"] + [calls_and_us(run, name) for run in PROFILES.values()] for name in busiest],
          en=["operator", "cached step: calls / us", "prefill, 16 tokens: calls / us", "full step: calls / us"],
          zh=["算子", "缓存路径一步：调用次数 / 微秒", "16 个 token 的预填充：调用次数 / 微秒", "完整重算一步：调用次数 / 微秒"])
say_table([[f"`{label}`", str(run["top_level"]), f"{sum(c for c, _ in run['ops'].values()):g}",
            f"{sum(u for _, u in run['ops'].values()):,.0f}"] for label, run in PROFILES.items()],
          en=["call of the model", "operators called by Python", "operator calls in total",
              "self time of all operators (us)"],
          zh=["模型调用", "Python 直接调用的算子数", "算子调用总数（含嵌套调用）", "全部算子的自身耗时（微秒）"])

# %% [markdown] lang="en"
# How to read the two tables. The cached step and the 16-token prefill run nearly the same list of operators:
# {{run:profile.top_cached}} operator calls from Python for the cached step, {{run:profile.top_prefill}}
# for the prefill (the difference comes from the cache, its `torch.cat` calls). Their attention even does
# the same work: the cached step's one query reads {{run:profile.full_len}} keys, the prefill's 16 queries
# read 16 each (the dense score matrix, masked half included), {{run:profile.full_len}} against 256 scores
# per head. The prefill's projections, MLP and vocabulary projection handle 16 rows instead of one; had each
# operator's time grown with its rows, these would take 16 times as long as the cached step's, its attention
# about as long. Its operator time as a whole was
# {{run:profile.prefill_over_cached:.2f}} times the cached step's ({{run:profile.us_prefill:,.0f}} µs of operator time against
# {{run:profile.us_cached:,.0f}} µs; per operator call, {{run:profile.per_call_prefill:.2f}} µs against
# {{run:profile.per_call_cached:.2f}} µs on average). What the cached step has and the
# prefill has not is the cache: `aten::cat` copies the {{run:profile.past}} cached rows of K and V of both
# layers into new tensors, {{run:profile.cat_cached:,.0f}} µs of the step. Sixteen cached steps make
# sixteen times as many operator calls as one prefill, and that, with the Python around them, is the gap
# of 9.2.
#
# The full step makes as few calls, but spends its time in large ones: {{run:profile.us_full:,.0f}} µs. The
# profile ran on the same machine as 9.1, so a busy core can inflate any of its times; the operator calls
# do not depend on the load. The cell asserts the claim the explanation of 9.2 rests on: a cached step
# runs at least as many operators as the whole prefill.

# %% [markdown] lang="zh"
# 怎样读这两张表？先看缓存路径的一步与 16 个 token 的预填充。两者执行的算子几乎完全相同：Python 代码直接调用的算子，缓存路径一步为 {{run:profile.top_cached}} 个，预填充为 {{run:profile.top_prefill}} 个（差别来自缓存，即它的 `torch.cat` 调用）。两者注意力部分的工作量也相同：缓存路径一步中唯一的查询读取 {{run:profile.full_len}} 个键，预填充的 16 个查询各读取 16 个键（稠密的分数矩阵，包括被遮住的那一半），每个头分别是 {{run:profile.full_len}} 个和 256 个分数。预填充的投影、MLP 和词表投影要处理 16 行而不是 1 行；假如每个算子的耗时随它处理的行数增长，这几部分的耗时应是缓存路径一步的 16 倍，注意力部分则大致相同。实际上，预填充的全部算子耗时是缓存路径一步的 {{run:profile.prefill_over_cached:.2f}} 倍（预填充的算子耗时为 {{run:profile.us_prefill:,.0f}} 微秒，缓存路径一步为 {{run:profile.us_cached:,.0f}} 微秒；平均每次算子调用分别为 {{run:profile.per_call_prefill:.2f}} 微秒和 {{run:profile.per_call_cached:.2f}} 微秒）。缓存路径有而预填充没有的，是缓存本身：`aten::cat` 要把两层缓存的 K 和 V 的 {{run:profile.past}} 行复制进新张量，这一步中它花了 {{run:profile.cat_cached:,.0f}} 微秒。16 个缓存步调用算子的次数是一次预填充的 16 倍；再加上外围的 Python 代码，这就是 9.2 中那个差距的来源。
#
# 完整重算的一步调用算子的次数同样不多，但时间花在大的算子上：共 {{run:profile.us_full:,.0f}} 微秒。性能分析与 9.1 在同一台机器上运行，核心繁忙时其中任何一个时间都可能被拉长；算子的调用次数则与负载无关。下面的单元格断言 9.2 的解释所依据的事实：缓存路径的一步执行的算子至少和整个预填充一样多。

# %% tags=["prose-values"]
full_ops, cached_ops, prefill_ops = (PROFILES[name]["ops"] for name in ("full_step", "cached_step", "prefill_16"))


def self_us(ops: dict, *names: str) -> float:
    return sum(ops.get(name, (0, 0.0))[1] for name in names)


{"profile": {"past": int(profiled_cache[0][0].shape[-2]), "full_len": int(PROFILED_IDS.shape[1]),
             "sessions": PROFILE_SESSIONS,
             "top_cached": PROFILES["cached_step"]["top_level"], "top_prefill": PROFILES["prefill_16"]["top_level"],
             "top_full": PROFILES["full_step"]["top_level"],
             "top_min": min(PROFILES[name]["top_level"] for name in PROFILES),
             "top_max": max(PROFILES[name]["top_level"] for name in PROFILES),
             "us_cached": self_us(cached_ops, *cached_ops), "cat_cached": self_us(cached_ops, "aten::cat"),
             "us_prefill": self_us(PROFILES["prefill_16"]["ops"], *PROFILES["prefill_16"]["ops"]),
             "us_full": self_us(full_ops, *full_ops),
             "prefill_over_cached": self_us(prefill_ops, *prefill_ops) / self_us(cached_ops, *cached_ops),
             "per_call_cached": self_us(cached_ops, *cached_ops) / sum(c for c, _ in cached_ops.values()),
             "per_call_prefill": self_us(prefill_ops, *prefill_ops) / sum(c for c, _ in prefill_ops.values())}}

# %%
top_calls = {name: PROFILES[name]["top_level"] for name in ("cached_step", "prefill_16", "full_step")}
say(en=f"Operator calls from Python per call of the model: cached step {top_calls['cached_step']}, "
       f"16-token prefill {top_calls['prefill_16']}, full step {top_calls['full_step']}.",
    zh=f"每次调用模型时 Python 代码直接调用的算子数：缓存路径一步 {top_calls['cached_step']} 个，"
       f"16 个 token 的预填充 {top_calls['prefill_16']} 个，完整重算一步 {top_calls['full_step']} 个。")
assert top_calls["cached_step"] >= top_calls["prefill_16"]
