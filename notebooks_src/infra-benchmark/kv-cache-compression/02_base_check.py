# %% [markdown] lang="en"
# **The configuration.** The Llama shape at the first notebook's sizes: width 64, 4 query heads of 16 dimensions and 2 K/V
# heads, vocabulary 97, MLP width 256, RoPE with base 10,000, and RMSNorm with epsilon $10^{-6}$ (DeepSeek-V3's value).
#
# **Criterion: the Llama-shaped decoder's cache is exact.** The base model (a `FullKV` per layer) must pass all
# 12 configurations. The grid is shown once in full; later sections show one summary row per variant (the build's
# `results.json` keeps the full grids).

# %% [markdown] lang="zh"
# **配置。** 采用 Llama 结构，尺寸与第一份笔记本相同：宽度 64，4 个查询头、每头 16 维、2 个 K/V 头，词表大小 97，MLP 宽度 256，RoPE 的底数为 10,000，RMSNorm 的 $\epsilon$ 取 $10^{-6}$（DeepSeek-V3 的取值）。
#
# **判据：Llama 结构解码器的缓存是精确的。** 基础模型（每层一个 `FullKV`）必须通过全部 12 种配置。下表把网格完整地列出一次；后面各节每种变体只列一行汇总（构建时写出的 `results.json` 保存完整的网格）。

# %%
LLAMA_SHAPE = dict(rope=True, norm="rms", eps=1e-6, mlp_kind="swiglu", bias=False)
llama_cfg = ArchConfig(kv_heads=2, **LLAMA_SHAPE)
BASE_GRID = run_grid(lambda: build(llama_cfg))
grid_table(BASE_GRID)
assert all(r["passed"] for r in BASE_GRID)

# %% [markdown] lang="en"
# **Negative control: every call starts counting at 0.** The classic cache bug, kept as the control that shows
# this check can fail: the layer rotates (and masks) each call's tokens as if the chunk began the sequence. The
# full call is unaffected (it starts at 0 anyway), the cached path is not. The check must fail for every chunk
# length. Every negative control goes into `CONTROLS`: its check, the number it measured, and whether it was caught.

# %% [markdown] lang="zh"
# **负对照：每次调用都从 0 开始计数。** 这是缓存最经典的错误，留作负对照，用来说明这项检查确实可能失败：注意力层把每次调用的 token 都当作序列的开头来旋转（并构造掩码）。完整调用不受影响（它本来就从 0 开始），缓存路径则不然。无论分块长度是多少，检查都必须失败。每个负对照都记录在 `CONTROLS` 中：所用的检查、测得的数值以及是否查出。

# %%
class RestartsAtZero(Attention):
    # [en] WRONG on purpose: positions restart at 0 in every call.
    # [zh] 故意写错：每次调用的位置都从 0 重新开始。
    def forward(self, x, positions, cache):
        return super().forward(x, positions - positions[0], cache)


CONTROLS["positions_restart_at_zero"] = {"section": 2, **run_control(lambda: build(llama_cfg, lambda i: RestartsAtZero(llama_cfg)))}
say(en=f"Positions restarting at 0: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['positions_restart_at_zero']['measured']:.2f}): caught.",
    zh=f"位置每次从 0 重新开始：分块长度为 1、2、5 时检查全部失败（logits 的最大绝对误差最小也有 "
       f"{CONTROLS['positions_restart_at_zero']['measured']:.2f}），已查出。")
assert CONTROLS["positions_restart_at_zero"]["caught"]
