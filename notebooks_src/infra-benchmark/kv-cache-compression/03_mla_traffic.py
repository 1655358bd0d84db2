# %% [markdown] lang="en"
# **What each form moves.** The answer first: the expand-on-read form saves cache capacity, not memory traffic. The
# byte counts below assume an unfused implementation, where each operation reads its inputs from memory once and
# writes its output once, and they count the cache and the expanded tensors only: the score and softmax tensors,
# $H$ numbers per cached key and operation in every form, are left out (a fused kernel keeps them on chip). Counted
# so, the naive form moves only its cache per cached key, and so does the absorbed form if one kernel reads each latent
# once for both of its products (the scores and the weighted sum), as FlashMLA does; the table assumes that. Run as
# two separate products, the absorbed form reads the latents twice, $2r + d_R$ instead of $r + d_R$ numbers per key,
# which nearly doubles its row. The expand-on-read form moves much more.
#
# <details><summary>Optional: where the expand-on-read bytes come from</summary>
#
# The expand-on-read form, what transformers 5.23.0 does, reads as few bytes *from its cache* as the absorbed form,
# but the cache is not all it moves. At every step, for every cached position ($H$ heads):
#
# 1. it reads the latent and the RoPE key, $r + d_R$ numbers;
# 2. `expand_kv` writes the whole `kv_b_proj` output, $H(d_C + d_v)$ (the values it returns are a view into it);
# 3. it writes a new key tensor holding each head's $k^C$ and the RoPE key, $H(d_C + d_R)$;
# 4. that copy reads $k^C$ back from step 2's output, $H d_C$;
# 5. attention reads the keys and values, $H(d_C + d_R + d_v)$.
#
# Our `expand` does the same (`kv_up`'s output, then `torch.cat`). Steps 2 and 3 write
# {{run:mla.latent_expanded_gib:.1f}} GiB per layer and step at DeepSeek-V3's size and 32,768 keys. A fused kernel
# that expanded each latent on chip, never writing the expansion to memory, would avoid steps 2 to 4.
#
# </details>
#
# The folded functions below count these bytes (`bytes_moved`: the whole list above for expand-on-read, the cache
# read for the other two forms); the table after them gives the three forms at DeepSeek-V3's size, for one layer and
# one decode step with 32,768 cached keys.

# %% [markdown] lang="zh"
# **每种形式搬运多少数据。** 先说结论：读时展开形式省下的是缓存容量，而不是访存量。下文的字节数都基于非融合的实现：每个运算从内存读一次输入、写一次输出；而且只计缓存和展开出来的张量，不计分数和 softmax 张量（每种形式每个运算对每个缓存的键都有 $H$ 个数，融合内核会把它们留在片上）。这样计算，对每个缓存的键，朴素形式只搬运它的缓存；吸收形式也是如此，前提是由一个内核把每个潜向量读一次、同时用于它的两次乘法（算分数和求加权和），FlashMLA 就是这样做的，下表按此计算。如果两次乘法分开执行，吸收形式要把潜向量读两遍，每个键读 $2r + d_R$ 个数而不是 $r + d_R$ 个，这一行几乎翻倍。读时展开形式搬运的要多得多。
#
# <details><summary>可选：读时展开形式的字节从何而来</summary>
#
# 读时展开形式（即 transformers 5.23.0 的做法）**从缓存中**读取的字节和吸收形式一样少，但它搬运的不只是缓存。每一步，对每个缓存位置（共 $H$ 个头）：
#
# 1. 读取潜向量和 RoPE 键，$r + d_R$ 个数；
# 2. `expand_kv` 写出 `kv_b_proj` 的全部输出，$H(d_C + d_v)$ 个数（它返回的值只是其中的一个视图）；
# 3. 写出一个新的键张量，装入每个头的 $k^C$ 和 RoPE 键，$H(d_C + d_R)$ 个数；
# 4. 这次复制要从第 2 步的输出中把 $k^C$ 读回来，$H d_C$ 个数；
# 5. 注意力读取键和值，$H(d_C + d_R + d_v)$ 个数。
#
# 我们的 `expand` 也是这样做的（先是 `kv_up` 的输出，再 `torch.cat`）。放到 DeepSeek-V3 的规模、32,768 个键，第 2、3 步在每层、每个解码步中就要写出 {{run:mla.latent_expanded_gib:.1f}} GiB。如果融合内核在片上展开每个潜向量、从不把展开结果写回内存，就能省掉第 2 到第 4 步。
#
# </details>
#
# 下面折叠的函数统计这些字节（`bytes_moved`：读时展开形式是上面整张列表，另两种形式是缓存读取量）；其后的表格给出三种形式在 DeepSeek-V3 规模下、一层、一个解码步、缓存 32,768 个键时的数字。

# %% tags=["hide-input"]
def cache_bytes_read(c: MLAConfig, form: str, keys: int, bytes_per_element: int = BF16) -> int:
    return keys * (expanded_elements(c) if form == "naive" else mla_elements(c)) * bytes_per_element


def materialised_elements(c: MLAConfig) -> int:
    # [en] Per position: the kv_up output (the values are a view into it) and the new key tensor.
    # [zh] 每个位置：kv_up 的输出（值只是其中的一个视图）和新的键张量。
    return c.heads * (c.nope_dim + c.value_dim) + c.heads * (c.nope_dim + c.rope_dim)   # H (2 d_C + d_R + d_v)


def materialised_bytes(c: MLAConfig, form: str, keys: int, bytes_per_element: int = BF16) -> int:
    # [en] What the expand-on-read form writes at every step.
    # [zh] 读时展开形式每一步写出的数据。
    return keys * materialised_elements(c) * bytes_per_element if form == "expand_on_read" else 0


def expand_on_read_traffic(c: MLAConfig, keys: int, bytes_per_element: int = BF16) -> int:
    # [en] Bytes per step, each operation reading its inputs once and writing its output once: the cache (latents for
    # [en] kv_up, RoPE keys for the copy), the expansion written, the copy's read of k^C, and the K/V attention reads.
    # [zh] 每步的字节数（每个运算读一次输入、写一次输出）：读缓存（kv_up 读潜向量，复制读 RoPE 键）、写出展开结果、
    # [zh] 复制时读 k^C，以及注意力读取的 K/V。
    copy_reads = keys * c.heads * c.nope_dim * bytes_per_element
    return (cache_bytes_read(c, "expand_on_read", keys, bytes_per_element) + materialised_bytes(c, "expand_on_read", keys, bytes_per_element)
            + copy_reads + keys * expanded_elements(c) * bytes_per_element)


def bytes_moved(c: MLAConfig, form: str, keys: int, bytes_per_element: int = BF16) -> int:
    # [en] Cache and expanded tensors a decode step moves, unfused (score and softmax tensors left out): the naive
    # [en] form reads only its cache; the absorbed form too, if one kernel serves both of its products.
    # [zh] 非融合实现中，一个解码步搬运的缓存和展开张量的字节（不计分数和 softmax 张量）：朴素形式只读取它的缓存；吸收形式也是，前提是它的两次乘法由一个内核完成。
    return expand_on_read_traffic(c, keys, bytes_per_element) if form == "expand_on_read" else cache_bytes_read(c, form, keys, bytes_per_element)

# %%
d, T = DEEPSEEK_V3, 32 * 1024
MLA_TRADE = {"context": T, "forms": {form: {"macs": decode_macs(d, form, T), "cache_bytes_read": cache_bytes_read(d, form, T),
                                            "expanded_bytes_written": materialised_bytes(d, form, T)}
                                     for form in MLA_FORMS}}
say_table([[f"`{form}`", f"{v['cache_bytes_read'] / 2 ** 20:,.1f}", f"{bytes_moved(d, form, T) / 2 ** 20:,.1f}", f"{v['macs'] / 1e9:.2f}"]
           for form, v in MLA_TRADE["forms"].items()],
          en=["form ($T = 32{,}768$, BF16)", "cache read (MiB)", "cache + expanded tensors, unfused (MiB)", "multiply-adds (billions)"],
          zh=["形式（$T = 32{,}768$，BF16）", "读取的缓存（MiB）", "缓存与展开张量，非融合（MiB）", "乘加次数（十亿）"])
EXPAND_ON_READ_TRAFFIC_RATIO = bytes_moved(d, "expand_on_read", T) / bytes_moved(d, "naive", T)
EXPAND_ON_READ_MACS_RATIO = MLA_TRADE["forms"]["expand_on_read"]["macs"] / MLA_TRADE["forms"]["naive"]["macs"]
assert MLA_TRADE["forms"]["naive"]["macs"] < MLA_TRADE["forms"]["absorbed"]["macs"] < MLA_TRADE["forms"]["expand_on_read"]["macs"]
assert bytes_moved(d, "absorbed", T) < bytes_moved(d, "naive", T) < bytes_moved(d, "expand_on_read", T)
assert 2 < EXPAND_ON_READ_TRAFFIC_RATIO < 3 and EXPAND_ON_READ_MACS_RATIO > 1
# [en] Run as two separate products, the absorbed form reads 2r + d_R numbers per key instead of r + d_R: nearly double.
# [zh] 两次乘法分开执行时，吸收形式每个键读 2r + d_R 个数而不是 r + d_R 个：几乎翻倍。
assert 1.5 < (2 * d.latent + d.rope_dim) / (d.latent + d.rope_dim) < 2

# %% [markdown] lang="en"
# Read across the rows. The expand-on-read form reads as little cache as the absorbed one, but moves
# {{run:mla.expand_on_read_traffic_ratio:.1f}} times the naive form's bytes and does
# {{run:mla.expand_on_read_macs_ratio:.0f}} times its multiply-adds, because it re-expands every cached latent at every
# step. The absorbed form reads 1/{{run:mla.naive_vs_latent_bytes:.0f}} of the naive form's cache bytes for
# {{run:mla.absorbed_vs_naive_total_macs:.1f}} times its multiply-adds over the whole decode step, projections included
# ({{run:mla.absorbed_vs_naive_macs:.1f}} times counting attention alone, per cached key; section 4.1): it behaves like multi-query attention whose one
# K/V head, shared by all 128 heads, has keys of $r + d_R$ dimensions and values of $r$ (the same latents). The figure below shows
# these quantities as the context grows.

# %% [markdown] lang="zh"
# 逐行对照来看。读时展开形式读取的缓存和吸收形式一样少，搬运的字节却是朴素形式的 {{run:mla.expand_on_read_traffic_ratio:.1f}} 倍，乘加次数是朴素形式的 {{run:mla.expand_on_read_macs_ratio:.0f}} 倍，因为它每一步都要把每个缓存的潜向量重新展开。吸收形式读取的缓存字节只有朴素形式的 1/{{run:mla.naive_vs_latent_bytes:.0f}}，整个解码步（含各个投影）的乘加次数是朴素形式的 {{run:mla.absorbed_vs_naive_total_macs:.1f}} 倍（只计注意力本身、按每个缓存的键计，是 {{run:mla.absorbed_vs_naive_macs:.1f}} 倍，见第 4.1 节）：它就像一个多查询注意力，128 个头共享一个 K/V 头，其键为 $r + d_R$ 维，值为 $r$ 维（就是同一批潜向量）。下图画出这些量随上下文增长的情况。

# %%
CONTEXTS = [2 ** k for k in range(8, 18)]
fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.4))
for form, style in (("naive", "-o"), ("expand_on_read", "-s"), ("absorbed", "-^")):
    # [en] expand_on_read's cache read coincides with absorbed's: drawn dashed with open squares, on top, to stay visible.
    # [zh] expand_on_read 的缓存读取与 absorbed 的重合：画成虚线加空心方块并置于上层，以免被遮住。
    on_top = {"markersize": 6, "markerfacecolor": "none", "zorder": 3} if form == "expand_on_read" else {"markersize": 3}
    axes[0].plot(CONTEXTS, [cache_bytes_read(DEEPSEEK_V3, form, t) / 2 ** 20 for t in CONTEXTS],
                 "--s" if form == "expand_on_read" else style, label=f"{form}: cache read", **on_top)
    axes[1].plot(CONTEXTS, [decode_macs(DEEPSEEK_V3, form, t) / 1e9 for t in CONTEXTS], style, markersize=3, label=form)
axes[0].plot(CONTEXTS, [expand_on_read_traffic(DEEPSEEK_V3, t) / 2 ** 20 for t in CONTEXTS], ":s", markersize=3,
             label="expand_on_read: cache + expansion written and read")
for ax, label in zip(axes, ("bytes per step (MiB, BF16)", "multiply-adds per step (billions)")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context: cached keys T")
    ax.set_ylabel(label)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
fig.suptitle("DeepSeek-V3 attention, one layer, one decode step", fontsize=10)
fig.tight_layout()
MLA_COST_PNG = OUT / "mla_cost.png"
fig.savefig(MLA_COST_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: one DeepSeek-V3 attention layer, one decode step, against the number of cached keys $T$ (both axes
# logarithmic). Left: bytes per step (MiB, BF16). The solid and dashed lines are the bytes read from the cache; the
# expand-on-read line (dashed, open squares) lies on the absorbed one (both read the latents and RoPE keys).
# The dotted line adds everything else the expand-on-read form writes and reads at every step, unfused:
# {{run:mla.expand_on_read_traffic_ratio:.1f}} times the bytes the naive form reads. Right: multiply-adds per step
# (billions); `expand_on_read` climbs fastest because it re-expands every cached latent.*

# %% [markdown] lang="zh"
# *图：DeepSeek-V3 的一个注意力层在一个解码步中的开销（图标题 DeepSeek-V3 attention, one layer, one decode step），横轴是缓存的键数 $T$（图中 context: cached keys T；两个坐标轴都是对数刻度）。左图纵轴（bytes per step）是每步读写的字节数（MiB，BF16）。实线和虚线是从缓存读取的字节数（图例 cache read），其中 expand_on_read（读时展开形式，虚线加空心方块）与 absorbed（吸收形式）两条线重合，因为两者读的都是潜向量和 RoPE 键；naive 为朴素形式。点线（图例 expand_on_read: cache + expansion written and read）是读时展开形式的全部访存量（非融合实现），即缓存读取量再加上每一步另外写出和读回的展开数据，合计为朴素形式读取量的 {{run:mla.expand_on_read_traffic_ratio:.1f}} 倍。右图纵轴（multiply-adds per step）是每步的乘加次数（单位：十亿）；`expand_on_read` 增长最快，因为它要把每个缓存的潜向量重新展开。*

# %% [markdown] lang="en"
# *Optional, folded:* our `expand` (and Hugging Face's `expand_kv`) materializes $T H(2d_C + d_R + d_v)$ numbers
# per decode step, and the five steps of the list above add up to the total in the table above.

# %% [markdown] lang="zh"
# *可选（已折叠）：* 我们的 `expand`（以及 Hugging Face 的 `expand_kv`）每个解码步生成 $T H(2d_C + d_R + d_v)$ 个数；上文列表中的五项运算相加，等于上表中的合计。

# %% tags=["hide-input"]
def recording(method, record: list):
    # [en] Wrap a bound method so that every call's result is also appended to `record`.
    # [zh] 包装一个绑定方法，把每次调用的结果也追加到 `record` 中。
    def wrapper(*args):
        record.append(method(*args))
        return record[-1]
    return wrapper


@torch.inference_mode()
def expanded_per_step(attn, call_attn, name: str) -> int:
    # [en] Numbers in the memory behind what the layer's `name` method returns in the last of two calls (24 positions, then 1).
    # [zh] 两次调用（先 24 个位置，再 1 个）中的最后一次里，该层 `name` 方法返回的张量背后的内存中数的个数。
    call_attn(STREAM[:1, :-1])
    record = []
    setattr(attn, name, recording(getattr(attn, name), record))
    call_attn(STREAM[:1, -1:])
    delattr(attn, name)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage() for t in record[-1]}
    return sum(st.nbytes() for st in storages.values()) // record[-1][0].element_size()


ours = build(mla_cfg, lambda i: ExpandOnReadMLA(mla_cfg))
cache = ours.new_cache()
MATERIALISED = {"ExpandOnReadMLA": expanded_per_step(ours.blocks[0].attn, lambda ids: ours(ids, cache), "expand")}
if HAVE_HF:
    hf = hf_deepseek(build(mla_cfg, lambda i: ExpandOnReadMLA(mla_cfg)).double())
    hf_cache = DynamicCache(config=hf.config)
    MATERIALISED["DeepseekV3Attention"] = expanded_per_step(
        hf.model.layers[0].self_attn, lambda ids: hf(input_ids=ids, past_key_values=hf_cache, use_cache=True), "expand_kv")
say_table([[f"`{name}`", str(STREAM_LEN), f"{n:,}", f"{STREAM_LEN * materialised_elements(mla_cfg):,}"] for name, n in MATERIALISED.items()],
          en=["expand-on-read form", "cached positions", "numbers materialized in one decode step", "formula: $T H (2d_C + d_R + d_v)$"],
          zh=["读时展开形式", "缓存的位置数", "一个解码步中生成的数", "公式：$T H (2d_C + d_R + d_v)$"])
assert all(n == STREAM_LEN * materialised_elements(mla_cfg) for n in MATERIALISED.values())

H, r, dR, dC, dv = d.heads, d.latent, d.rope_dim, d.nope_dim, d.value_dim
# [en] The operations in the order of the list above: (formula, numbers per position).
# [zh] 各项运算，顺序与上文列表相同：（公式，每个位置的数）。
TRAFFIC_ROWS = [("$r + d_R$", r + dR), ("$H(d_C + d_v)$", H * (dC + dv)), ("$H(d_C + d_R)$", H * (dC + dR)),
                ("$H d_C$", H * dC), ("$H(d_C + d_R + d_v)$", H * (dC + dR + dv))]
per_position = sum(n for _, n in TRAFFIC_ROWS)
traffic_total = per_position * T * BF16
say_table([[str(step), formula, f"{n:,}", f"{n * T * BF16 / 2 ** 20:,.0f}"] for step, (formula, n) in enumerate(TRAFFIC_ROWS, 1)],
          en=["`expand_on_read` step", "formula: numbers read or written per position", "at DeepSeek-V3's size", "MiB per step ($T = 32{,}768$, BF16)"],
          zh=["`expand_on_read` 的步骤", "公式：每个位置读写的数", "DeepSeek-V3 规模下", "每步 MiB（$T = 32{,}768$，BF16）"])
assert per_position == r + dR + H * (4 * dC + 2 * dR + 2 * dv)
assert traffic_total == expand_on_read_traffic(d, T)
