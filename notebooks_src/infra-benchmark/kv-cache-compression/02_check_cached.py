# %% [markdown] lang="en"
# **The check every exact variant must pass.** `run_chunked` is the cached path: it feeds the tokens in chunks,
# each call with the cache the previous call returned. `check_cached` compares it with one full call over the
# whole stream (of the same model, or of a `reference` model when the definition lives elsewhere): every logit at
# every position, and every tensor the caches hold at the end (the positions bit for bit, the values within the
# dtype's tolerance `TOLERANCE`). A cache shared by several layers is compared once. The grid is the suite's:
# batch 1 and 2, chunks of 1, 2 and 5 tokens, FP32 and FP64, on a fixed stream of 24 tokens; the FP64 run
# converts the same weights.

# %% [markdown] lang="zh"
# **每种精确变体都必须通过的检查。** `run_chunked` 是缓存路径：把 token 按分块送入，每次调用都带上前一次返回的缓存。`check_cached` 把它与一次覆盖整条序列的完整调用相比较（调用的是同一个模型；若定义写在别处，则调用 `reference` 模型）：比较每个位置上的每个 logit，以及最后各缓存中保存的每个张量（位置必须逐比特相同，数值则在该精度的容差 `TOLERANCE` 内一致）。被几层共享的缓存只比较一次。网格沿用本系列的设置：batch 为 1 和 2，分块长度为 1、2、5 个 token，FP32 和 FP64，序列是固定的 24 个 token；FP64 运行时转换的是同一份权重。

# %%
STREAM_LEN = 24
STREAM = torch.randint(0, llama_cfg.vocab, (2, STREAM_LEN), generator=torch.Generator().manual_seed(SEED))
GRID = [(dtype, batch, chunk) for dtype in (torch.float32, torch.float64) for batch in (1, 2) for chunk in (1, 2, 5)]


@torch.inference_mode()
def run_chunked(net, ids, chunk: int):
    # [en] The cached path: feed ids in chunks, each call with the cache returned by the previous one.
    # [zh] 缓存路径：把 ids 分块送入，每次调用都带上前一次返回的缓存。
    pieces, cache = [], None
    for start in range(0, ids.shape[1], chunk):
        logits, cache = net(ids[:, start:start + chunk], cache)
        pieces.append(logits)
    return torch.cat(pieces, dim=1), cache


def distinct(cache: list) -> list:
    # [en] Each cache object once, in layer order (shared caches appear in several layers).
    # [zh] 每个缓存对象只取一次，按层的顺序（共享的缓存会出现在好几层）。
    return list({id(c): c for c in cache}.values())


@torch.inference_mode()
def check_cached(make, batch: int, chunk: int, dtype, reference=None) -> dict:
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
# `run_grid` runs the 12 configurations; `summary_table` shows one row per variant: how many configurations passed
# and the largest logit and cache errors in each dtype.

# %% [markdown] lang="zh"
# `run_grid` 运行 12 种配置；`summary_table` 每种变体显示一行：通过了几种配置，以及每种精度下 logits 和缓存的最大误差。

# %%
def run_grid(make, reference=None) -> list[dict]:
    return [check_cached(make, batch, chunk, dtype, reference) for dtype, batch, chunk in GRID]


def largest(rows: list[dict], dtype: str, key: str = "max_abs_logit_err") -> float:
    return max(r[key] for r in rows if r["dtype"] == dtype)


def summary_table(grids: dict) -> None:
    # [en] One row per variant: configurations passed, largest logit and cache errors in FP32 and FP64.
    # [zh] 每种变体一行：通过的配置数，FP32 和 FP64 下 logits 与缓存的最大误差。
    say_table([[name, f"{sum(r['passed'] for r in rows)}/{len(rows)}",
                f"{largest(rows, 'fp32'):.1e}", f"{largest(rows, 'fp64'):.1e}",
                f"{largest(rows, 'fp32', 'max_abs_cache_err'):.1e}", f"{largest(rows, 'fp64', 'max_abs_cache_err'):.1e}"]
               for name, rows in grids.items()],
              en=["variant", "passed", "logits, FP32", "logits, FP64", "cache, FP32", "cache, FP64"],
              zh=["变体", "通过", "logits（FP32）", "logits（FP64）", "缓存（FP32）", "缓存（FP64）"])

# %% [markdown] lang="en"
# **Criterion: the Llama-shaped decoder's cache is exact.** The base model (GQA with 2 K/V heads, RoPE, a
# `FullKV` per layer) must pass all 12 configurations. The table shows the grid once in full; later sections
# show one summary row per variant (the full grids are in `results.json`).

# %% [markdown] lang="zh"
# **判据：Llama 结构解码器的缓存是精确的。** 基础模型（2 个 K/V 头的 GQA、RoPE、每层一个 `FullKV`）必须通过全部 12 种配置。下表把网格完整地列出一次；后面各节每种变体只列一行汇总（完整的网格保存在 `results.json` 中）。

# %%
BASE_GRID = run_grid(lambda: build(llama_cfg, lambda i: Attention(llama_cfg)))
say_table([[str(r["batch"]), str(r["chunk"]), r["dtype"], f"{r['max_abs_logit_err']:.1e}", f"{r['max_abs_cache_err']:.1e}",
            f"`{r['passed']}`"] for r in BASE_GRID],
          en=["batch", "chunk", "dtype", "max abs logit error", "max abs cache error", "passed"],
          zh=["batch", "分块长度", "精度", "logits 最大绝对误差", "缓存最大绝对误差", "通过"])
assert all(r["passed"] for r in BASE_GRID)

# %% [markdown] lang="en"
# **Negative control: every call starts counting at 0.** The classic cache bug, kept as the control that shows
# this check can fail: the layer rotates (and masks) each call's tokens as if the chunk began the sequence. The
# full call is unaffected (it starts at 0 anyway), the cached path is not. The check must fail for every chunk
# length; every control of this notebook is recorded in `CONTROLS` with what it measured and whether it was caught.

# %% [markdown] lang="zh"
# **负对照：每次调用都从 0 开始计数。** 这是缓存最经典的错误，留作负对照，用来说明这项检查确实可能失败：注意力层把每次调用的 token 都当作序列的开头来旋转（并构造掩码）。完整调用不受影响（它本来就从 0 开始），缓存路径则不然。无论分块长度是多少，检查都必须失败。本笔记本的每个负对照都记录在 `CONTROLS` 中，包括它测得的数值以及是否被查出。

# %%
class RestartsAtZero(Attention):
    # [en] WRONG on purpose: positions restart at 0 in every call.
    # [zh] 故意写错：每次调用的位置都从 0 重新开始。
    def forward(self, x, positions, cache):
        return super().forward(x, positions - positions[0], cache)


restart_rows = [check_cached(lambda: build(llama_cfg, lambda i: RestartsAtZero(llama_cfg)), 1, chunk, torch.float32)
                for chunk in (1, 2, 5)]
CONTROLS = {"positions_restart_at_zero": {
    "section": 4, "check": "check_cached", "max_abs_logit_err": min(r["max_abs_logit_err"] for r in restart_rows),
    "caught": not any(r["passed"] for r in restart_rows)}}
say(en=f"Positions restarting at 0: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['positions_restart_at_zero']['max_abs_logit_err']:.2f}): caught.",
    zh=f"位置每次从 0 重新开始：分块长度为 1、2、5 时检查全部失败（logits 误差最小也有 "
       f"{CONTROLS['positions_restart_at_zero']['max_abs_logit_err']:.2f}）：已查出。")
assert CONTROLS["positions_restart_at_zero"]["caught"]
