# %% [markdown] lang="en"
# **The check every exact variant must pass.** `run_chunked` is the cached path: it feeds the tokens in
# chunks, each call with the cache the previous call returned (a chunk may be one length, or a list of
# lengths). `check_cached` compares it with one full call over the whole stream, of the same model or of a
# `reference` model: every logit at every position, and every tensor the caches hold at the end, the
# positions bit for bit (they are integers) and the keys and values within the dtype's tolerance
# `TOLERANCE`. A cache that several layers share is compared once. The grid is the series' own: batch 1
# and 2, chunks of 1, 2 and 5 tokens, FP32 and FP64, on a fixed stream of 24 tokens; the FP64 run converts
# the same weights. `run_control` runs a negative control: the same check on batch 1 in FP32 with chunks of
# 1, 2 and 5, caught when every run fails.

# %% [markdown] lang="zh"
# **每种精确变体都必须通过的检查。** `run_chunked` 是缓存路径：把 token 按分块送入，每次调用都带上前一次返回的缓存（分块可以是同一个长度，也可以是一串长度）。`check_cached` 把它与一次覆盖整条序列的完整调用相比较；调用的可以是同一个模型，也可以是 `reference` 参照模型。比较的内容是每个位置上的每个 logit，以及最后各缓存中保存的每个张量：位置是整数，必须逐比特相同；键和值则在该精度的容差 `TOLERANCE` 内一致。被几层共享的缓存只比较一次。网格沿用本系列的设置：batch 为 1 和 2，分块长度为 1、2、5 个 token，FP32 和 FP64，序列是固定的 24 个 token；FP64 运行时转换的是同一份权重。`run_control` 运行一个负对照：在 batch 1、FP32 下，以分块长度 1、2、5 做同样的检查，每次运行都失败才算查出。

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

# %% [markdown] lang="en"
# Three tables: `grid_table` lists the 12 configurations of one grid, `summary_table` gives one row per variant
# (how many configurations passed, and the largest logit and cache errors in each dtype), and `controls_table`
# one row per negative control.

# %% [markdown] lang="zh"
# 三种表格：`grid_table` 列出一个网格的全部 12 种配置；`summary_table` 每种变体只列一行（通过了几种配置，以及每种精度下 logits 和缓存的最大误差）；`controls_table` 每个负对照列一行。

# %%
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
