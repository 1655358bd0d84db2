# %% [markdown] lang="en"
# **The code of `Rotary`.** The attention layer calls `Rotary` when the configuration sets `rope=True`. Coordinate $i$ of a head is paired with coordinate
# $i + D_h/2$ (the `rotate_half` layout of Hugging Face's Llama, so that no weights need reordering to compare
# with it; the RoPE paper pairs neighbours $(2i, 2i+1)$ instead, the same rotation up to a fixed permutation of
# the channels of $W_q$ and $W_k$, which is why converted checkpoints permute them), and pair $i$ of a token at position $p$ is turned by the angle $p\,\theta_i$,
# $\theta_i = \Theta^{-2i/D_h}$ ($D_h$ the head size). `Rotary` computes the cosines and sines of every position once, in FP64 unless
# asked for another dtype, and looks them up by position. `positions` may have any shape that broadcasts
# against the vectors (attention sinks, for one, give each (query, key) pair its own position).

# %% [markdown] lang="zh"
# **`Rotary` 的代码。** 配置中设了 `rope=True` 时，注意力层会调用 `Rotary`。每个头的第 $i$ 维与第 $i + D_h/2$ 维配成一对（即 Hugging Face Llama 的 `rotate_half` 布局，与它对照时不必重排权重；RoPE 论文则把相邻的第 $2i$ 维与第 $2i+1$ 维配对，两者只差 $W_q$ 和 $W_k$ 各通道的一个固定排列，所以转换检查点时要重排这两个矩阵）；位于位置 $p$ 的 token，其第 $i$ 对旋转 $p\,\theta_i$ 角，$\theta_i = \Theta^{-2i/D_h}$（$D_h$ 为每个头的维数）。`Rotary` 把所有位置的余弦和正弦一次算好（除非另行指定精度，否则用 FP64），之后按位置查表。`positions` 可以是任何能与向量广播的形状（例如注意力汇聚点就要为每一对（查询，键）指定各自的位置）。

# %%
def rotate_half(x):
    # [en] The two halves of the last dimension: (x1, x2) -> (-x2, x1).
    # [zh] 最后一维的前后两半：(x1, x2) -> (-x2, x1)。
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    def __init__(self, dim: int, max_positions: int, theta: float, angle_dtype=torch.float64):
        super().__init__()
        self.dim, self.max_positions, self.theta = dim, max_positions, theta
        inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=angle_dtype) / dim)              # [D/2]
        angles = torch.arange(max_positions, dtype=angle_dtype)[:, None] * inv_freq                # [P_max, D/2]
        angles = torch.cat((angles, angles), dim=-1)                                               # [P_max, D]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    # [en] positions: any shape that broadcasts against x[..., 0], one position per vector.
    # [zh] positions：任何能与 x[..., 0] 广播的形状，每个向量对应一个位置。
    def forward(self, x, positions):                       # x: [..., D] -> [..., D]
        return x * self.cos[positions].to(x.dtype) + rotate_half(x) * self.sin[positions].to(x.dtype)
