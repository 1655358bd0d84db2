# %% [markdown] lang="en"
# **What one step costs.** If the arithmetic is the same, where does the difference come from? The
# cell takes one decode step of each model, the token after the race's prompt, and looks inside with
# two profilers. `torch.profiler` records every ATen operation the step launches (ATen is the C++
# library behind PyTorch's operators): how many calls, how long each kind took, and, with
# `with_flops=True`, the floating-point operations of the matrix products (`aten::mm`, `aten::addmm`,
# `aten::bmm`). Python's own `cProfile` counts the Python function calls. Profilers slow a step down,
# so their times serve only to compare one kind of operation with another; the time per step comes from
# the race. As a negative control for the FLOP count, the same step is also computed without a cache,
# over all 257 positions.

# %% [markdown] lang="zh"
# **一步的开销都花在哪里。** 既然运算相同，差距从何而来？下面的单元格取两个模型各一个解码步（比赛所用提示之后的那个 token），用两种性能分析器拆开来看。`torch.profiler` 记录这一步调用的每个 ATen 算子（ATen 是 PyTorch 各个运算背后的 C++ 库）：调用了多少次，每类算子耗时多少；打开 `with_flops=True` 后，它还统计矩阵乘法（`aten::mm`、`aten::addmm`、`aten::bmm`）的浮点运算次数。Python 自带的 `cProfile` 则统计 Python 函数的调用次数。性能分析器会拖慢被测的那一步，所以它给出的时间只用来比较不同算子之间的相对开销；每步的耗时以比赛的结果为准。作为浮点运算次数的负对照，同一步还会在不用缓存的情况下重算一遍，覆盖全部 257 个位置。

# %%
import cProfile
import pstats

from torch.profiler import ProfilerActivity, profile

# [en] Kineto, the engine under torch.profiler, writes a line to stderr at every start and stop (its log
# [en] level 5); level 6 keeps those lines out of the notebook.
# [zh] torch.profiler 底层的 Kineto 每次启动和停止时都会向 stderr 写一行日志（日志级别 5）；
# [zh] 设为级别 6，这些行就不会出现在笔记本里。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


# [en] Where a Python function lives, for the table: the last two parts of its file's path (the name
# [en] alone for the standard library), "<built-in>" for functions written in C, "<cell>" for the
# [en] notebook's own cells.
# [zh] Python 函数所在的文件，供表格使用：取文件路径的最后两段（标准库只取文件名）；用 C 写的函数记为
# [zh] "<built-in>"，本笔记本自己的单元格记为 "<cell>"。
def source_of(file):
    parts = Path(file).parts
    if file == "~":
        return "<built-in>"
    if len(parts) < 2 or parts[-2].startswith("ipykernel_"):
        return "<cell>"
    return parts[-1] if parts[-2].startswith("python3") else "/".join(parts[-2:])


# [en] `step` under torch.profiler, `steps` calls per session and `sessions` sessions: per ATen op, calls
# [en] and FLOPs per step, and self time per step in microseconds (the median over the sessions, since
# [en] a busy machine inflates some sessions). Then one call under cProfile: Python function calls per
# [en] source file. A first session is thrown away: the profiler's own start-up lands in it.
# [zh] 在 torch.profiler 下调用 `step`：每次会话调用 `steps` 次，共 `sessions` 次会话。按 ATen 算子统计每步的
# [zh] 调用次数和浮点运算次数，以及每步的自身耗时（微秒，取各次会话的中位数，因为机器繁忙时个别会话会偏慢）。
# [zh] 然后在 cProfile 下调用一次：按源文件统计 Python 函数的调用次数。第一次会话不计入，
# [zh] 因为性能分析器自身的启动开销会落在它上面。
def profile_step(step, sessions=5, steps=10):
    runs = []
    for session in range(sessions + 1):
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            for _ in range(steps):
                step()
        runs.append({e.key: (e.count / steps, e.self_cpu_time_total / steps, e.flops / steps)
                     for e in prof.key_averages()})
    runs = runs[1:]
    ops = {op: (calls, float(np.median([run.get(op, (0, 0, 0))[1] for run in runs])), flops)
           for op, (calls, _, flops) in runs[0].items()}
    python = cProfile.Profile()
    python.enable()
    step()
    python.disable()
    by_source = {}
    for (file, _, _), (_, calls, *_) in pstats.Stats(python).stats.items():
        by_source[source_of(file)] = by_source.get(source_of(file), 0) + calls
    return {"ops": ops, "python": by_source, "aten_calls": int(sum(c for c, _, _ in ops.values())),
            "aten_ms": sum(t for _, t, _ in ops.values()) / 1e3, "python_calls": sum(by_source.values()),
            "matmul_flops": int(sum(f for op, (_, _, f) in ops.items() if op in MATMUL_OPS))}


if HAVE_TRANSFORMERS:
    next_token = race_continuation[:, :1]                                                 # [1, 1]
    # [en] A fresh copy of the prompt's cache for every GPT-2 call, so every profiled step reads 256 positions.
    # [zh] GPT-2 的每次调用都用提示缓存的一份新拷贝，这样每个被分析的解码步读取的都是 256 个位置。
    gpt2_caches = [copy.deepcopy(gpt2_prefix) for _ in range(61)]
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
              en=["one decode step", "time, race p50 / 16 (ms)", "ATen op calls", "time in ATen ops, profiled (ms)",
                  "Python function calls", "matrix-product FLOPs"],
              zh=["一个解码步", "耗时，比赛 p50 / 16（毫秒）", "ATen 算子调用次数", "ATen 算子内耗时，分析器下（毫秒）",
                  "Python 函数调用次数", "矩阵乘法浮点运算次数"])
    # [en] The same matrix arithmetic in both models; without the cache, orders of magnitude more.
    # [zh] 两个模型的矩阵运算完全相同；不用缓存时则多出几个数量级。
    ours_flops = step_profile["ours"]["matmul_flops"]
    assert step_profile["gpt2"]["matmul_flops"] == ours_flops and step_profile["ours_no_cache"]["matmul_flops"] > 100 * ours_flops

# %% [markdown] lang="en"
# Which operations, and where do the Python calls go? The first table lists the ATen operations that
# took the most time in either step (calls per step and profiled microseconds per step), the second the
# Python function calls of one step, grouped by the file that defines the function (`<built-in>`:
# functions written in C; `<cell>`: this notebook's own code).

# %% [markdown] lang="zh"
# 具体是哪些算子？Python 调用又花在了哪里？第一张表列出在任一步中耗时最多的 ATen 算子（每步的调用次数和分析器下每步的微秒数），第二张表把一步中的 Python 函数调用按定义该函数的文件分组统计（`<built-in>` 表示用 C 写的函数，`<cell>` 表示本笔记本自己的代码）。

# %%
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
# How to read these tables. Both steps do exactly the same matrix arithmetic,
# {{run:profile.matmul_flops:,}} floating-point operations in matrix products, against
# {{run:profile.no_cache_flops:,}} when the 257 positions are recomputed without a cache
# ({{run:profile.no_cache_ratio:,.0f}} times as many: the work the cache saves). They launch about as many
# ATen operations, {{run:profile.ours_ops}} for ours and {{run:profile.gpt2_ops}} for GPT-2 (ours has more
# because each `nn.Linear` goes through `aten::linear` and a transpose before `aten::addmm`, while
# `Conv1D` calls `addmm` directly), and the same kinds of operation take the most time in both: the
# projections, GELU, the concatenation that grows the cache and the attention products. The profiled
# times inside those operations, {{run:profile.ours_aten_ms:.2f}} ms for ours and
# {{run:profile.gpt2_aten_ms:.2f}} ms for GPT-2, include the profiler's own overhead and the noise of a
# shared machine; the counts are exact.
#
# What differs, and by a wide margin, is the Python around the operations. One step of `GPT2LMHeadModel` makes
# {{run:profile.gpt2_python:,}} Python function calls, ours {{run:profile.ours_python:,}}. The second table
# shows where the extra calls come from: the general machinery of the library, such as configuration
# lookups (`configuration_utils.py`), output objects (`dataclasses.py`, `utils/generic.py`) and the cache
# object (`cache_utils.py`), and the built-in functions they call. At this toy size a matrix product
# takes a few microseconds (first table), so per-call overhead weighs as much as arithmetic, and it
# decides the race. That is why the race says nothing about speed at real sizes: at GPT-2 small's width
# of 768, each projection does $(768 / 64)^2 = 144$ times the work of ours, while the Python around it
# stays the same.

# %% [markdown] lang="zh"
# 怎样读这几张表？两个解码步做的矩阵运算完全相同：矩阵乘法中都有 {{run:profile.matmul_flops:,}} 次浮点运算；而不用缓存、把 257 个位置全部重算一遍时，则需要 {{run:profile.no_cache_flops:,}} 次（是前者的 {{run:profile.no_cache_ratio:,.0f}} 倍，这就是缓存省下的计算）。两者调用的 ATen 算子数目相近：我们的 {{run:profile.ours_ops}} 次，GPT-2 的 {{run:profile.gpt2_ops}} 次（我们的多一些，因为每个 `nn.Linear` 都要先经过 `aten::linear` 和一次转置，再调用 `aten::addmm`，而 `Conv1D` 直接调用 `addmm`）。两者耗时最多的也是同几类运算：各个投影、GELU、加长缓存的拼接，以及注意力中的矩阵乘法。在性能分析器下测得的算子内耗时，我们的为 {{run:profile.ours_aten_ms:.2f}} 毫秒，GPT-2 的为 {{run:profile.gpt2_aten_ms:.2f}} 毫秒；这些时间包含了分析器自身的开销，也受到机器上其他负载的干扰，只有调用次数是精确的。
#
# 真正拉开差距的，是算子之外的 Python 代码。`GPT2LMHeadModel` 的一个解码步要调用 {{run:profile.gpt2_python:,}} 次 Python 函数，我们的只有 {{run:profile.ours_python:,}} 次。第二张表显示了多出来的调用来自哪里：库的通用机制，例如查询配置（`configuration_utils.py`）、构造输出对象（`dataclasses.py`、`utils/generic.py`）、维护缓存对象（`cache_utils.py`），以及它们调用的内置函数。在玩具规模下，一次矩阵乘法只需几微秒（见第一张表），每次调用的固定开销与运算本身的分量相当，比赛的胜负就由它决定。正因如此，这场比赛说明不了实际规模下的速度：GPT-2 small 的宽度是 768，它的每个投影的计算量是我们的 $(768 / 64)^2 = 144$ 倍，而包在外面的 Python 代码并不随之增加。

# %% tags=["prose-values"]
{"profile": {
    "matmul_flops": step_profile["ours"]["matmul_flops"], "no_cache_flops": step_profile["ours_no_cache"]["matmul_flops"],
    "no_cache_ratio": step_profile["ours_no_cache"]["matmul_flops"] / step_profile["ours"]["matmul_flops"],
    "ours_ops": step_profile["ours"]["aten_calls"], "gpt2_ops": step_profile["gpt2"]["aten_calls"],
    "ours_python": step_profile["ours"]["python_calls"], "gpt2_python": step_profile["gpt2"]["python_calls"],
    "ours_aten_ms": step_profile["ours"]["aten_ms"], "gpt2_aten_ms": step_profile["gpt2"]["aten_ms"],
}} if HAVE_TRANSFORMERS else {}
