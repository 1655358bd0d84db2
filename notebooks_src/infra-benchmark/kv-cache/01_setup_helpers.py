# %% [markdown] lang="en"
# Three small tools that every notebook of this series uses, defined once here. A cached and a full
# computation add the same numbers in a different order, so their results may differ in the last
# bits; we compare them within the tolerance of their dtype (`TOLERANCE`, used as both `atol` and
# `rtol`) with `close`, and `max_abs_err` says by how much they differ. `kv_bytes_per_token` is the
# size of one token's keys and values summed over all layers: $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$
# bytes, for $L$ layers, $H_{kv}$ K/V heads of $D_h$ dimensions and $s$ bytes per element.

# %% [markdown] lang="zh"
# 本系列的每份笔记本都要用到三个小工具，统一在这里定义。带缓存的计算和完整重算把同样的数以不同的顺序相加，结果可能在最后几个比特上不同；因此我们用 `close` 在该精度的容差内比较两者（`TOLERANCE` 同时用作 `atol` 和 `rtol`），再用 `max_abs_err` 给出两者相差多少。`kv_bytes_per_token` 是一个 token 在所有层上的 K/V 总字节数：$2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$，其中 $L$ 是层数，$H_{kv}$ 是 K/V 头数，$D_h$ 是每个头的维度，$s$ 是每个元素的字节数。

# %%
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}
DTYPE_NAME = {torch.float32: "fp32", torch.float64: "fp64"}


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    # [en] Same shape and equal within the tolerance of a's dtype; a NaN is never close.
    # [zh] 形状相同，并且在 a 所属精度的容差内相等；NaN 永远不算接近。
    tol = TOLERANCE[a.dtype]
    return a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=tol)


def max_abs_err(a: torch.Tensor, b: torch.Tensor) -> float:
    # [en] The largest |a - b| (NaN if either side holds a NaN).
    # [zh] |a - b| 的最大值（任一方含 NaN 时为 NaN）。
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    # K, V: 2 * L * H_kv * Dh * s
    return 2 * layers * kv_heads * head_dim * bytes_per_element
