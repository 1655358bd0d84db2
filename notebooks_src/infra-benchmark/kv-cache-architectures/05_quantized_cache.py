# %% [markdown] lang="en"
# ## 7. Quantized caches
#
# Every variant so far was exact: the cache changed shape, but the cached path computed the same function as
# full recomputation. A quantized cache gives that up on purpose. It stores K and V as small integers with a
# few full-precision *scales*, to fit more tokens in the same memory. Our scheme is KIVI-style: it takes the
# quantization axes of KIVI (Liu et al., 2024), which observed that keys have a few channels with large values while
# values do not:
#
# * **K per channel:** the cached keys are cut into groups of $G$ consecutive positions, and each channel of
#   each group gets its own scale and minimum;
# * **V per token:** each position of each head gets its own scale and minimum over its $D_h$ channels;
# * **a full-precision window:** the newest {{run:quant.residual}} to {{run:quant.residual_max}} positions ($R$ to
#   $R + G - 1$) stay in the model's dtype; each time {{run:quant.trigger}} ($R + G$) are waiting, the oldest
#   {{run:quant.group}} ($G$) are quantized together. Before the first {{run:quant.trigger}} have piled up, every
#   position stays in full precision.
#
# With $R = 16$ and $G = 8$, one token per call, the rule gives this timeline (the state after the call that brings
# the cache to $l$ positions):
#
# | positions cached $l$ | 8 | 16 | 23 | 24 | 31 | 32 | 40 |
# |---|---|---|---|---|---|---|---|
# | quantized | — | — | — | 0–7 | 0–7 | 0–15 | 0–23 |
# | full precision | 0–7 | 0–15 | 0–22 | 8–23 | 8–30 | 16–31 | 24–39 |
#
# Quantization is asymmetric min–max with $b$ bits: $\mathrm{scale} = (\max - \min)/(2^b - 1)$,
# $\mathrm{code} = \mathrm{round}((x - \min)/\mathrm{scale}) \in \{0, \dots, 2^b - 1\}$, and the model reads
# back $\mathrm{code} \cdot \mathrm{scale} + \min$. Codes of 4 and 2 bits are packed two and four to a byte,
# so that the bytes we measure are the bytes a real implementation would hold.

# %% [markdown] lang="zh"
# ## 7. 量化缓存
#
# 到目前为止，每种变体都是精确的：缓存的形状变了，但缓存路径计算的仍是与完整重算相同的函数。量化缓存则有意放弃这一点。它把 K 和 V 存成小整数，外加少量全精度的**缩放因子**，以便在同样的内存里放下更多 token。我们的方案仿照 Liu 等人（2024）提出的 KIVI，量化所沿的维度与 KIVI 相同。KIVI 的作者观察到，键有少数几个通道的数值很大，值则没有这种现象：
#
# * **K 按通道量化**：把缓存中的键按每 $G$ 个相邻位置分成一组，每组的每个通道各有自己的缩放因子和最小值；
# * **V 按 token 量化**：每个头的每个位置，在它的 $D_h$ 个通道上各有自己的缩放因子和最小值；
# * **全精度窗口**：最新的 {{run:quant.residual}} 到 {{run:quant.residual_max}} 个位置（$R$ 到 $R + G - 1$ 个）保持模型原本的精度；每当有 {{run:quant.trigger}} 个（$R + G$ 个）位置等待量化，就把其中最旧的 {{run:quant.group}} 个（$G$ 个）作为一组一起量化。缓存积累到 {{run:quant.trigger}} 个位置之前，所有位置都保持全精度。
#
# 取 $R = 16$、$G = 8$、每次调用送入一个 token，这条规则给出下面的时间线（表中是使缓存达到 $l$ 个位置的那次调用之后的状态）：
#
# | 缓存的位置数 $l$ | 8 | 16 | 23 | 24 | 31 | 32 | 40 |
# |---|---|---|---|---|---|---|---|
# | 已量化 | — | — | — | 0–7 | 0–7 | 0–15 | 0–23 |
# | 全精度 | 0–7 | 0–15 | 0–22 | 8–23 | 8–30 | 16–31 | 24–39 |
#
# 量化采用 $b$ 比特的非对称最小–最大量化：$\mathrm{scale} = (\max - \min)/(2^b - 1)$，$\mathrm{code} = \mathrm{round}((x - \min)/\mathrm{scale}) \in \{0, \dots, 2^b - 1\}$，模型读回的是 $\mathrm{code} \cdot \mathrm{scale} + \min$。4 比特和 2 比特的编码分别每两个、每四个打包进一个字节，这样测得的字节数就是真实实现需要保存的字节数。

# %%
def quantize(x, bits: int, dim: int):
    # [en] Asymmetric min-max quantization; the statistics are taken along `dim`.
    # [zh] 非对称最小–最大量化；统计量沿 `dim` 计算。
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = (high - low).clamp_min(1e-12) / (2 ** bits - 1)
    codes = ((x - low) / scale).round().clamp(0, 2 ** bits - 1).to(torch.uint8)
    return codes, scale, low


def dequantize(codes, scale, low):
    return codes.to(scale.dtype) * scale + low


def pack(codes, bits: int):                      # uint8 [..., D] -> uint8 [..., D * bits // 8]
    # [en] Codes below 2**bits, 8 // bits of them per byte, the first in the lowest bits.
    # [zh] 每个编码都小于 2**bits，每个字节装 8 // bits 个，第一个放在最低位。
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, dtype=torch.uint8) * bits
    return (codes.view(*codes.shape[:-1], -1, per_byte) << shifts).sum(-1, dtype=torch.uint8)


def unpack(packed, bits: int):
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, dtype=torch.uint8) * bits
    return ((packed[..., None] >> shifts) & (2 ** bits - 1)).flatten(-2)


# [en] Four 2-bit codes 1, 2, 3, 0 in one byte: 1 + 2 * 4 + 3 * 16 + 0 * 64 = 57.
# [zh] 四个 2 比特编码 1、2、3、0 装进一个字节：1 + 2 * 4 + 3 * 16 + 0 * 64 = 57。
print(pack(torch.tensor([1, 2, 3, 0], dtype=torch.uint8), 2), unpack(torch.tensor([57], dtype=torch.uint8), 2))

# %% [markdown] lang="en"
# The quantized layer cache has the same `update` method as the others. It appends the new K/V to the
# full-precision window and returns, for this call's attention, the dequantized groups followed by the window,
# with the positions it stored (nothing is evicted). Only then does it quantize the oldest groups, once the
# window holds $R + G$ positions or more. So a call always reads its own new K/V in full precision, as a
# prefill does in KIVI, and quantization affects later calls. `QuantAttention` is the attention layer with
# this cache.

# %% [markdown] lang="zh"
# 量化后的单层缓存与其他缓存一样，有一个 `update` 方法。它把新的 K/V 追加到全精度窗口，再为本次调用的注意力备好返回值：反量化后的各组接上窗口中的内容，以及它为这些键保存的位置（没有任何内容被淘汰）。此后它才检查窗口：一旦窗口中有 $R + G$ 个或更多位置，就量化最旧的若干组。因此，每次调用读到的本次新 K/V 总是全精度的（就像 KIVI 中的预填充那样），量化只影响之后的调用。`QuantAttention` 就是使用这种缓存的注意力层。

# %%
RESIDUAL, GROUP = 16, 8


class QuantKV:
    def __init__(self, bits: int, residual: int = RESIDUAL, group: int = GROUP):
        self.bits, self.residual, self.group = bits, residual, group
        # [en] Quantized groups as (packed codes, scale, low); the full-precision window [B, H_kv, r, D].
        # [zh] 量化后的各组存为（打包的编码、缩放因子、最小值）；全精度窗口的形状为 [B, H_kv, r, D]。
        self.k_groups, self.v_groups = [], []
        self.k_recent = self.v_recent = None
        self.positions = torch.empty(0, dtype=torch.long)
        self.seen = 0

    def update(self, k, v, positions):
        self.k_recent = k if self.k_recent is None else torch.cat((self.k_recent, k), dim=-2)
        self.v_recent = v if self.v_recent is None else torch.cat((self.v_recent, v), dim=-2)
        self.positions = torch.cat((self.positions, positions), dim=-1)
        self.seen += k.shape[-2]
        keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)
        values = torch.cat([self.read(g) for g in self.v_groups] + [self.v_recent], dim=-2)
        # [en] Quantize the oldest group while the window holds R + G positions or more: K per channel, V per token.
        # [zh] 只要窗口中有 R + G 个或更多位置，就量化最旧的一组：K 按通道，V 按 token。
        while self.k_recent.shape[-2] >= self.residual + self.group:
            k_old, self.k_recent = self.k_recent[:, :, :self.group], self.k_recent[:, :, self.group:]
            v_old, self.v_recent = self.v_recent[:, :, :self.group], self.v_recent[:, :, self.group:]
            k_codes, k_scale, k_low = quantize(k_old, self.bits, dim=-2)    # scale [B, H_kv, 1, D]
            v_codes, v_scale, v_low = quantize(v_old, self.bits, dim=-1)    # scale [B, H_kv, G, 1]
            self.k_groups.append((pack(k_codes, self.bits), k_scale, k_low))
            self.v_groups.append((pack(v_codes, self.bits), v_scale, v_low))
        return keys, values, self.positions

    def read(self, stored):
        packed, scale, low = stored
        return dequantize(unpack(packed, self.bits), scale, low)

    def quantized_positions(self) -> int:
        return self.group * len(self.k_groups)

    def nbytes(self) -> int:
        tensors = [t for g in self.k_groups + self.v_groups for t in g] + [self.k_recent, self.v_recent]
        return sum(t.numel() * t.element_size() for t in tensors)


class QuantAttention(Attention):
    def __init__(self, c: ArchConfig, bits: int):
        super().__init__(c)
        self.bits = bits

    def new_cache(self, caches: list):
        return QuantKV(self.bits)


def quant_model(bits: int) -> Decoder:
    return build(LLAMA_CFG, lambda i: QuantAttention(LLAMA_CFG, bits))

# %% [markdown] lang="en"
# The next cell replays that timeline on a real `QuantKV`, one token per call, and checks every column of the
# table: the quantized positions, and the full-precision window of K and of V.

# %% [markdown] lang="zh"
# 下面的单元格在一个真实的 `QuantKV` 上重放这条时间线，并核对表中的每一列（每次调用送入一个 token）：已量化的位置，以及 K 和 V 的全精度窗口。

# %%
timeline_cache, timeline = QuantKV(bits=4), {}
# [en] One token's K and V: [B, H_kv, 1, D].
# [zh] 一个 token 的 K 和 V：[B, H_kv, 1, D]。
k = v = torch.zeros(1, 1, 1, 4)
for l in range(1, 41):
    timeline_cache.update(k, v, torch.tensor([l - 1]))
    # [en] Quantized positions, then the full-precision window of K and of V.
    # [zh] 已量化的位置数，以及 K 和 V 的全精度窗口长度。
    timeline[l] = (timeline_cache.quantized_positions(), timeline_cache.k_recent.shape[-2], timeline_cache.v_recent.shape[-2])
rows = [[str(l), f"0–{q - 1}" if q else "—", f"{l - r}–{l - 1}"] for l, (q, r, _) in timeline.items() if l in (8, 16, 23, 24, 31, 32, 40)]
say_table(rows, en=["positions cached $l$", "quantized", "full precision"], zh=["缓存的位置数 $l$", "已量化", "全精度"])
assert rows == [["8", "—", "0–7"], ["16", "—", "0–15"], ["23", "—", "0–22"], ["24", "0–7", "8–23"],
                ["31", "0–7", "8–30"], ["32", "0–15", "16–31"], ["40", "0–23", "24–39"]]
# [en] At every l: each position is either quantized or in the window, the same for K and V.
# [zh] 对每个 l：每个位置要么已量化，要么在窗口中，K 和 V 相同。
assert all(q + r == l and r_v == r for l, (q, r, r_v) in timeline.items())
assert all(RESIDUAL <= r < RESIDUAL + GROUP for l, (q, r, _) in timeline.items() if l >= RESIDUAL)
