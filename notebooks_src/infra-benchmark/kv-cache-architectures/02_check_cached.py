# %% [markdown] lang="en"
# **The check every exact variant must pass.** `run_chunked` is the cached path: it feeds the tokens in
# chunks, each call with the cache the previous call returned (a chunk may be one length, or a list of
# lengths). `check_cached` compares it with one full call over the whole stream, of the same model or of a
# `reference` model: every logit at every position, and every tensor the caches hold at the end, the
# positions bit for bit (they are integers) and the keys and values within the dtype's tolerance
# `TOLERANCE`. A cache that several layers share is compared once. The stream is fixed: 2 rows of 24 tokens.

# %% [markdown] lang="zh"
# **每种精确变体都必须通过的检查。** `run_chunked` 是缓存路径：把 token 按分块送入，每次调用都带上前一次返回的缓存（分块可以是同一个长度，也可以是一串长度）。`check_cached` 把它与一次覆盖整条序列的完整调用相比较；调用的可以是同一个模型，也可以是 `reference` 参照模型。比较的内容是每个位置上的每个 logit，以及最后各缓存中保存的每个张量：位置是整数，必须逐比特相同；键和值则在该精度的容差 `TOLERANCE` 内一致。被几层共享的缓存只比较一次。序列是固定的：2 行，每行 24 个 token。

# %%
STREAM_LEN = 24
STREAM = torch.randint(0, ArchConfig().vocab, (2, STREAM_LEN), generator=torch.Generator().manual_seed(SEED))
GRID = [(dtype, batch, chunk) for dtype in (torch.float32, torch.float64) for batch in (1, 2) for chunk in (1, 2, 5)]


def chunk_lengths(total: int, chunk) -> list[int]:
    return [min(chunk, total - start) for start in range(0, total, chunk)] if isinstance(chunk, int) else list(chunk)


@torch.inference_mode()
def run_chunked(net, ids, chunk):
    # [en] The cached path: feed ids in chunks, each call with the cache returned by the previous one.
    # [zh] 缓存路径：把 ids 分块送入，每次调用都带上前一次返回的缓存。
    pieces, cache, start = [], None, 0
    for length in chunk_lengths(ids.shape[1], chunk):
        logits, cache = net(ids[:, start:start + length], cache)
        pieces.append(logits)
        start += length
    return torch.cat(pieces, dim=1), cache


def distinct(cache: list) -> list:
    # [en] Each cache object once, in layer order (a shared cache appears in several layers).
    # [zh] 每个缓存对象只取一次，按层的顺序（共享的缓存会出现在好几层）。
    return list({id(c): c for c in cache}.values())


@torch.inference_mode()
def check_cached(make, batch: int, chunk, dtype=torch.float32, reference=None) -> dict:
    net = make().to(dtype)
    ref = net if reference is None else reference().to(dtype)
    ids = STREAM[:batch]
    full_logits, full_cache = ref(ids)
    cached_logits, cache = run_chunked(net, ids, chunk)
    same_positions, pairs = True, []
    for mine, theirs in zip(distinct(cache), distinct(full_cache)):
        (k, v, pos), (k_ref, v_ref, pos_ref) = mine.contents(), theirs.contents()
        same_positions &= torch.equal(pos, pos_ref)
        pairs += [(k, k_ref), (v, v_ref)]
    return {"batch": batch, "chunk": chunk, "dtype": DTYPE_NAME[dtype],
            "max_abs_logit_err": max_abs_err(cached_logits, full_logits),
            "max_abs_cache_err": max((max_abs_err(a, b) for a, b in pairs if a.shape == b.shape), default=0.0),
            "passed": bool(close(cached_logits, full_logits) and same_positions and all(close(a, b) for a, b in pairs))}


# %% [markdown] lang="en"
# One call first: a GQA model with 2 K/V heads, batch 2, chunks of 5 tokens, FP32. `check_cached` returns one
# row: the largest logit error, the largest error of the cached tensors, and whether both paths agreed.

# %% [markdown] lang="zh"
# 先看一次调用：一个有 2 个 K/V 头的 GQA 模型，batch 为 2，分块长度为 5，FP32。`check_cached` 返回一行结果：logits 的最大绝对误差、缓存张量的最大绝对误差，以及两条路径是否一致。

# %%
FIRST_CHECK = check_cached(lambda: build(ArchConfig(kv_heads=2)), batch=2, chunk=5)
say(en=f"One call of `check_cached`: largest logit error {FIRST_CHECK['max_abs_logit_err']:.1e}, largest cache error "
       f"{FIRST_CHECK['max_abs_cache_err']:.1e}: {'the two paths agree' if FIRST_CHECK['passed'] else 'the two paths disagree'}.",
    zh=f"调用一次 `check_cached`：logits 的最大绝对误差为 {FIRST_CHECK['max_abs_logit_err']:.1e}，缓存的最大绝对误差为 "
       f"{FIRST_CHECK['max_abs_cache_err']:.1e}，{'两条路径一致' if FIRST_CHECK['passed'] else '两条路径不一致'}。")

# %% [markdown] lang="en"
# One configuration proves little: a bug may show only for one chunk length, one batch size or one dtype. So
# every exact variant runs the series' grid `GRID` through `run_grid`: batch 1 and 2, chunks of 1, 2 and 5
# tokens, FP32 and FP64, 12 configurations (the FP64 runs convert the same weights). `run_control` runs a
# negative control, a model broken on purpose: the same check on batch 1 in FP32 with chunks of 1, 2 and 5,
# caught when every run fails. `CONTROLS` collects every negative control of the notebook: its section, the
# check that judged it, what that check measured, and whether it was caught. Three tables print them:
# `grid_table` lists the 12 configurations of one grid, `summary_table` gives one row per variant (how many
# configurations passed, and the largest logit and cache errors in each dtype), and `controls_table` one row
# per negative control.

# %% [markdown] lang="zh"
# 一种配置说明不了多少：某个错误可能只在某一种分块长度、某一种 batch 大小或某一种精度下才暴露出来。所以每种精确变体都要用 `run_grid` 跑遍本系列的网格 `GRID`：batch 为 1 和 2，分块长度为 1、2、5 个 token，FP32 和 FP64，共 12 种配置（FP64 运行时转换的是同一份权重）。`run_control` 运行一个负对照，也就是故意改坏的模型：在 batch 1、FP32 下，以分块长度 1、2、5 做同样的检查，每次运行都失败才算查出。`CONTROLS` 收集本笔记本的所有负对照：所在的节、评判它的检查、该检查测得的数值，以及是否查出。三种表格用来打印这些结果：`grid_table` 列出一个网格的全部 12 种配置；`summary_table` 每种变体只列一行（通过了几种配置，以及每种精度下 logits 和缓存的最大绝对误差）；`controls_table` 每个负对照列一行。

# %%
def run_grid(make, reference=None) -> list[dict]:
    return [check_cached(make, batch, chunk, dtype, reference) for dtype, batch, chunk in GRID]


# [en] Every negative control of the notebook, by name: its section, its check, what the check measured, whether it was caught.
# [zh] 本笔记本的每个负对照，按名称记录：所在的节、所用的检查、检查测得的数值，以及是否查出。
CONTROLS = {}


def run_control(make, reference=None, chunks=(1, 2, 5)) -> dict:
    rows = [check_cached(make, 1, chunk, torch.float32, reference) for chunk in chunks]
    return {"check": "check_cached", "chunks": list(chunks), "passed": [r["passed"] for r in rows],
            "errors": [r["max_abs_logit_err"] for r in rows], "measured": min(r["max_abs_logit_err"] for r in rows),
            "caught": not any(r["passed"] for r in rows)}


def largest(rows: list[dict], dtype: str, key: str = "max_abs_logit_err") -> float:
    return max(r[key] for r in rows if r["dtype"] == dtype)


def grid_table(rows: list[dict]) -> None:
    say_table([[str(r["batch"]), str(r["chunk"]), r["dtype"], f"{r['max_abs_logit_err']:.1e}", f"{r['max_abs_cache_err']:.1e}",
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


def controls_table(controls: dict) -> None:
    say_table([[f"`{name}`", str(c["section"]), f"`{c['check']}`", f"{c['measured']:.3g}", f"`{c['caught']}`"]
               for name, c in controls.items()],
              en=["control", "section", "check", "measured", "caught"], zh=["负对照", "节", "检查", "测得值", "查出"])
