# %% [markdown] lang="en"
# ## 6. Local, global and shared layers
#
# A sliding window bounds a layer's cache: a query reads itself and the $W - 1$ positions before it, so the layer
# never needs more than the newest $W - 1$ keys (the architectures notebook proved this with one window for the
# whole model). Windowing every layer limits how far the model can look back, so recent models mix **local**
# (windowed) layers with a few **global** ones that read everything. Gemma 2 alternates them one to one (window
# 4,096); Gemma 3 uses five local layers (window 1,024) per global layer, which is also the default `layer_types`
# pattern of transformers' `Gemma3TextConfig` (every sixth layer global). The cache of such a model is a mix too:
# a ring buffer of $W - 1$ positions for each local layer, a full cache for each global one.
#
# `WindowAttention` is section 4's attention with two methods replaced: the band mask
# $p^q_i - W < p^k_j \le p^q_i$, and a `RingKV` of $W - 1$ slots as its cache.

# %% [markdown] lang="zh"
# ## 6. 局部层、全局层与共享层
#
# 滑动窗口给一层的缓存设了上限：每个查询只读取自己和前面 $W - 1$ 个位置，所以这一层最多只需要最新的 $W - 1$ 个键（架构笔记本在整个模型共用一个窗口的情形下证明了这一点）。可是每一层都加窗口，会限制模型能回看多远，因此近来的模型把**局部**（带窗口的）层和少数几个读取全部内容的**全局**层混合起来用。Gemma 2 让两者一比一交替（窗口 4,096）；Gemma 3 每个全局层配五个局部层（窗口 1,024），这也是 transformers 中 `Gemma3TextConfig` 默认的 `layer_types` 模式（每六层中有一层是全局层）。这样的模型，缓存也是混合的：每个局部层一个 $W - 1$ 个位置的环形缓冲区，每个全局层一个完整缓存。
#
# `WindowAttention` 就是第 4 节的注意力，只替换了两个方法：带状掩码 $p^q_i - W < p^k_j \le p^q_i$，以及用一个有 $W - 1$ 个槽位的 `RingKV` 作为缓存。

# %%
class WindowAttention(Attention):
    def __init__(self, c: ModelConfig, window: int):
        super().__init__(c)
        self.window = window

    def new_cache(self, caches: list):
        return RingKV(self.window - 1)

    def mask(self, query_pos, key_pos):
        # bool [T_new, T_keys]: p_q - W < p_k <= p_q
        return causal(query_pos, key_pos) & (key_pos[None, :] > query_pos[:, None] - self.window)


WINDOW = 8
print(WindowAttention(llama_cfg, 3).mask(4 + torch.arange(2), torch.arange(6)).int())

# %% [markdown] lang="en"
# Our mixed model has Gemma 3's pattern at our scale: six layers, the first five local with a window of
# $W = 8$, the last one global. A model is one function from the layer index to its attention.

# %% [markdown] lang="zh"
# 我们的混合模型按我们的尺寸采用 Gemma 3 的模式：共六层，前五层是窗口 $W = 8$ 的局部层，最后一层是全局层。一个模型就是一个从层号到注意力层的函数。

# %%
six_cfg = ModelConfig(layers=6)
LOCAL_GLOBAL = ["local"] * 5 + ["global"]


def local_global(pattern: list[str] = LOCAL_GLOBAL, window: int = WINDOW):
    return lambda i: WindowAttention(six_cfg, window) if pattern[i] == "local" else Attention(six_cfg)

# %% [markdown] lang="en"
# **Criterion: the mixed cache is exact.** The 12 configurations against the model's own full recomputation; with
# 24 tokens and $W = 8$, every ring wraps, and chunks of 5 make it wrap in the middle of a chunk.

# %% [markdown] lang="zh"
# **判据：混合缓存是精确的。** 在 12 种配置上与模型自己的完整重算比较；序列有 24 个 token、$W = 8$，所以每个环形缓冲区都会绕回，分块长度为 5 时还会在分块中途绕回。

# %%
LOCAL_GLOBAL_GRID = run_grid(lambda: build(six_cfg, local_global()))
summary_table({"`local_global()`": LOCAL_GLOBAL_GRID})
assert all(r["passed"] for r in LOCAL_GLOBAL_GRID)

# %% [markdown] lang="en"
# **Negative control: a ring buffer on the global layer.** A tempting saving: give every layer the small cache.
# The global layer's mask still lets each query read every earlier key, and the full call has them all; the cached
# path has only the last $W - 1$. The check must fail.

# %% [markdown] lang="zh"
# **负对照：给全局层也配上环形缓冲区。** 一种诱人的“节省”：每一层都用小缓存。全局层的掩码仍然允许每个查询读取之前的所有键，完整调用也确实拥有全部的键；缓存路径却只剩最后 $W - 1$ 个。检查必须失败。

# %%
class GlobalWithRing(Attention):
    # [en] WRONG on purpose: a global layer (causal mask) with a local layer's ring buffer.
    # [zh] 故意写错：全局层（因果掩码）却用了局部层的环形缓冲区。
    def new_cache(self, caches: list):
        return RingKV(WINDOW - 1)


ring_on_global = [check_cached(lambda: build(six_cfg, lambda i: WindowAttention(six_cfg, WINDOW) if i < 5 else GlobalWithRing(six_cfg)),
                               1, chunk, torch.float32) for chunk in (1, 2, 5)]
CONTROLS["ring_on_global_layer"] = {
    "section": 6, "check": "check_cached", "max_abs_logit_err": min(r["max_abs_logit_err"] for r in ring_on_global),
    "caught": not any(r["passed"] for r in ring_on_global)}
say(en=f"A ring buffer on the global layer: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['ring_on_global_layer']['max_abs_logit_err']:.2f}): caught.",
    zh=f"全局层配上环形缓冲区：分块长度为 1、2、5 时检查全部失败（logits 误差最小也有 "
       f"{CONTROLS['ring_on_global_layer']['max_abs_logit_err']:.2f}）：已查出。")
assert CONTROLS["ring_on_global_layer"]["caught"]

# %% [markdown] lang="en"
# **Memory.** After the 24-token stream (batch 2, FP32) each local layer holds $W - 1 = 7$ positions and the global
# layer 24; a uniform model of six global layers would hold $6 \times 24$. The cell measures every layer's bytes and
# compares them with `kv_bytes_per_token` times the positions the layer must hold. At Gemma 3 27B's size (typed from
# the `text_config` of google/gemma-3-27b-it's `config.json`: 62 layers, 16 K/V heads of 128 dimensions, window
# 1,024; with the default pattern 52 layers are local and 10 global) and a 128k context in BF16, the same formula
# gives {{run:local_global.gemma3_uniform_gib:.1f}} GiB for 62 global layers and
# {{run:local_global.gemma3_mixed_gib:.2f}} GiB for the 5:1 mix: the global layers hold almost all of it.

# %% [markdown] lang="zh"
# **内存。** 在 24 个 token 的序列（batch 2，FP32）之后，每个局部层保存 $W - 1 = 7$ 个位置，全局层保存 24 个；由六个全局层组成的统一模型则要保存 $6 \times 24$ 个。下面的单元格测量每一层的字节数，并与 `kv_bytes_per_token` 乘以这一层应保存的位置数相比较。放到 Gemma 3 27B 的规模上（数值取自 google/gemma-3-27b-it 的 `config.json` 中的 `text_config`：62 层，16 个 K/V 头、每头 128 维，窗口 1,024；按默认模式，52 层是局部层，10 层是全局层），对 128k 上下文、BF16 精度，同一个公式给出：62 个全局层需要 {{run:local_global.gemma3_uniform_gib:.1f}} GiB，5:1 的混合模式只需要 {{run:local_global.gemma3_mixed_gib:.2f}} GiB，而且几乎全部花在全局层上。

# %%
def positions_held(pattern: list[str], tokens: int, window: int) -> list[int]:
    return [min(tokens, window - 1) if kind == "local" else tokens for kind in pattern]


with torch.inference_mode():
    _, mixed_cache = build(six_cfg, local_global())(STREAM)
per_position = kv_bytes_per_token(1, six_cfg.kv_heads, six_cfg.head_dim, 4) * STREAM.shape[0]
LOCAL_GLOBAL_MEMORY = [{"layer": i, "kind": kind, "positions": held, "formula_bytes": held * per_position, "measured_bytes": c.nbytes()}
                       for i, (kind, held, c) in enumerate(zip(LOCAL_GLOBAL, positions_held(LOCAL_GLOBAL, STREAM_LEN, WINDOW), mixed_cache))]
say_table([[str(m["layer"]), f"`{m['kind']}`", str(m["positions"]), f"{m['formula_bytes']:,}", f"{m['measured_bytes']:,}"] for m in LOCAL_GLOBAL_MEMORY],
          en=["layer", "kind", "positions held", "formula (bytes)", "measured (bytes)"],
          zh=["层", "类型", "保存的位置数", "公式（字节）", "实测（字节）"])
assert all(m["formula_bytes"] == m["measured_bytes"] for m in LOCAL_GLOBAL_MEMORY)

# [en] Gemma 3 27B: text_config of google/gemma-3-27b-it's config.json; layer i is global when (i + 1) % 6 == 0.
# [zh] Gemma 3 27B：取自 google/gemma-3-27b-it 的 config.json 中的 text_config；当 (i + 1) % 6 == 0 时第 i 层是全局层。
GEMMA3_27B = {"layers": 62, "kv_heads": 16, "head_dim": 128, "window": 1024}
gemma3_pattern = ["global" if (i + 1) % 6 == 0 else "local" for i in range(GEMMA3_27B["layers"])]
gemma3_position = kv_bytes_per_token(1, GEMMA3_27B["kv_heads"], GEMMA3_27B["head_dim"], BF16)
GEMMA3_MEMORY = {"local_layers": gemma3_pattern.count("local"), "global_layers": gemma3_pattern.count("global"),
                 "uniform_gib": GEMMA3_27B["layers"] * CONTEXT_128K * gemma3_position / GiB,
                 "mixed_gib": sum(positions_held(gemma3_pattern, CONTEXT_128K, GEMMA3_27B["window"])) * gemma3_position / GiB}
assert (GEMMA3_MEMORY["local_layers"], GEMMA3_MEMORY["global_layers"]) == (52, 10)

# %% tags=["prose-values"]
{"local_global": {"gemma3_uniform_gib": GEMMA3_MEMORY["uniform_gib"], "gemma3_mixed_gib": GEMMA3_MEMORY["mixed_gib"]}}
