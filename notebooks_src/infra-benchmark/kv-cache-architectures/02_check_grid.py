# %% [markdown] lang="en"
# One configuration proves little: a bug may show only for one chunk length, one batch size or one dtype. So
# every exact variant runs the series' grid `GRID` through `run_grid`: batch 1 and 2, chunks of 1, 2 and 5
# tokens, FP32 and FP64, 12 configurations (the FP64 runs convert the same weights). `run_control` runs a
# negative control, a model broken on purpose: the same check on batch 1 in FP32 with chunks of 1, 2 and 5,
# caught when every run fails (a control judged another way says how in its own section). `CONTROLS` collects every negative control of the notebook: its section, the
# check that judged it, and whether it was caught. The cell is folded: `run_grid` is one loop over `GRID`, and
# `run_control` one call of `check_cached` per chunk length.

# %% [markdown] lang="zh"
# 一种配置说明不了多少：某个错误可能只在某一种分块长度、某一种 batch 大小或某一种精度下才暴露出来。所以每种精确变体都要用 `run_grid` 跑遍本系列的网格 `GRID`：batch 为 1 和 2，分块长度为 1、2、5 个 token，FP32 和 FP64，共 12 种配置（FP64 运行时转换的是同一份权重）。`run_control` 运行一个负对照，也就是故意改坏的模型：在 batch 1、FP32 下，以分块长度 1、2、5 做同样的检查，每次运行都失败才算查出（用别的方式判定的负对照，会在它所在的节里说明判定方法）。`CONTROLS` 收集本笔记本的所有负对照：所在的节、评判它的检查，以及是否查出。这个单元格已折叠：`run_grid` 只是对 `GRID` 的一个循环，`run_control` 则对每种分块长度各调用一次 `check_cached`。

# %% tags=["hide-input"]
def run_grid(make, reference=None) -> list[dict]:
    return [check_cached(make, batch, chunk, dtype, reference) for dtype, batch, chunk in GRID]


# [en] Every negative control of the notebook, by name: its section, its check, whether it was caught.
# [zh] 本笔记本的每个负对照，按名称记录：所在的节、所用的检查，以及是否查出。
CONTROLS = {}


def run_control(make, reference=None, chunks=(1, 2, 5)) -> dict:
    rows = [check_cached(make, 1, chunk, torch.float32, reference) for chunk in chunks]
    return {"check": "check_cached", "chunks": list(chunks), "passed": [r["passed"] for r in rows],
            "errors": [r["max_abs_logit_err"] for r in rows], "measured": min(r["max_abs_logit_err"] for r in rows),
            "caught": not any(r["passed"] for r in rows)}


# %% [markdown] lang="en"
# Two tables print these results (the cell only formats them, and can be skipped): `grid_table` lists the 12
# configurations of one grid, and `summary_table` gives one row per variant (how many configurations passed, and the
# largest logit and cache errors in each dtype).

# %% [markdown] lang="zh"
# 下面两种表格用来打印这些结果（这个单元格只负责排版，可以跳过）：`grid_table` 列出一个网格的全部 12 种配置；`summary_table` 每种变体只列一行（通过了几种配置，以及每种精度下 logits 和缓存的最大绝对误差）。

# %% tags=["hide-input"]
def largest(rows: list[dict], dtype: str, key: str = "max_abs_logit_err") -> float:
    return max(r[key] for r in rows if r["dtype"] == dtype)


def grid_table(rows: list[dict]) -> None:
    say_table([[str(r["batch"]), str(r["chunk"]), r["dtype"].upper(), f"{r['max_abs_logit_err']:.1e}", f"{r['max_abs_cache_err']:.1e}",
                f"`{r['passed']}`"] for r in rows],
              en=["batch", "chunk", "dtype", "max abs logit error", "max abs cache error", "passed"],
              zh=["batch", "分块长度", "精度", "logits 最大绝对误差", "缓存最大绝对误差", "通过"])


def summary_table(grids: dict) -> None:
    say_table([[name, f"{sum(r['passed'] for r in rows)}/{len(rows)}",
                f"{largest(rows, 'fp32'):.1e}", f"{largest(rows, 'fp64'):.1e}",
                f"{largest(rows, 'fp32', 'max_abs_cache_err'):.1e}", f"{largest(rows, 'fp64', 'max_abs_cache_err'):.1e}"]
               for name, rows in grids.items()],
              en=["variant", "passed", "logits, FP32", "logits, FP64", "cache, FP32", "cache, FP64"],
              zh=["变体", "通过", "logits（FP32）", "logits（FP64）", "缓存（FP32）", "缓存（FP64）"])
