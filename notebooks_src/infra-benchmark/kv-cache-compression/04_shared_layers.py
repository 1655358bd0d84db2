# %% [markdown] lang="en"
# ### 6.1 Layers that share one cache
#
# The first notebook insisted that every layer needs its own cache, because layer $\ell$ projects keys and values
# from its own input. Cross-layer attention (CLA; Brandon et al., 2024) changes the model instead: in each pair of
# adjacent layers, the lower layer computes keys and values and caches them, and the upper layer has no K/V
# projections at all; its queries read the lower layer's keys and values. The authors trained 1B- and 3B-parameter
# models this way from scratch and report that sharing within pairs (CLA2) halves the cache for a small loss in
# perplexity. transformers implements a related scheme in Gemma 3n and Gemma 4 (`num_kv_shared_layers`: the last
# layers reuse the keys and values of the last earlier layer of the same type).
#
# `SharedKVAttention` is the upper layer of a pair. It drops the K/V projections, answers `new_cache` with the cache
# of the layer below (the last one in the list the decoder has built so far), and in `forward` reads that cache's
# contents, which the lower layer has just updated in the same call.

# %% [markdown] lang="zh"
# ### 6.1 共享同一份缓存的层
#
# 第一份笔记本强调过：每一层都需要自己的缓存，因为第 $\ell$ 层是从它自己的输入投影出键和值的。跨层注意力（CLA；Brandon 等，2024）则是改动模型本身：在每一对相邻的层中，下层计算键和值并缓存它们，上层根本没有 K/V 投影，它的查询读取下层的键和值。作者用这种方式从头训练了 10 亿和 30 亿参数的模型，报告说两层一组共享（CLA2）能把缓存减半，困惑度只略有上升。transformers 在 Gemma 3n 和 Gemma 4 中实现了一种相近的方案（`num_kv_shared_layers`：最后若干层复用之前最后一个同类型层的键和值）。
#
# `SharedKVAttention` 是一对层中的上层。它去掉了 K/V 投影；`new_cache` 返回它下面那一层的缓存（即解码器到目前为止已建好的列表中的最后一个）；`forward` 读取这个缓存的内容，而下层刚刚在同一次调用中更新过它。

# %%
class SharedKVAttention(Attention):
    def __init__(self, c: ArchConfig):
        super().__init__(c)
        # [en] No K/V projections: this layer reads the keys and values of the layer below.
        # [zh] 没有 K/V 投影：这一层读取下层的键和值。
        del self.k, self.v

    def new_cache(self, caches: list):
        return caches[-1]

    def forward(self, x, positions, cache):
        q = self.rotate(split_heads(self.q(x), self.heads), positions)
        keys, values, key_pos = cache.contents()
        return self.proj(merge_heads(self.attend(q, keys, values, self.mask(positions, key_pos))))


def shared_pairs(i: int):
    return Attention(six_cfg) if i % 2 == 0 else SharedKVAttention(six_cfg)


with torch.inference_mode():
    _, shared_cache = build(six_cfg, shared_pairs)(STREAM)
# [en] Which cache object each of the six layers uses.
# [zh] 六层各自使用的是哪一个缓存对象。
print([[c is d for d in distinct(shared_cache)].index(True) for c in shared_cache])

# %% [markdown] lang="en"
# **Criterion: the shared cache is exact.** Six layers in three pairs, three caches; the 12 configurations against the
# model's own full recomputation. Each shared cache object is compared once.

# %% [markdown] lang="zh"
# **判据：共享缓存是精确的。** 六层分成三对，共三个缓存；在 12 种配置上与模型自己的完整重算比较。每个共享的缓存对象只比较一次。

# %%
SHARED_GRID = run_grid(lambda: build(six_cfg, shared_pairs))
summary_table({"`shared_pairs`": SHARED_GRID})
assert all(r["passed"] for r in SHARED_GRID) and len(distinct(shared_cache)) == six_cfg.layers // 2

# %% [markdown] lang="en"
# **Negative control: sharing bolted onto a model that was not built for it.** Because `SharedKVAttention` builds
# and then drops the K/V projections, the shared model built from the same seed has exactly the weights of the
# ordinary six-layer model, minus the upper layers' K/V projections. Running it with the cache of the layer below
# and comparing with the ordinary model's full recomputation asks: may a layer read its neighbour's cache? It may
# not, unless the model was trained that way. The check must fail.

# %% [markdown] lang="zh"
# **负对照：给一个并非为此而建的模型硬加上共享。** 由于 `SharedKVAttention` 先建好 K/V 投影再删掉，用同一个随机种子构建的共享模型，其权重与普通六层模型完全相同，只是少了上层的 K/V 投影。让它借用下层的缓存运行，再与普通模型的完整重算比较，等于在问：一层能否读取相邻层的缓存？答案是不能，除非模型就是这样训练出来的。检查必须失败。

# %%
CONTROLS["cache_borrowed_from_layer_below"] = {"section": 6, **run_control(lambda: build(six_cfg, shared_pairs),
                                                                            reference=lambda: build(six_cfg))}
say(en=f"Sharing bolted onto the ordinary model: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{CONTROLS['cache_borrowed_from_layer_below']['measured']:.2f}): caught.",
    zh=f"给普通模型硬加上共享：分块长度为 1、2、5 时检查全部失败（logits 误差最小也有 "
       f"{CONTROLS['cache_borrowed_from_layer_below']['measured']:.2f}）：已查出。")
assert CONTROLS["cache_borrowed_from_layer_below"]["caught"]

# %% [markdown] lang="en"
# **The cache growing, layer by layer.** The cell feeds 40 tokens one at a time to three six-layer models (ordinary,
# local/global, shared pairs) and records, after every call, the positions each distinct cache holds. The memory
# claims become two assertions: after the last call the local/global model holds $5 \cdot 7 + 40$ positions (the sum
# of `positions_held`), and the shared model holds exactly half of what the ordinary one holds after every call.

# %% [markdown] lang="zh"
# **缓存如何逐层增长。** 下面的单元格把 40 个 token 逐个送入三个六层模型（普通模型、局部/全局模型、两两共享的模型），每次调用之后记录每个不同的缓存保存了多少个位置。关于内存的结论归结为两条断言：最后一次调用之后，局部/全局模型保存 $5 \cdot 7 + 40$ 个位置（即 `positions_held` 之和）；每次调用之后，共享模型保存的位置数都恰好是普通模型的一半。

# %%
GROWTH_TOKENS = 40
growth_ids = torch.randint(0, six_cfg.vocab, (1, GROWTH_TOKENS), generator=torch.Generator().manual_seed(SEED + 1))
GROWTH_MODELS = {"ordinary": lambda i: Attention(six_cfg), "local/global": local_global(), "shared pairs": shared_pairs}
GROWTH = {}
with torch.inference_mode():
    for name, attention in GROWTH_MODELS.items():
        net, cache, held = build(six_cfg, attention), None, []
        for t in range(GROWTH_TOKENS):
            _, cache = net(growth_ids[:, t:t + 1], cache)
            held.append([len(c.contents()[2]) for c in distinct(cache)])
        GROWTH[name] = held
totals = {name: [sum(h) for h in held] for name, held in GROWTH.items()}
assert totals["local/global"][-1] == sum(positions_held(LOCAL_GLOBAL, GROWTH_TOKENS, WINDOW))
assert [2 * t for t in totals["shared pairs"]] == totals["ordinary"]

fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
steps = range(1, GROWTH_TOKENS + 1)
for layer, kind in enumerate(LOCAL_GLOBAL):
    axes[0].plot(steps, [h[layer] for h in GROWTH["local/global"]], label=f"layer {layer} ({kind})",
                 linewidth=2.5 if kind == "global" else 1, linestyle="-" if kind == "global" else (0, (1 + layer, 2)))
axes[0].set_title("local/global model: positions held per layer", fontsize=10)
for name, style in (("ordinary", "-"), ("local/global", "--"), ("shared pairs", ":")):
    axes[1].plot(steps, totals[name], style, label=name)
axes[1].set_title("positions held, all layers", fontsize=10)
for ax in axes:
    ax.set_xlabel("tokens consumed")
    ax.set_ylabel("cached positions")
    ax.legend(fontsize=7)
fig.tight_layout()
GROWTH_PNG = OUT / "cache_growth.png"
fig.savefig(GROWTH_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: left, the six layers of the local/global model as tokens arrive: the five local layers (thin, dotted
# lines, on top of each other) stop at $W - 1 = 7$ positions, the global layer (thick line) keeps growing. Right,
# the total over all layers for the ordinary model (solid), the local/global model (dashed) and the shared-pairs
# model (dotted), which holds half of the ordinary one at every step.*

# %% [markdown] lang="zh"
# *图：左图是局部/全局模型的六层随 token 到来的变化：五个局部层（细虚线，相互重叠）停在 $W - 1 = 7$ 个位置，全局层（粗实线）则一直增长。右图是所有层加起来的总数：普通模型（实线，ordinary）、局部/全局模型（虚线，local/global）和两两共享的模型（点线，shared pairs）；后者在每一步都恰好是普通模型的一半。*
