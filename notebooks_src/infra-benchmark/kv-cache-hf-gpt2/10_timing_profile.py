# %% [markdown] lang="en"
# **What one step costs.** The answer first: one decode step of each model does the same matrix
# arithmetic, but GPT-2's step makes {{run:profile.python_ratio:.1f}} times as many Python function calls as
# ours. We take one decode step of each, the token after the race's prompt, and count with two profilers:
# Python's `cProfile` counts the function calls, grouped by the file that defines each function;
# `torch.profiler` counts the ATen operations the step launches (ATen is the C++ library behind PyTorch's
# operators) and, with `with_flops=True`, the floating-point operations of the matrix products. The next
# cell, folded, defines the two counts; it also quiets the profiler's own log lines and shortens each
# function's file path to the form the tables show.

# %% [markdown] lang="zh"
# **一步的开销都花在哪里。** 先说结论：两个模型的一个解码步所做的矩阵运算完全相同，但 GPT-2 这一步的 Python 函数调用次数是我们的 {{run:profile.python_ratio:.1f}} 倍。我们取两个模型各一个解码步（比赛所用提示之后的那个 token），用两种性能分析器统计：Python 自带的 `cProfile` 统计函数调用次数，并按定义各函数的文件分组；`torch.profiler` 统计这一步调用的 ATen 算子（ATen 是 PyTorch 各个运算背后的 C++ 库），打开 `with_flops=True` 后还统计矩阵乘法的浮点运算次数。下一个单元格（代码已折叠）定义这两种统计；它还屏蔽了性能分析器自己输出的日志行，并把函数所在文件的路径缩短成表中的写法。

# %% tags=["hide-input"]
import cProfile
import pstats

from torch.profiler import ProfilerActivity, profile

# [en] Kineto, the engine under torch.profiler, logs every start and stop to stderr below level 6.
# [zh] torch.profiler 底层的 Kineto 在日志级别低于 6 时，每次启动和停止都向 stderr 写一行。
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")
PROFILE_STEPS = 10
# [en] Calls of `step` in one profile_step: two sessions of PROFILE_STEPS (the first warms up), one under cProfile.
# [zh] 一次 profile_step 调用 `step` 的次数：两次各 PROFILE_STEPS 步的分析（第一次是预热），再在 cProfile 下调用一次。
PROFILE_CALLS = 2 * PROFILE_STEPS + 1


# [en] Per step: each ATen operator's (calls, FLOPs), from the second of two sessions.
# [zh] 每步：每个 ATen 算子的（调用次数，浮点运算次数），取两次分析中的第二次。
def aten_profile(step, steps):
    for _ in range(2):
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            for _ in range(steps):
                step()
    return {e.key: (e.count / steps, e.flops / steps) for e in prof.key_averages()}


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


def profile_step(step, steps=PROFILE_STEPS):
    ops, by_source = aten_profile(step, steps), python_calls(step)
    return {"ops": ops, "python": by_source, "aten_calls": int(sum(c for c, _ in ops.values())),
            "python_calls": sum(by_source.values()),
            "matmul_flops": int(sum(f for op, (_, f) in ops.items() if op in MATMUL_OPS))}

# %% [markdown] lang="en"
# Now three calls: the two decode steps, ours and GPT-2's, with the prompt's cache of 256 positions, and,
# as a negative control for the FLOP count, ours without a cache over all 257 positions. GPT-2's cache
# grows with every call, so each profiled GPT-2 call gets its own copy of the prompt's cache, made
# beforehand. Three cells: the profiling, the table (folded), and the check that the two decode steps do
# the same matrix arithmetic, with the uncached call as its negative control. In the table, ours launches
# somewhat more ATen operations than GPT-2: each
# `nn.Linear` is an `aten::linear` with a transpose around its product, and we compute Q, K and V with
# three products where GPT-2's `c_attn` makes one.

# %% [markdown] lang="zh"
# 下面分析三次调用：两个解码步，即我们的和 GPT-2 的，都带着提示的 256 个位置的缓存；以及我们的模型不用缓存、一次处理全部 257 个位置的一次调用，作为浮点运算次数的负对照。GPT-2 的缓存每调用一次就变长，所以每次被分析的 GPT-2 调用，都用事先准备好的提示缓存的一份独立拷贝。下面三个单元格依次是：性能分析、结果表（代码已折叠），以及断言两个解码步的矩阵运算相同的单元格（不用缓存的那次调用是它的负对照）。表中我们调用的 ATen 算子比 GPT-2 略多：每个 `nn.Linear` 都是一次 `aten::linear`，矩阵乘法前后还有转置；而且我们用三次矩阵乘法算 Q、K、V，GPT-2 的 `c_attn` 只用一次。

# %%
if HAVE_TRANSFORMERS:
    next_token = race_continuation[:, :1]                                                 # [1, 1]
    # [en] One copy of the prompt's cache per profiled GPT-2 call: every step starts from 256 positions, like ours.
    # [zh] 每次被分析的 GPT-2 调用各用一份提示缓存的拷贝：每一步都和我们的一样，从 256 个位置出发。
    gpt2_caches = [copy.deepcopy(gpt2_prefix) for _ in range(PROFILE_CALLS)]
    with torch.inference_mode():
        step_profile = {
            "ours": profile_step(lambda: model(next_token, ours_prefix)),
            "gpt2": profile_step(lambda: gpt2_32(input_ids=next_token, past_key_values=gpt2_caches.pop(),
                                                 use_cache=True)),
            "ours_no_cache": profile_step(lambda: model(race_stream[:, :PEER_PROMPT + 1]), steps=1),
        }

# %% tags=["hide-input"]
if HAVE_TRANSFORMERS:
    say_table([[f"`{name}`", f"{race_timing[key]['p50'] / CONTINUATION:.3f}" if key in race_timing else "-",
                f"{step_profile[key]['python_calls']:,}", str(step_profile[key]["aten_calls"]),
                f"{step_profile[key]['matmul_flops']:,}"]
               for key, name in [("ours", "model(next_token, ours_prefix)"),
                                 ("gpt2", "gpt2_32(input_ids=next_token, past_key_values=copy)"),
                                 ("ours_no_cache", "model(race_stream[:, :257])")]],
              en=["call profiled", "time per step, race p50 / 16 (ms)", "Python function calls",
                  "ATen op calls", "matrix-product FLOPs"],
              zh=["被分析的调用", "每步耗时（比赛 p50 / 16，毫秒）", "Python 函数调用次数",
                  "ATen 算子调用次数", "矩阵乘法浮点运算次数"])

# %%
if HAVE_TRANSFORMERS:
    # [en] The same matrix arithmetic in both models; without the cache, orders of magnitude more.
    # [zh] 两个模型的矩阵运算完全相同；不用缓存时则多出几个数量级。
    ours_flops = step_profile["ours"]["matmul_flops"]
    assert step_profile["gpt2"]["matmul_flops"] == ours_flops and step_profile["ours_no_cache"]["matmul_flops"] > 100 * ours_flops

# %% [markdown] lang="en"
# Where do the calls go? The next cell, folded, prints two tables: the function calls of one step by the
# file that defines the function, largest first, and the matrix products, whose FLOPs add up to the
# table above. The largest rows of the first table:
#
# - `<built-in>`: functions implemented in C (`dict.get`, `getattr`, `isinstance`, tensor methods), called
#   by the Python code of the other rows;
# - `torch/nn/modules/module.py`: `nn.Module.__call__`, which runs a module's `forward`, and
#   `nn.Module.__getattr__`, which finds its submodules and weights; about the same in both models;
# - `dataclasses.py`: `dataclasses.fields`, which the library's output objects (`ModelOutput`, defined in
#   `transformers/utils/generic.py`, a smaller row) call when they are built and on every field they set;
# - `transformers/integrations/heterogeneity/configuration_utils.py` and `transformers/configuration_utils.py`:
#   the `__getattribute__` of the configuration object, run on every read of a configuration field. The
#   first file appears even for GPT-2, whose layers are all alike: `PreTrainedConfig`, the base of every
#   configuration class, inherits `HeterogeneousConfigMixin` (support for per-layer configurations) and
#   with it that `__getattribute__`.
#
# `<cell>` counts the functions defined in this notebook's cells.

# %% [markdown] lang="zh"
# 函数调用都花在了哪里？下一个单元格（代码已折叠）打印两张表：第一张把一步中的函数调用按定义该函数的文件分组统计，从多到少排列；第二张列出矩阵乘法，其浮点运算次数之和就是上表中的数。第一张表中最大的几行：
#
# - `<built-in>`：用 C 实现的函数（`dict.get`、`getattr`、`isinstance` 以及张量的方法），由其他各行的 Python 代码调用；
# - `torch/nn/modules/module.py`：`nn.Module.__call__`（运行模块的 `forward`）和 `nn.Module.__getattr__`（查找子模块和权重），两个模型中的次数大致相同；
# - `dataclasses.py`：`dataclasses.fields`，库的输出对象（定义在 `transformers/utils/generic.py` 中的 `ModelOutput`，表中较小的一行）在构造时以及每设置一个字段时都要调用它；
# - `transformers/integrations/heterogeneity/configuration_utils.py` 和 `transformers/configuration_utils.py`：配置对象的 `__getattribute__`，每读一次配置项就运行一次。GPT-2 的各层完全相同，第一个文件却也出现在表中，是因为所有配置类的基类 `PreTrainedConfig` 都继承了 `HeterogeneousConfigMixin`（用于支持逐层不同的配置），也就继承了它的 `__getattribute__`。
#
# `<cell>` 指本笔记本单元格里定义的函数。

# %% tags=["hide-input"]
if HAVE_TRANSFORMERS:
    ours_python, gpt2_python = step_profile["ours"]["python"], step_profile["gpt2"]["python"]
    top_sources = sorted(set(ours_python) | set(gpt2_python),
                         key=lambda source: -max(ours_python.get(source, 0), gpt2_python.get(source, 0)))[:10]
    say_table([[f"`{source}`", str(ours_python.get(source, 0)), str(gpt2_python.get(source, 0))] for source in top_sources],
              en=["file of the Python function", "ours: calls", "GPT-2: calls"],
              zh=["Python 函数所在的文件", "我们的模型：调用次数", "GPT-2：调用次数"])
    ours_ops, gpt2_ops = step_profile["ours"]["ops"], step_profile["gpt2"]["ops"]
    say_table([[f"`{op}`"] + [f"{ops.get(op, (0, 0))[k]:,.0f}" for ops in (ours_ops, gpt2_ops) for k in (0, 1)]
               for op in MATMUL_OPS],
              en=["matrix product", "ours: calls", "ours: FLOPs", "GPT-2: calls", "GPT-2: FLOPs"],
              zh=["矩阵乘法", "我们的模型：调用次数", "我们的模型：浮点运算次数", "GPT-2：调用次数", "GPT-2：浮点运算次数"])

# %% [markdown] lang="en"
# **The arithmetic is the same.** Both steps do {{run:profile.matmul_flops:,}} floating-point operations in
# matrix products, against {{run:profile.no_cache_flops:,}} ({{run:profile.no_cache_ratio:,.0f}} times as
# many) when the 257 positions are recomputed without a cache.
#
# **The calls are not.** GPT-2's step makes {{run:profile.gpt2_python:,}} function calls, ours
# {{run:profile.ours_python:,}}. The largest single share of the {{run:profile.extra_calls:,}} extra calls,
# {{run:profile.top_extra:,}}, comes from `{{run:profile.top_extra_source}}`, most of the rest from the library's
# files listed above.
#
# GPT-2's step time minus ours (race medians): {{run:profile.step_gap_ms:.3f}} ms. Spread over the
# {{run:profile.extra_calls:,}} extra calls, that is {{run:profile.us_per_call:.1f}} µs per call. This
# division charges the whole gap to the calls, so it is an average, not the measured cost of a call: no
# tool here times Python alone without distorting it (`cProfile` adds a cost to every call it counts).

# %% [markdown] lang="zh"
# **运算相同。** 两个解码步的矩阵乘法中都有 {{run:profile.matmul_flops:,}} 次浮点运算；不用缓存、把 257 个位置全部重算一遍时则需要 {{run:profile.no_cache_flops:,}} 次（是前者的 {{run:profile.no_cache_ratio:,.0f}} 倍）。
#
# **调用次数不同。** GPT-2 的一个解码步要调用 {{run:profile.gpt2_python:,}} 次函数，我们的只有 {{run:profile.ours_python:,}} 次。在多出来的 {{run:profile.extra_calls:,}} 次调用中，单一来源占得最多的是 `{{run:profile.top_extra_source}}`，共 {{run:profile.top_extra:,}} 次，其余大多来自上面列出的库文件。
#
# 按比赛的中位数，GPT-2 每步的耗时减去我们的，得 {{run:profile.step_gap_ms:.3f}} 毫秒；平摊到多出来的 {{run:profile.extra_calls:,}} 次调用上，每次约 {{run:profile.us_per_call:.1f}} 微秒。这个除法把全部差距都算在了函数调用头上，所以它只是一个平均值，而不是一次调用的实测开销：这里没有一种工具能只给 Python 代码计时而又不扭曲结果（`cProfile` 给它统计的每次调用都加上一份开销）。

# %% [markdown] lang="en"
# The counts also explain why the race says nothing about speed at real sizes: at GPT-2 small's width of
# 768, each projection call of a layer (both dimensions of its matrix grow with the width) does
# $(768 / 64)^2 = 144$ times the work of ours and each attention product $768 / 64 = 12$ times, while a
# layer makes the same calls (its 12 layers, against our 2, multiply work and calls alike).

# %% [markdown] lang="zh"
# 这些计数也解释了为什么这场比赛反映不了实际规模下的速度。最小的 GPT-2（124M）宽度为 768：每一层中，每次投影调用的计算量是我们的 $(768 / 64)^2 = 144$ 倍（矩阵的两个维度都随宽度增长），每次注意力矩阵乘法是 $768 / 64 = 12$ 倍，而每一层的函数调用次数不变（它有 12 层，我们只有 2 层；层数增加时，运算量和调用次数按同样的倍数增长）。

# %% tags=["prose-values"]
{"profile": {
    "matmul_flops": step_profile["ours"]["matmul_flops"], "no_cache_flops": step_profile["ours_no_cache"]["matmul_flops"],
    "no_cache_ratio": step_profile["ours_no_cache"]["matmul_flops"] / step_profile["ours"]["matmul_flops"],
    "ours_python": step_profile["ours"]["python_calls"], "gpt2_python": step_profile["gpt2"]["python_calls"],
    "python_ratio": step_profile["gpt2"]["python_calls"] / step_profile["ours"]["python_calls"],
    "step_gap_ms": (race_timing["gpt2"]["p50"] - race_timing["ours"]["p50"]) / CONTINUATION,
    "extra_calls": step_profile["gpt2"]["python_calls"] - step_profile["ours"]["python_calls"],
    "top_extra_source": max(step_profile["gpt2"]["python"], key=lambda source: step_profile["gpt2"]["python"][source]
                            - step_profile["ours"]["python"].get(source, 0)),
    "top_extra": max(calls - step_profile["ours"]["python"].get(source, 0)
                     for source, calls in step_profile["gpt2"]["python"].items()),
    "us_per_call": 1e3 * (race_timing["gpt2"]["p50"] - race_timing["ours"]["p50"]) / CONTINUATION
                   / (step_profile["gpt2"]["python_calls"] - step_profile["ours"]["python_calls"]),
}} if HAVE_TRANSFORMERS else {}
