# %%
band = band_mask(4 + torch.arange(2), torch.arange(6), 3)                         # [2, 6]
say_table([[str(4 + i), " ".join(str(int(a)) for a in row)] for i, row in enumerate(band)],
          en=["query position", "keys 0–5 (1 = may read)"], zh=["查询位置", "键 0–5（1 表示可以读取）"])
assert band.int().tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]

# %% [markdown] lang="en"
# Our mixed model has Gemma 3's pattern at our scale: six layers, the first five local with a window of
# $W = 8$, the last one global. A model is one function from the layer index to its attention.

# %% [markdown] lang="zh"
# 我们的混合模型按我们的尺寸采用 Gemma 3 的模式：共六层，前五层是窗口 $W = 8$ 的局部层，最后一层是全局层。一个模型就是一个从层号到注意力层的函数。

# %%
WINDOW = 8
six_cfg = replace(llama_cfg, layers=6)
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
# **负对照：给全局层也配上环形缓冲区。** 一种看似划算的“节省”：每一层都用小缓存。全局层的掩码仍然允许每个查询读取之前的所有键，完整调用也确实拥有全部的键；缓存路径却只剩最后 $W - 1$ 个。检查必须失败。

# %%
class GlobalWithRing(Attention):
    # [en] WRONG on purpose: a global layer (causal mask) with a local layer's ring buffer.
    # [zh] 故意写错：全局层（因果掩码）却用了局部层的环形缓冲区。
    def new_cache(self, caches: list):
        return RingKV(WINDOW - 1)


CONTROLS["ring_on_global_layer"] = {"section": 5, **run_control(
    lambda: build(six_cfg, lambda i: WindowAttention(six_cfg, WINDOW) if i < 5 else GlobalWithRing(six_cfg)))}
say(en=f"A ring buffer on the global layer: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['ring_on_global_layer']['measured']:.2f}): caught.",
    zh=f"全局层配上环形缓冲区：分块长度为 1、2、5 时检查全部失败（logits 的最大绝对误差最小也有 "
       f"{CONTROLS['ring_on_global_layer']['measured']:.2f}），已查出。")
assert CONTROLS["ring_on_global_layer"]["caught"]

# %% [markdown] lang="en"
# **Memory.** After the 24-token stream (batch 2, FP32) each local layer holds $W - 1 = 7$ positions and the global
# layer 24; a uniform model of six global layers would hold $6 \times 24$. The cell measures every layer's bytes and
# compares them with `kv_bytes_per_token` times the positions the layer must hold.

# %% [markdown] lang="zh"
# **内存。** 在 24 个 token 的序列（batch 为 2，FP32）之后，每个局部层保存 $W - 1 = 7$ 个位置，全局层保存 24 个；六层全是全局层的模型则要保存 $6 \times 24$ 个。下面的单元格测量每一层的字节数，并与 `kv_bytes_per_token` 乘以这一层应保存的位置数相比较。

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

# %% [markdown] lang="en"
# **At Gemma 3 27B's size** (typed from Google's reference implementation, `get_config_for_27b_v3` in
# `gemma/config.py` of google/gemma_pytorch: 62 layers, 16 K/V heads of 128 dimensions, a window of 1,024, and layer types repeating five local then one global,
# so {{run:local_global.gemma3_local_layers}} local and {{run:local_global.gemma3_global_layers}} global layers;
# when transformers is installed, the cell checks that pattern against the default `layer_types` of its
# `Gemma3TextConfig`, a second source) and a 128k context in BF16, the same formula
# gives {{run:local_global.gemma3_uniform_gib:.1f}} GiB for 62 global layers and
# {{run:local_global.gemma3_mixed_gib:.2f}} GiB for the 5:1 mix: the global layers hold almost all of it.

# %% [markdown] lang="zh"
# **放到 Gemma 3 27B 的规模上。** 它的数值取自 Google 的官方实现（google/gemma_pytorch 中 `gemma/config.py` 的 `get_config_for_27b_v3`）：62 层，16 个 K/V 头、每头 128 维，窗口 1,024，层的类型按“五个局部层、一个全局层”循环，因此有 {{run:local_global.gemma3_local_layers}} 个局部层和 {{run:local_global.gemma3_global_layers}} 个全局层。如果安装了 transformers，单元格还会用它的 `Gemma3TextConfig` 默认的 `layer_types`（第二个来源）核对这个模式。对 128K 上下文、BF16 精度，同一个公式给出：62 个全局层需要 {{run:local_global.gemma3_uniform_gib:.1f}} GiB，5:1 的混合模式只需要 {{run:local_global.gemma3_mixed_gib:.2f}} GiB，而且几乎全部花在全局层上。

# %%
# [en] Gemma 3 27B: get_config_for_27b_v3 in gemma/config.py of google/gemma_pytorch; layer i is global when (i + 1) % 6 == 0.
# [zh] Gemma 3 27B：取自 google/gemma_pytorch 中 gemma/config.py 的 get_config_for_27b_v3；当 (i + 1) % 6 == 0 时第 i 层是全局层。
GEMMA3_27B = {"layers": 62, "kv_heads": 16, "head_dim": 128, "window": 1024}
gemma3_pattern = ["global" if (i + 1) % 6 == 0 else "local" for i in range(GEMMA3_27B["layers"])]
gemma3_position = kv_bytes_per_token(1, GEMMA3_27B["kv_heads"], GEMMA3_27B["head_dim"], BF16)
GEMMA3_MEMORY = {"local_layers": gemma3_pattern.count("local"), "global_layers": gemma3_pattern.count("global"),
                 "uniform_gib": GEMMA3_27B["layers"] * CONTEXT_128K * gemma3_position / GiB,
                 "mixed_gib": sum(positions_held(gemma3_pattern, CONTEXT_128K, GEMMA3_27B["window"])) * gemma3_position / GiB}
if HAVE_HF:
    from transformers import Gemma3TextConfig
    hf_pattern = Gemma3TextConfig(num_hidden_layers=GEMMA3_27B["layers"]).layer_types
    assert hf_pattern == ["full_attention" if kind == "global" else "sliding_attention" for kind in gemma3_pattern]
say(en=f"Gemma 3 27B, 128k context, BF16: {GEMMA3_MEMORY['uniform_gib']:.1f} GiB with 62 global layers, "
       f"{GEMMA3_MEMORY['mixed_gib']:.2f} GiB with {GEMMA3_MEMORY['local_layers']} local and {GEMMA3_MEMORY['global_layers']} global layers.",
    zh=f"Gemma 3 27B，128K 上下文，BF16：62 个全局层需要 {GEMMA3_MEMORY['uniform_gib']:.1f} GiB，"
       f"{GEMMA3_MEMORY['local_layers']} 个局部层加 {GEMMA3_MEMORY['global_layers']} 个全局层需要 {GEMMA3_MEMORY['mixed_gib']:.2f} GiB。")
