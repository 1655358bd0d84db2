# %% [markdown] lang="en"
# **The check every exact variant must pass.** `run_chunked` is the cached path: it feeds the tokens in
# chunks, each call with the cache the previous call returned (a chunk may be one length, or a list of
# lengths). `check_cached` compares it with one full call over the whole stream, of the same model or of a
# `reference` model: every logit at every position, and every tensor the caches hold at the end, the
# positions bit for bit (they are integers) and the keys and values within the dtype's tolerance
# `TOLERANCE`. The stream is fixed: 2 rows of 24 tokens. (`distinct` makes sure that a cache several layers
# share is compared only once.)

# %% [markdown] lang="zh"
# **每种精确变体都必须通过的检查。** `run_chunked` 是缓存路径：把 token 按分块送入，每次调用都带上前一次返回的缓存（分块可以是同一个长度，也可以是一串长度）。`check_cached` 把它与覆盖整条序列的一次完整调用相比较；做这次完整调用的，可以是同一个模型，也可以是另行指定的参照模型 `reference`。比较的内容是每个位置上的每个 logit，以及最后各缓存中保存的每个张量：位置是整数，必须逐比特相同；键和值则在该精度的容差 `TOLERANCE` 内一致。序列是固定的：2 行，每行 24 个 token。（被几层共享的缓存由 `distinct` 保证只比较一次。）

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
