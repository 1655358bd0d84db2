# %% [markdown] lang="en"
# ### 5.1 Layers that share one cache
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
# ### 5.1 共享同一份缓存的层
#
# 第一份笔记本强调过：每一层都需要自己的缓存，因为第 $\ell$ 层是从它自己的输入投影出键和值的。跨层注意力（CLA；Brandon 等人，2024）则是改动模型本身：在每一对相邻的层中，下层计算键和值并缓存它们，上层根本没有 K/V 投影，它的查询读取下层的键和值。作者用这种方式从头训练了 10 亿和 30 亿参数的模型，报告说两两共享（CLA2）能把缓存减半，困惑度只略有上升。transformers 在 Gemma 3n 和 Gemma 4 中实现了一种相近的方案（`num_kv_shared_layers`：最后若干层复用之前最后一个同类型层的键和值）。
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
shared_index = [[c is d for d in distinct(shared_cache)].index(True) for c in shared_cache]
say(en=f"Layers 0 to 5 use the cache objects {shared_index}: each pair of layers shares one.",
    zh=f"第 0 到 5 层使用的缓存对象依次为 {shared_index}：每一对层共享一个。")

# %% [markdown] lang="en"
# **Criterion: the shared cache is exact.** Six layers in three pairs, three caches; the 12 configurations against the
# model's own full recomputation. Each shared cache object is compared once.

# %% [markdown] lang="zh"
# **判据：共享缓存是精确的。** 六层分成三对，共三个缓存；在 12 种配置上与模型自己的完整重算比较。每个共享的缓存对象只比较一次。

# %%
SHARED_GRID = run_grid(lambda: build(six_cfg, shared_pairs))
summary_table({"`shared_pairs`": SHARED_GRID})
assert all(r["passed"] for r in SHARED_GRID) and shared_index == [0, 0, 1, 1, 2, 2]

# %% [markdown] lang="en"
# Sharing makes a different model, not a cheaper copy of the ordinary one. Because `SharedKVAttention` builds and then
# drops the K/V projections, the shared model built from the same seed has exactly the weights of the ordinary
# six-layer model, minus the upper layers' K/V projections; yet its logits differ from the ordinary model's (largest
# absolute error {{run:shared.vs_ordinary:.2f}}, printed by the cell below). A layer may read its neighbour's cache
# only if the model was trained that way, which is what Brandon et al. did.

# %% [markdown] lang="zh"
# 共享得到的是另一个模型，而不是普通模型的一个更省的副本。由于 `SharedKVAttention` 先建好 K/V 投影再删掉，用同一个随机种子构建的共享模型，其权重与普通六层模型完全相同，只是少了上层的 K/V 投影；然而它的 logits 与普通模型不同（最大绝对误差为 {{run:shared.vs_ordinary:.2f}}，由下面的单元格打印）。一层能读取相邻层的缓存，前提是模型就是这样训练出来的，Brandon 等人正是这样做的。

# %%
with torch.inference_mode():
    SHARED_VS_ORDINARY = max_abs_err(build(six_cfg, shared_pairs)(STREAM)[0], build(six_cfg)(STREAM)[0])
say(en=f"Shared-pairs model against the ordinary one, same weights: largest absolute logit error {SHARED_VS_ORDINARY:.2f}.",
    zh=f"两两共享的模型与权重相同的普通模型相比：logits 的最大绝对误差为 {SHARED_VS_ORDINARY:.2f}。")
assert SHARED_VS_ORDINARY > 1e-2

# %% [markdown] lang="en"
# **Negative control: the upper layer still writes into the shared cache.** The tempting way to add sharing to a
# decoder: give the upper layer the lower layer's cache object (`new_cache` returns `caches[-1]`) but keep the
# ordinary attention layer, its K/V projections and its `update` included. Every call then appends each token twice,
# once per layer of the pair, and the shared cache counts both: `seen`, from which the decoder numbers the next chunk,
# runs ahead twice as fast, and the upper layer attends to its own keys next to the lower layer's. The check is the
# one `shared_pairs` passed, the model's own full recomputation: the full call numbers its tokens $0 \dots 23$
# whatever the cache counts, the cached path does not, so the check must fail.

# %% [markdown] lang="zh"
# **负对照：上层仍然往共享缓存里写。** 给解码器加上共享时，一种顺手却错误的写法是：让上层拿到下层的缓存对象（`new_cache` 返回 `caches[-1]`），却保留普通的注意力层，连同它的 K/V 投影和 `update` 调用。于是每次调用都把每个 token 追加两次（这一对层各一次），共享缓存把两次都计入：解码器靠 `seen` 给下一个分块编号，而 `seen` 现在以两倍的速度增长；上层也会在下层的键旁边读到它自己的键。检查方式与 `shared_pairs` 通过的检查相同，即与模型自己的完整重算比较：完整调用无论缓存计数多少，都把 token 编号为 $0 \dots 23$，缓存路径却不是这样，所以检查必须失败。

# %%
class AppendsToSharedCache(Attention):
    # [en] WRONG on purpose: takes the cache of the layer below, but still projects its own K/V and appends them to it.
    # [zh] 故意写错：拿来下层的缓存，却仍然投影出自己的 K/V 并追加进去。
    def new_cache(self, caches: list):
        return caches[-1]


def appends_to_shared(i: int):
    return Attention(six_cfg) if i % 2 == 0 else AppendsToSharedCache(six_cfg)


_, doubled_cache = run_chunked(build(six_cfg, appends_to_shared), STREAM[:1], 1)
CONTROLS["shared_cache_written_twice"] = {"section": 5, **run_control(lambda: build(six_cfg, appends_to_shared))}
say(en=f"The upper layers append to the shared caches too: after the {STREAM_LEN}-token stream in chunks of 1, the first cache "
       f"has counted {doubled_cache[0].seen} tokens; the check fails for chunks of 1, 2 and 5 "
       f"(smallest logit error {CONTROLS['shared_cache_written_twice']['measured']:.2f}): caught.",
    zh=f"上层也往共享缓存里追加：{STREAM_LEN} 个 token 的序列按分块长度 1 送入之后，第一个缓存计入了 "
       f"{doubled_cache[0].seen} 个 token；分块长度为 1、2、5 时检查全部失败（logits 的最大绝对误差最小也有 "
       f"{CONTROLS['shared_cache_written_twice']['measured']:.2f}），已查出。")
assert CONTROLS["shared_cache_written_twice"]["caught"] and doubled_cache[0].seen == 2 * STREAM_LEN

# %% [markdown] lang="en"
# **The cache growing, layer by layer.** The first cell below feeds 40 tokens one at a time to three six-layer models (ordinary,
# local/global, shared pairs) and records, after every call, the positions each distinct cache holds. The memory
# claims become two assertions: after the last call the local/global model holds $5 \cdot 7 + 40$ positions (the sum
# of `positions_held`), and the shared model holds exactly half of what the ordinary one holds after every call.
# The second cell (its code folded) draws the counts.

# %% [markdown] lang="zh"
# **缓存如何逐层增长。** 下面第一个单元格把 40 个 token 逐个送入三个六层模型（普通模型、局部/全局模型、两两共享的模型），每次调用之后记录每个不同的缓存保存了多少个位置。关于内存的结论归结为两条断言：最后一次调用之后，局部/全局模型保存 $5 \cdot 7 + 40$ 个位置（即 `positions_held` 之和）；每次调用之后，共享模型保存的位置数都恰好是普通模型的一半。第二个单元格（代码已折叠）把这些计数画成图。

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
# [en] The first token count from which the local/global model holds fewer positions than the shared one.
# [zh] 从第几个 token 起，局部/全局模型保存的位置少于共享模型。
GROWTH_CROSSOVER = next(t for t in range(1, GROWTH_TOKENS + 1)
                        if all(a < b for a, b in zip(totals["local/global"][t - 1:], totals["shared pairs"][t - 1:])))
say(en=f"From token {GROWTH_CROSSOVER} on, the local/global model holds fewer positions than the shared-pairs model.",
    zh=f"从第 {GROWTH_CROSSOVER} 个 token 起，局部/全局模型保存的位置少于两两共享的模型。")

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
steps = range(1, GROWTH_TOKENS + 1)
# [en] The local layers hold the same positions at every step, so one line stands for all of them.
# [zh] 各个局部层在每一步保存的位置数都相同，所以用一条线代表它们全部。
local_layers = [layer for layer, kind in enumerate(LOCAL_GLOBAL) if kind == "local"]
assert all(len({h[layer] for layer in local_layers}) == 1 for h in GROWTH["local/global"])
for layer, kind in enumerate(LOCAL_GLOBAL):
    if kind == "global" or layer == local_layers[0]:
        label = f"layer {layer} (global)" if kind == "global" else f"layers {local_layers[0]}-{local_layers[-1]} (local)"
        axes[0].plot(steps, [h[layer] for h in GROWTH["local/global"]], "-" if kind == "global" else "--", label=label)
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
# *Figure: horizontal axis, the tokens consumed so far ("tokens consumed"); vertical axis, the positions the cache holds ("cached
# positions"). Left (title "local/global model: positions held per layer"), the six layers of the local/global model
# as tokens arrive: the five local layers hold the same positions, so one dashed line ("layers 0-4 (local)") stands
# for them; they stop at $W - 1 = 7$ positions, while the global layer (solid line) keeps growing. Right
# (title "positions held, all layers"), the total over all layers for the ordinary model (solid), the local/global
# model (dashed) and the shared-pairs
# model (dotted), which holds half of the ordinary one at every step. From token {{run:shared.crossover}} on, the
# local/global total is the smaller one: once its local layers are full it adds 1 position per token (the global
# layer), the shared model 3.*

# %% [markdown] lang="zh"
# *图：横轴 tokens consumed 是已处理的 token 数，纵轴 cached positions 是缓存保存的位置数。左图（标题 local/global model: positions held per layer）是局部/全局模型的六层随 token 到来的变化，五个局部层保存的位置数相同，所以用一条虚线（图例 layers 0-4 (local)）代表它们：它们停在 $W - 1 = 7$ 个位置，而全局层（实线，layer 5 (global)）一直增长。右图（标题 positions held, all layers）是所有层加起来的总数：普通模型（实线，ordinary）、局部/全局模型（虚线，local/global）和两两共享的模型（点线，shared pairs）；后者在每一步都恰好是普通模型的一半。从第 {{run:shared.crossover}} 个 token 起，局部/全局模型的总数更小：局部层存满之后，它每个 token 只增加 1 个位置（全局层），共享模型则增加 3 个。*
