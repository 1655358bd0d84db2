# %% [markdown] lang="en"
# **What one step costs.** If the arithmetic is the same, where does the difference come from? What this
# part finds: both steps do the same floating-point work, GPT-2's makes many more Python calls around it,
# and the counts point to that overhead, not the arithmetic, as what separates the two (an inference, not
# a timing: the end of this section says why). We take one decode
# step of each model, the token after the race's prompt, and look inside with two profilers:
# `torch.profiler` counts the ATen operations the step launches (ATen is the C++ library behind PyTorch's
# operators), their time and, with `with_flops=True`, the floating-point operations of the matrix
# products; Python's `cProfile` counts the Python function calls. The next cell defines the two measurements (a warm-up session and five more, the median self time per
# operator; Python calls grouped by the file that defines each function). It is measuring tooling, not
# part of the lesson, so it is folded.

# %% [markdown] lang="zh"
# **一步的开销都花在哪里。** 既然运算相同，差距从何而来？这一部分的发现是：两个解码步的浮点运算完全相同，GPT-2 在运算之外多了许多次 Python 调用；下面的计数表明，拉开两者差距的是这些开销，而不是运算本身（这是推断，不是计时，原因见本节末尾）。我们取两个模型各一个解码步（比赛所用提示之后的那个 token），用两种性能分析器拆开来看：`torch.profiler` 统计这一步调用的 ATen 算子（ATen 是 PyTorch 各个运算背后的 C++ 库）的次数和耗时，打开 `with_flops=True` 后还统计矩阵乘法的浮点运算次数；Python 自带的 `cProfile` 统计 Python 函数的调用次数。下一个单元格定义这两种测量（先预热一次，再分析 5 次，每个算子的自身耗时取中位数；Python 调用按定义函数的文件分组）。这些代码是测量工具，不是本课的内容，所以折叠起来。

# %% tags=["hide-input"]
import cProfile
import pstats

from torch.profiler import ProfilerActivity, profile

# [en] Kineto, the engine under torch.profiler, writes a line to stderr whenever it starts or stops (log
# [en] level 5); level 6 keeps those lines out of the notebook.
# [zh] torch.profiler 底层的 Kineto 每次启动和停止时都会向 stderr 写一行日志（日志级别 5）；
# [zh] 设为级别 6，这些行就不会出现在笔记本里。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")
PROFILE_SESSIONS, PROFILE_STEPS = 5, 10
# [en] Calls of `step` in one profile_step: a warm-up session and PROFILE_SESSIONS more, PROFILE_STEPS
# [en] calls each, then one call under cProfile.
# [zh] 一次 profile_step 调用 `step` 的次数：预热一次、正式分析 PROFILE_SESSIONS 次，每次 PROFILE_STEPS 步，
# [zh] 最后在 cProfile 下再调用一次。
PROFILE_CALLS = (PROFILE_SESSIONS + 1) * PROFILE_STEPS + 1


# [en] Per step: each ATen operator's (calls, self time in microseconds, FLOPs); the self time is the
# [en] median over the sessions after the first, which warms up.
# [zh] 每步：每个 ATen 算子的（调用次数，自身耗时（微秒），浮点运算次数）；自身耗时取第一次（预热）之后
# [zh] 各次分析的中位数。
def aten_profile(step, sessions, steps):
    runs = []
    for _ in range(sessions + 1):
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            for _ in range(steps):
                step()
        runs.append({e.key: (e.count / steps, e.self_cpu_time_total / steps, e.flops / steps)
                     for e in prof.key_averages()})
    return {op: (calls, float(np.median([run.get(op, (0, 0, 0))[1] for run in runs[1:]])), flops)
            for op, (calls, _, flops) in runs[-1].items()}


# [en] The file of a Python function, as the tables name it.
# [zh] Python 函数所在的文件在表中的写法。
def source_of(file):
    parts = Path(file).parts
    if file == "~":
        return "<built-in>"
    if len(parts) < 2 or parts[-2].startswith("ipykernel_"):
        return "<cell>"
    for packages in ("site-packages", "dist-packages"):
        if packages in parts:
            return "/".join(parts[parts.index(packages) + 1:])
    return parts[-1] if parts[-2].startswith("python3") else "/".join(parts[-2:])


# [en] Python function calls of one call of `step`, by file.
# [zh] 调用一次 `step` 时的 Python 函数调用次数，按文件统计。
def python_calls(step):
    python = cProfile.Profile()
    python.enable()
    step()
    python.disable()
    by_source = {}
    for (file, _, _), (_, calls, *_) in pstats.Stats(python).stats.items():
        by_source[source_of(file)] = by_source.get(source_of(file), 0) + calls
    return by_source


def profile_step(step, sessions=PROFILE_SESSIONS, steps=PROFILE_STEPS):
    ops, by_source = aten_profile(step, sessions, steps), python_calls(step)
    return {"ops": ops, "python": by_source, "aten_calls": int(sum(c for c, _, _ in ops.values())),
            "aten_ms": sum(t for _, t, _ in ops.values()) / 1e3, "python_calls": sum(by_source.values()),
            "matmul_flops": int(sum(f for op, (_, _, f) in ops.items() if op in MATMUL_OPS))}

# %% [markdown] lang="en"
# Now the three steps: ours and GPT-2's with the prompt's cache of 256 positions, and, as a negative
# control for the FLOP count, ours without a cache over all 257 positions. GPT-2's cache grows with every
# call, so each of its profiled calls gets a fresh copy of the prompt's cache, `PROFILE_CALLS` copies made
# beforehand, and every profiled step reads 256 positions.

# %% [markdown] lang="zh"
# 下面分析三个解码步：我们的和 GPT-2 的，都带着提示的 256 个位置的缓存；另外再分析我们的模型不用缓存、一次处理全部 257 个位置的一次调用，作为浮点运算次数的负对照。GPT-2 的缓存每调用一次就变长，所以它每次被分析的调用都拿到提示缓存的一份新拷贝（事先准备好 `PROFILE_CALLS` 份），每个被分析的解码步读取的都是 256 个位置。

# %%
if HAVE_TRANSFORMERS:
    next_token = race_continuation[:, :1]                                                 # [1, 1]
    # [en] Each profiled GPT-2 call extends the cache it is given, so each gets its own copy of the
    # [en] prompt's cache: every profiled step then reads 256 positions, like ours.
    # [zh] 每次被分析的 GPT-2 调用都会加长传给它的缓存，所以每次都拿到提示缓存的一份独立拷贝：
    # [zh] 这样每个被分析的解码步都和我们的一样，读取 256 个位置。
    gpt2_caches = [copy.deepcopy(gpt2_prefix) for _ in range(PROFILE_CALLS)]
    with torch.inference_mode():
        step_profile = {
            "ours": profile_step(lambda: model(next_token, ours_prefix)),
            "gpt2": profile_step(lambda: gpt2_32(input_ids=next_token, past_key_values=gpt2_caches.pop(),
                                                 use_cache=True)),
            "ours_no_cache": profile_step(lambda: model(race_stream[:, :PEER_PROMPT + 1]), sessions=1, steps=1),
        }
    per_step = {"ours": race_timing["ours"]["p50"] / CONTINUATION, "gpt2": race_timing["gpt2"]["p50"] / CONTINUATION}
    say_table([[f"`{name}`", f"{per_step[key]:.3f}" if key in per_step else "-", str(step_profile[key]["aten_calls"]),
                f"{step_profile[key]['aten_ms']:.3f}", f"{step_profile[key]['python_calls']:,}",
                f"{step_profile[key]['matmul_flops']:,}"]
               for key, name in [("ours", "model(next_token, ours_prefix)"),
                                 ("gpt2", "gpt2_32(input_ids=next_token, past_key_values=copy)"),
                                 ("ours_no_cache", "model(race_stream[:, :257])")]],
              en=["one decode step", "time per step, race p50 / 16 (ms)", "ATen op calls",
                  "time in ATen ops, profiled (ms)", "Python function calls", "matrix-product FLOPs"],
              zh=["一个解码步", "每步耗时（比赛 p50 / 16，毫秒）", "ATen 算子调用次数", "ATen 算子内耗时（性能分析器下，毫秒）",
                  "Python 函数调用次数", "矩阵乘法浮点运算次数"])
    # [en] The same matrix arithmetic in both models; without the cache, orders of magnitude more.
    # [zh] 两个模型的矩阵运算完全相同；不用缓存时则多出几个数量级。
    ours_flops = step_profile["ours"]["matmul_flops"]
    assert step_profile["gpt2"]["matmul_flops"] == ours_flops and step_profile["ours_no_cache"]["matmul_flops"] > 100 * ours_flops

# %% [markdown] lang="en"
# Which operations, and where do the Python calls go? The next cell, folded, prints two tables: the ATen
# operations that took the most time in either step (calls per step and profiled microseconds per step),
# and the Python function calls of one step, grouped by the file that defines the function (`<built-in>`:
# functions implemented in C, with no Python source file; `<cell>`: functions defined in this notebook's
# cells).

# %% [markdown] lang="zh"
# 具体是哪些算子？Python 调用又花在了哪里？下一个单元格（代码已折叠）打印两张表：第一张列出在任一步中耗时最多的 ATen 算子（每步的调用次数和分析器下每步的微秒数），第二张把一步中的 Python 函数调用按定义该函数的文件分组统计：表中 `<built-in>` 指内置函数（用 C 实现，没有 Python 源文件），`<cell>` 指本笔记本单元格里定义的函数。

# %% tags=["hide-input"]
if HAVE_TRANSFORMERS:
    ours_ops, gpt2_ops = step_profile["ours"]["ops"], step_profile["gpt2"]["ops"]
    none = (0, 0.0, 0)
    top_ops = sorted(set(ours_ops) | set(gpt2_ops),
                     key=lambda op: -max(ours_ops.get(op, none)[1], gpt2_ops.get(op, none)[1]))[:10]
    say_table([[f"`{op}`", f"{ours_ops.get(op, none)[0]:g}", f"{ours_ops.get(op, none)[1]:.0f}",
                f"{gpt2_ops.get(op, none)[0]:g}", f"{gpt2_ops.get(op, none)[1]:.0f}"] for op in top_ops],
              en=["ATen op", "ours: calls", "ours: time (us)", "GPT-2: calls", "GPT-2: time (us)"],
              zh=["ATen 算子", "我们的：调用次数", "我们的：耗时（微秒）", "GPT-2：调用次数", "GPT-2：耗时（微秒）"])
    ours_python, gpt2_python = step_profile["ours"]["python"], step_profile["gpt2"]["python"]
    top_sources = sorted(set(ours_python) | set(gpt2_python),
                         key=lambda source: -max(ours_python.get(source, 0), gpt2_python.get(source, 0)))[:10]
    say_table([[f"`{source}`", str(ours_python.get(source, 0)), str(gpt2_python.get(source, 0))] for source in top_sources],
              en=["file of the Python function", "ours: calls", "GPT-2: calls"],
              zh=["Python 函数所在的文件", "我们的：调用次数", "GPT-2：调用次数"])

# %% [markdown] lang="en"
# How to read these tables. **The arithmetic is the same.** Both steps do
# {{run:profile.matmul_flops:,}} floating-point operations in matrix products, against
# {{run:profile.no_cache_flops:,}} when the 257 positions are recomputed without a cache
# ({{run:profile.no_cache_ratio:,.0f}} times as many: the work of recomputing every position this naive
# way, the dense score matrix and the logits of all 257 positions included). They launch about as many
# ATen operations, {{run:profile.ours_ops}} for ours and {{run:profile.gpt2_ops}} for GPT-2. Ours has more
# for two reasons: each `nn.Linear` goes through `aten::linear` and a transpose before `aten::addmm`,
# while `Conv1D` calls `addmm` directly; and GPT-2's `c_attn` computes Q, K and V in one product where
# ours makes three, so GPT-2 does the same FLOPs in fewer calls (compare the `addmm` rows of the first
# table).
#
# **The time outside the operations is what differs.** In both steps the most time goes to the same
# operations: the projections, GELU, the concatenation that grows the cache and the attention products.
# Yet the profiled time inside all ATen operations is {{run:profile.ours_aten_ms:.2f}} ms for ours and
# {{run:profile.gpt2_aten_ms:.2f}} ms for GPT-2 (GPT-2's minus ours: {{run:profile.aten_diff_ms:+.2f}} ms),
# while in the race GPT-2's step took {{run:race.gap_step_ms:.2f}} ms longer than ours. Even if all of a
# positive difference inside the operations were real, at least {{run:profile.outside_ms:.2f}} ms of the
# gap lies outside them, around the operations. (Profiled times include the profiler's own cost per
# operation, so they serve only for comparisons like this one and can exceed the race's step times; the
# counts are exact.)
#
# **Around the operations: Python.** One step of `GPT2LMHeadModel` makes {{run:profile.gpt2_python:,}}
# Python function calls, ours {{run:profile.ours_python:,}}. The second table shows where the extra calls
# come from: the library's general machinery (reads of configuration fields, the output dataclasses, the
# cache object's methods). A rough check: {{run:profile.outside_ms:.2f}} ms spread over
# {{run:profile.extra_python:,}} extra calls is {{run:profile.us_per_extra_call:.1f}} µs per call, a
# plausible cost for a Python function call plus the little work each does (reading a configuration
# field, filling an output dataclass). That is the inference announced above, not a timing: we do not time
# the Python on its own, because no tool here can without distorting it (`cProfile` adds a cost to every
# call it counts; under `torch.profiler` the time outside the operators also holds the profiler's
# bookkeeping). It is also why the race says nothing about speed at real sizes: at GPT-2 small's width of
# 768, each projection does $(768 / 64)^2 = 144$ times the work of ours, while the Python around it stays
# the same.

# %% [markdown] lang="zh"
# 怎样读这几张表？**运算相同。** 两个解码步的矩阵乘法中都有 {{run:profile.matmul_flops:,}} 次浮点运算；而不用缓存、把 257 个位置全部重算一遍时，则需要 {{run:profile.no_cache_flops:,}} 次（是前者的 {{run:profile.no_cache_ratio:,.0f}} 倍，这是用这种朴素方式重算每个位置的计算量，包括稠密的分数矩阵和全部 257 个位置的 logits）。两者调用的 ATen 算子数目相近：我们的 {{run:profile.ours_ops}} 次，GPT-2 的 {{run:profile.gpt2_ops}} 次。我们的多一些，原因有两个：每个 `nn.Linear` 都要先经过 `aten::linear` 和一次转置，再调用 `aten::addmm`，而 `Conv1D` 直接调用 `addmm`；GPT-2 的 `c_attn` 用一次矩阵乘法算出 Q、K、V，我们的则要三次：浮点运算次数相同，GPT-2 的调用次数却更少（可比较第一张表中 `addmm` 那一行）。
#
# **不同的是算子之外的时间。** 两个解码步的时间都主要花在同样的运算上：各个投影、GELU、加长缓存的拼接以及注意力中的矩阵乘法。然而在性能分析器下，全部 ATen 算子内的耗时，我们的为 {{run:profile.ours_aten_ms:.2f}} 毫秒，GPT-2 的为 {{run:profile.gpt2_aten_ms:.2f}} 毫秒（GPT-2 减去我们的：{{run:profile.aten_diff_ms:+.2f}} 毫秒）；而在比赛中，GPT-2 每步比我们的多用 {{run:race.gap_step_ms:.2f}} 毫秒。即使把算子之内测得的差值全部算作真实差距，这段差距中也至少有 {{run:profile.outside_ms:.2f}} 毫秒落在算子之外。（分析器下的耗时包含分析器为每个算子付出的开销，所以只适合做这样的比较，也可能比比赛中一步的耗时还长；只有调用次数是精确的。）
#
# **算子之外：Python 代码。** `GPT2LMHeadModel` 的一个解码步要调用 {{run:profile.gpt2_python:,}} 次 Python 函数，我们的只有 {{run:profile.ours_python:,}} 次。第二张表列出了多出来的调用来自哪里：库的通用机制（读取配置项、输出用的数据类、缓存对象的方法）。粗略核算一下：{{run:profile.outside_ms:.2f}} 毫秒分摊到多出的 {{run:profile.extra_python:,}} 次调用上，每次约 {{run:profile.us_per_extra_call:.1f}} 微秒；对一次 Python 函数调用再加上它所做的一点点工作（读取一个配置项、填写一个输出数据类）来说，这个开销是合理的。这就是前面说的推断，而不是计时：我们没有单独给 Python 代码计时，因为这里没有哪种工具能做到而不扭曲结果（`cProfile` 给它统计的每次调用都加上一份开销；在 `torch.profiler` 下，算子之外的时间又包含了分析器的记录工作）。也正因如此，这场比赛说明不了实际规模下的速度：最小的 GPT-2（124M）的宽度是 768，它的每个投影的计算量是我们的 $(768 / 64)^2 = 144$ 倍，而包在外面的 Python 代码并不随之增加。

# %% tags=["prose-values"]
# [en] The part of the race's per-step gap that even the profiled ATen difference cannot account for.
# [zh] 比赛中每步的差距里，连分析器测得的 ATen 差值也解释不了的那一部分。
profile_outside_ms = ((race_timing["gpt2"]["p50"] - race_timing["ours"]["p50"]) / CONTINUATION
                      - max(step_profile["gpt2"]["aten_ms"] - step_profile["ours"]["aten_ms"], 0.0)
                      ) if HAVE_TRANSFORMERS else None
{"profile": {
    "matmul_flops": step_profile["ours"]["matmul_flops"], "no_cache_flops": step_profile["ours_no_cache"]["matmul_flops"],
    "no_cache_ratio": step_profile["ours_no_cache"]["matmul_flops"] / step_profile["ours"]["matmul_flops"],
    "ours_ops": step_profile["ours"]["aten_calls"], "gpt2_ops": step_profile["gpt2"]["aten_calls"],
    "ours_python": step_profile["ours"]["python_calls"], "gpt2_python": step_profile["gpt2"]["python_calls"],
    "ours_aten_ms": step_profile["ours"]["aten_ms"], "gpt2_aten_ms": step_profile["gpt2"]["aten_ms"],
    "aten_diff_ms": step_profile["gpt2"]["aten_ms"] - step_profile["ours"]["aten_ms"],
    "extra_python": step_profile["gpt2"]["python_calls"] - step_profile["ours"]["python_calls"],
    "outside_ms": profile_outside_ms,
    "us_per_extra_call": 1e3 * profile_outside_ms
                         / (step_profile["gpt2"]["python_calls"] - step_profile["ours"]["python_calls"]),
}} if HAVE_TRANSFORMERS else {}
