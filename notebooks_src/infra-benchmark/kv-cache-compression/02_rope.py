# %% [markdown] lang="en"
# **Rotary position embeddings**, as the architectures notebook derived them: each head's dimensions are paired,
# coordinate $i$ with coordinate $i + D/2$ (Hugging Face's `rotate_half` layout), and pair $i$ of a token at
# position $p$ is turned by the angle $p\,\theta_i$ with $\theta_i = \Theta^{-2i/D}$. Because rotations compose,
# the score of a query at position $m$ and a key at position $n$ depends only on $n - m$. The cosines and sines
# of every position are computed once, in FP64, and looked up by position; `positions` may have any shape, so
# that section 7 can give every (query, key) pair its own position.

# %% [markdown] lang="zh"
# **旋转位置编码**，与架构笔记本推导的相同：把每个头的各维两两配对，第 $i$ 维与第 $i + D/2$ 维为一对（即 Hugging Face 的 `rotate_half` 布局）；位于位置 $p$ 的 token，其第 $i$ 对旋转 $p\,\theta_i$ 角，其中 $\theta_i = \Theta^{-2i/D}$。由于旋转可以复合，位置 $m$ 上的查询与位置 $n$ 上的键之间的分数只取决于 $n - m$。所有位置的余弦和正弦用 FP64 一次算好，之后按位置查表；`positions` 可以是任意形状，这样第 7 节就能为每一对（查询，键）指定各自的位置。

# %%
def rotate_half(x):
    # [en] The two halves of the last dimension: (x1, x2) -> (-x2, x1).
    # [zh] 最后一维的前后两半：(x1, x2) -> (-x2, x1)。
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    def __init__(self, dim: int, max_positions: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)            # [D/2]
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq               # [P_max, D/2]
        angles = torch.cat((angles, angles), dim=-1)                                                # [P_max, D]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x, positions):                       # x: [..., D]; positions broadcast against x[..., 0]
        return x * self.cos[positions].to(x.dtype) + rotate_half(x) * self.sin[positions].to(x.dtype)
