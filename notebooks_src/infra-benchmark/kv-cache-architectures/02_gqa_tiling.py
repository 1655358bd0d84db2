# %% [markdown] lang="en"
# **Negative control: tiling instead of interleaving.** `TiledAttention` expands the K/V heads with `tile_kv`.
# Run the same 12 configurations on it and they all pass. That is not a flaw of the check but a limit of what
# it can see: the tiled model is a *different but self-consistent* function. Its full path and its cached
# path both pair query head 1 with K/V head 1, so they agree with each other. Cached-versus-full can only
# catch a disagreement between the two paths; it cannot tell whether heads are paired the way the weights
# were made for. The outputs do change: in this run the tiled model's logits differ from the interleaved
# model's by up to {{run:gqa.tile_logit_diff:.2f}}. Only a referee that knows the intended layout can catch
# the mistake: criterion 4 below spells the layout out head by head, and the Hugging Face Llama of
# section 5 knows it too.

# %% [markdown] lang="zh"
# **负对照：平铺代替交错。** `TiledAttention` 用 `tile_kv` 扩展 K/V 头。在它上面运行同样的 12 种配置，结果全部通过。这并不是检查有缺陷，而是这类错误本来就在它的视野之外：平铺后的模型是一个**不同但自洽**的函数。它的完整路径和缓存路径都把查询头 1 与 K/V 头 1 配成一对，所以两者彼此一致。“缓存对照完整重算”只能发现两条路径之间的分歧，判断不了头的配对方式是否符合权重的设计。输出确实变了：在本次运行中，平铺模型的 logits 与交错模型相比，最大绝对误差为 {{run:gqa.tile_logit_diff:.2f}}。只有知道正确布局的裁判才能查出这个错误：下面的判据 4 逐个头写出这一布局，第 5 节的 Hugging Face Llama 也知道它。

# %%
class TiledAttention(Attention):
    # [en] WRONG on purpose: the K/V heads are tiled (0, 1, 0, 1), not interleaved.
    # [zh] 故意写错：K/V 头被平铺（0、1、0、1），而不是交错排列。
    def attend(self, q, keys, values, allowed):
        groups = self.heads // self.kv_heads
        return softmax_attention(q, tile_kv(keys, groups), tile_kv(values, groups), allowed)


def tiled(c: ArchConfig):
    return build(c, lambda i: TiledAttention(c))


TILED_GRID = run_grid(lambda: tiled(GQA2))
with torch.inference_mode():
    TILE_LOGIT_DIFF = max_abs_err(tiled(GQA2)(STREAM)[0], build(GQA2)(STREAM)[0])
summary_table({"`tiled(GQA2)`": TILED_GRID})
say(en=f"Tiled K/V heads: cached = full in all 12 configurations, yet the logits differ from the interleaved model's by up to "
       f"{TILE_LOGIT_DIFF:.2f}.",
    zh=f"平铺 K/V 头：12 种配置全部满足“缓存 = 完整重算”，但 logits 与交错模型相比，最大绝对误差达到 {TILE_LOGIT_DIFF:.2f}。")
assert all(r["passed"] for r in TILED_GRID) and TILE_LOGIT_DIFF > 1e-2

# %% [markdown] lang="en"
# **Criterion 4: query head $h$ reads K/V head $\lfloor h / g \rfloor$, checked head by head.** This referee
# needs nothing installed. `heads_by_loop` computes one attention layer one query head at a time from the
# layer's own weights: for head $h$ it projects the queries with the rows of `q` that belong to head $h$, and
# the keys and values with the rows of `k` and `v` that belong to K/V head $\lfloor h / g \rfloor$; it never
# expands any heads. The real layer reads the same 24 input vectors in chunks of 5 through its own cache. In
# FP64 the two must agree within $10^{-10}$ for GQA and MQA, and the tiled layer must not.

# %% [markdown] lang="zh"
# **判据 4：查询头 $h$ 读取第 $\lfloor h / g \rfloor$ 个 K/V 头，逐头检查。** 这个裁判不需要安装任何东西。`heads_by_loop` 只用注意力层自己的权重，每次计算一个查询头：对查询头 $h$，用 `q` 中属于头 $h$ 的那些行投影出查询，再用 `k` 和 `v` 中属于第 $\lfloor h / g \rfloor$ 个 K/V 头的那些行投影出键和值；它从不扩展任何头。真实的注意力层则以分块长度 5 读入同样的 24 个输入向量，并使用自己的缓存。在 FP64 下，对 GQA 和 MQA，这两种算法结果的最大绝对误差都必须小于 $10^{-10}$，而平铺的注意力层必须通不过。

# %%
def rows_of(linear: nn.Linear, head: int, head_dim: int):
    # [en] The weight rows (and bias entries) that produce one head's head_dim outputs.
    # [zh] 产生某一个头的 head_dim 个输出的那些行权重（以及偏置）。
    rows = slice(head * head_dim, (head + 1) * head_dim)
    return linear.weight[rows], None if linear.bias is None else linear.bias[rows]


@torch.inference_mode()
def heads_by_loop(attn: Attention, x):                                           # x: [B, T, width]
    groups, allowed, heads = attn.heads // attn.kv_heads, causal_mask(0, x.shape[1]), []
    for h in range(attn.heads):
        q = F.linear(x, *rows_of(attn.q, h, attn.head_dim))                      # [B, T, D]
        k = F.linear(x, *rows_of(attn.k, h // groups, attn.head_dim))
        v = F.linear(x, *rows_of(attn.v, h // groups, attn.head_dim))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)).masked_fill(~allowed, float("-inf"))
        heads.append(scores.softmax(dim=-1) @ v)
    return attn.proj(torch.cat(heads, dim=-1))                                   # [B, T, width]


@torch.inference_mode()
def layer_in_chunks(attn: Attention, x, chunk: int = 5):
    # [en] The real layer on its cached path, called as the decoder calls it.
    # [zh] 真实的注意力层走缓存路径，调用方式与解码器相同。
    cache, pieces = attn.new_cache([]), []
    for start in range(0, x.shape[1], chunk):
        positions = absolute_positions(start, min(chunk, x.shape[1] - start))
        pieces.append(attn(x[:, start:start + len(positions)], positions, cache))
    return torch.cat(pieces, dim=1)


HEAD_INPUT = torch.randn(2, STREAM_LEN, cfg.width, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
HEAD_LOOP = {name: max_abs_err(layer_in_chunks(attn, HEAD_INPUT), heads_by_loop(attn, HEAD_INPUT))
             for name, attn in (("gqa2", build(GQA2).double().blocks[0].attn), ("mqa", build(MQA).double().blocks[0].attn),
                                ("tiled", tiled(GQA2).double().blocks[0].attn))}
tiled_caught = HEAD_LOOP["tiled"] > 1e-2
CONTROLS["tiled_kv_heads"] = {"section": 4, "check": "heads_by_loop", "caught": tiled_caught}
say(en=f"Head by head (FP64): the real layer differs from the loop by {HEAD_LOOP['gqa2']:.1e} (GQA) and "
       f"{HEAD_LOOP['mqa']:.1e} (MQA); the tiled layer by {HEAD_LOOP['tiled']:.3f}, caught.",
    zh=f"逐头检查（FP64）：真实注意力层与逐头循环相比，最大绝对误差为 {HEAD_LOOP['gqa2']:.1e}（GQA）和 "
       f"{HEAD_LOOP['mqa']:.1e}（MQA）；平铺的注意力层为 {HEAD_LOOP['tiled']:.3f}，已查出。")
assert HEAD_LOOP["gqa2"] < 1e-10 and HEAD_LOOP["mqa"] < 1e-10 and tiled_caught

# %% tags=["prose-values"]
{"gqa": {"tile_logit_diff": float(TILE_LOGIT_DIFF), "head_loop_tiled": float(HEAD_LOOP["tiled"])}}
