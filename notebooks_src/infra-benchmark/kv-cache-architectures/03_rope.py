# %% [markdown] lang="en"
# ## 5. Rotary position embeddings (RoPE)
#
# Section 3's decoder adds a learned vector per absolute position to the token embedding. RoPE (Su et
# al., 2021) adds nothing. It splits each query and key head into pairs of coordinates and rotates pair
# $i$ by the angle $p\,\theta_i$, where $p$ is the token's absolute position and
# $\theta_i = \Theta^{-2i/D_h}$ with $\Theta = 10000$. Rotations compose and are orthogonal, so for a
# query at position $m$ and a key at position $n$
#
# $$\langle R_m q, R_n k \rangle = \langle q, R_m^{\top} R_n k \rangle = \langle q, R_{n-m}\, k \rangle :$$
#
# the attention score depends on the two positions only through their difference. For the cache this
# means two things. A key is rotated once, at its own absolute position, and cached *after* rotation; its
# position never changes, so the cached value stays valid. And the new chunk must still be rotated at its
# true absolute positions $P, P+1, \dots$, exactly as the learned table had to be indexed there.
#
# We pair coordinate $i$ with coordinate $i + D_h/2$ (the `rotate_half` layout of Hugging Face's Llama,
# so no weight reordering is needed in the cross-check). The cosines and sines of all 512 positions are
# computed once, in FP64, and looked up by position.

# %% [markdown] lang="zh"
# ## 5. 旋转位置编码（RoPE）
#
# 第 3 节的解码器为每个绝对位置学习一个向量，加到 token 嵌入上。RoPE（Su 等，2021）什么也不加。它把查询和键在每个头内的坐标两两配对，把第 $i$ 对旋转 $p\,\theta_i$ 角，其中 $p$ 是 token 的绝对位置，$\theta_i = \Theta^{-2i/D_h}$，$\Theta = 10000$。旋转可以复合，而且是正交变换，所以对位置 $m$ 上的查询和位置 $n$ 上的键有
#
# $$\langle R_m q, R_n k \rangle = \langle q, R_m^{\top} R_n k \rangle = \langle q, R_{n-m}\, k \rangle ,$$
#
# 也就是说，注意力分数只通过两者之差依赖于位置。这对缓存意味着两件事。第一，每个键只在它自己的绝对位置上旋转一次，缓存的是**旋转之后**的键；它的位置永远不变，所以缓存的值始终有效。第二，新的分块仍然必须按真实的绝对位置 $P, P+1, \dots$ 旋转，正如可学习的位置嵌入表也必须用这些位置去查。
#
# 我们把第 $i$ 个坐标与第 $i + D_h/2$ 个坐标配对（即 Hugging Face Llama 的 `rotate_half` 布局，这样交叉核对时不需要重排权重）。全部 512 个位置的余弦和正弦用 FP64 一次算好，之后按位置查表。

# %%
def rotate_half(x):
    # [en] The two halves of the last dimension: (x1, x2) -> (-x2, x1).
    # [zh] 最后一维的前后两半：(x1, x2) -> (-x2, x1)。
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, max_positions: int, theta: float = 10000.0, angle_dtype=torch.float64):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=angle_dtype) / head_dim))   # [Dh/2]
        angles = torch.arange(max_positions, dtype=angle_dtype)[:, None] * inv_freq                # [P_max, Dh/2]
        angles = torch.cat((angles, angles), dim=-1)                                               # [P_max, Dh]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x, positions):                       # x: [B, heads, T_new, Dh]; positions: [T_new]
        cos, sin = self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype)
        return x * cos + rotate_half(x) * sin

# %% [markdown] lang="en"
# **The scores depend only on relative position, shown numerically.** Take one random query vector and
# one random key vector in FP64, rotate them to positions $m$ and $n$, and compare the score with the
# score after moving both by the same shift $s$, for all $m, n < 64$ and shifts up to 400. The rotation
# must also keep lengths (it is orthogonal). For contrast, adding learned position vectors (section 3's
# way) gives scores that change with the shift.

# %% [markdown] lang="zh"
# **用数值验证：分数只依赖相对位置。** 在 FP64 下取一个随机查询向量和一个随机键向量，分别旋转到位置 $m$ 和 $n$，再把两者同时平移 $s$，比较平移前后的分数；$m, n < 64$ 全部取遍，平移量最大为 400。旋转还必须保持向量长度不变（它是正交变换）。作为对照，用第 3 节的办法加上可学习的位置向量，分数就会随平移而改变。

# %%
with torch.inference_mode():
    rotary64 = Rotary(cfg.head_dim, cfg.max_positions)
    gen = torch.Generator().manual_seed(SEED)
    q_vec, k_vec = torch.randn(cfg.head_dim, generator=gen, dtype=torch.float64), torch.randn(cfg.head_dim, generator=gen, dtype=torch.float64)
    # [en] A random position table stands in for learned positions (wpe).
    # [zh] 用一张随机的位置表代替可学习的位置嵌入（wpe）。
    table = torch.randn(cfg.max_positions, cfg.head_dim, generator=gen, dtype=torch.float64)

    def rope_scores(shift: int):
        pos = shift + torch.arange(64)
        q_rot = rotary64(q_vec.expand(64, -1)[None, None], pos)[0, 0]                # [64, Dh]
        k_rot = rotary64(k_vec.expand(64, -1)[None, None], pos)[0, 0]
        return q_rot @ k_rot.T                                                       # [64, 64]: (m, n)

    def learned_scores(shift: int):
        pos = shift + torch.arange(64)
        return (q_vec + table[pos]) @ (k_vec + table[pos]).T

    SHIFTS = [1, 7, 100, 400]
    RELATIVE = {
        "rope_max_abs_diff": max((rope_scores(s) - rope_scores(0)).abs().max().item() for s in SHIFTS),
        "learned_min_max_abs_diff": min((learned_scores(s) - learned_scores(0)).abs().max().item() for s in SHIFTS),
        "norm_max_abs_diff": (rotary64(q_vec.expand(448, -1)[None, None], torch.arange(448))[0, 0].norm(dim=-1) - q_vec.norm()).abs().max().item(),
    }
    diagonals_constant = all(torch.allclose(rope_scores(0).diagonal(d), rope_scores(0).diagonal(d)[:1].expand(64 - abs(d)), atol=1e-12, rtol=0)
                             for d in range(-63, 64))
assert RELATIVE["rope_max_abs_diff"] < 1e-12 and RELATIVE["norm_max_abs_diff"] < 1e-12 and diagonals_constant
assert RELATIVE["learned_min_max_abs_diff"] > 1.0
say(en=f"RoPE: shifting both positions by {SHIFTS} changes no score by more than {RELATIVE['rope_max_abs_diff']:.1e} "
       f"(FP64), every diagonal m - n = const of the 64 x 64 score matrix is constant, and lengths are kept "
       f"(to {RELATIVE['norm_max_abs_diff']:.1e}). Learned positions: the same shifts change the scores by at least "
       f"{RELATIVE['learned_min_max_abs_diff']:.2f}.",
    zh=f"RoPE：把两个位置同时平移 {SHIFTS}，任何分数的变化都不超过 {RELATIVE['rope_max_abs_diff']:.1e}（FP64）；"
       f"64 × 64 分数矩阵中，每条对角线（m - n 为定值）上的分数都相同；向量长度保持不变（误差 {RELATIVE['norm_max_abs_diff']:.1e}）。"
       f"可学习的位置向量：同样的平移至少让分数改变 {RELATIVE['learned_min_max_abs_diff']:.2f}。")

# %% [markdown] lang="en"
# **RoPE is its formula, pair by pair.** The shift test above holds for any rotation by angles proportional
# to the position: also for one that turns every pair the wrong way, or at the wrong frequencies. It cannot
# tell whether `Rotary` computes the formula of this section, and cached-versus-full cannot either (both
# paths would share the mistake). So we compare `Rotary` with the formula itself, written out pair by pair
# with the frequencies computed anew: for every position $p < 512$ and every pair $i < D_h/2$, coordinates
# $i$ and $i + D_h/2$ must become
# $(x_i \cos p\theta_i - x_{i+D_h/2} \sin p\theta_i,\; x_i \sin p\theta_i + x_{i+D_h/2} \cos p\theta_i)$, in FP64,
# within `1e-12`. The negative control turns every pair backwards, by $-p\theta_i$: it passes the shift test
# and fails this one.

# %% [markdown] lang="zh"
# **RoPE 就是它的公式，逐对检查。** 上面的平移检验对任何“转角与位置成正比”的旋转都成立：即使每一对都转错了方向，或者频率不对，也照样成立。它无法判断 `Rotary` 算的是否就是本节的公式，“缓存对照完整重算”同样无法判断（两条路径会犯同一个错误）。所以我们直接拿 `Rotary` 与公式本身比较：逐对写出公式，频率也重新计算。对每个位置 $p < 512$ 和每一对 $i < D_h/2$，第 $i$ 和第 $i + D_h/2$ 个坐标必须变为 $(x_i \cos p\theta_i - x_{i+D_h/2} \sin p\theta_i,\; x_i \sin p\theta_i + x_{i+D_h/2} \cos p\theta_i)$，在 FP64 下误差不超过 `1e-12`。负对照让每一对都反向旋转 $-p\theta_i$：它能通过平移检验，却通不过这项检查。

# %%
def rope_by_formula(x, positions, theta: float = 10000.0):
    # [en] The rotation written out pair by pair: pair i is (x_i, x_{i + Dh/2}), turned by p * theta**(-2i/Dh).
    # [zh] 逐对写出的旋转：第 i 对是 (x_i, x_{i + Dh/2})，旋转角为 p * theta**(-2i/Dh)。
    half, out = x.shape[-1] // 2, torch.empty_like(x)
    for i in range(half):
        angle = positions.to(torch.float64) * theta ** (-2 * i / x.shape[-1])              # [T]
        a, b = x[..., i], x[..., i + half]
        out[..., i], out[..., i + half] = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    return out


def turned_backwards(x, positions):
    # [en] WRONG on purpose: every pair turns by -p * theta_i.
    # [zh] 故意写错：每一对都旋转 -p * theta_i。
    return x * rotary64.cos[positions] - rotate_half(x) * rotary64.sin[positions]


def shift_error(rotate) -> float:
    # [en] The shift test above for any rotation: largest change of a score when both positions move together.
    # [zh] 对任意旋转做上面的平移检验：两个位置一起平移时，分数的最大变化。
    pos = torch.arange(64)
    scores = lambda s: rotate(q_vec.expand(64, -1)[None, None], s + pos)[0, 0] @ rotate(k_vec.expand(64, -1)[None, None], s + pos)[0, 0].T
    return max((scores(s) - scores(0)).abs().max().item() for s in SHIFTS)


with torch.inference_mode():
    rope_input = torch.randn(1, 2, cfg.max_positions, cfg.head_dim, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
    every_position = torch.arange(cfg.max_positions)
    by_formula = rope_by_formula(rope_input, every_position)
    ROPE_FORMULA = {
        "max_abs_diff": (rotary64(rope_input, every_position) - by_formula).abs().max().item(),
        "backwards_max_abs_diff": (turned_backwards(rope_input, every_position) - by_formula).abs().max().item(),
        "backwards_shift_error": shift_error(turned_backwards),
    }
assert ROPE_FORMULA["max_abs_diff"] < 1e-12
assert ROPE_FORMULA["backwards_max_abs_diff"] > 1.0 and ROPE_FORMULA["backwards_shift_error"] < 1e-12
say(en=f"`Rotary` against the formula (FP64, 512 positions): largest difference {ROPE_FORMULA['max_abs_diff']:.1e}. "
       f"Turned backwards: {ROPE_FORMULA['backwards_max_abs_diff']:.2f} from the formula (caught), although its scores "
       f"change under the shifts by only {ROPE_FORMULA['backwards_shift_error']:.1e}.",
    zh=f"`Rotary` 对照公式（FP64，512 个位置）：最大差异 {ROPE_FORMULA['max_abs_diff']:.1e}。"
       f"反向旋转：与公式相差 {ROPE_FORMULA['backwards_max_abs_diff']:.2f}（被抓住了），尽管在平移下它的分数只变化了 "
       f"{ROPE_FORMULA['backwards_shift_error']:.1e}。")

# %% [markdown] lang="en"
# The model of this section is Llama-shaped: GQA with $H_{kv} = 2$, RoPE, RMSNorm, the gated SiLU MLP and
# no biases. **Criterion: cached path = full recomputation** over the same 12 configurations as section 4.

# %% [markdown] lang="zh"
# 本节的模型采用 Llama 的结构：$H_{kv} = 2$ 的 GQA、RoPE、RMSNorm、带门控的 SiLU MLP，没有偏置。**判据：缓存路径 = 完整重算**，仍然是第 4 节的 12 种配置。

# %%
LLAMA_CFG = ArchConfig(kv_heads=2, norm="rms", mlp_kind="swiglu", bias=False)


def build_rope(config: ArchConfig = LLAMA_CFG, angle_dtype=torch.float64, **parts) -> ArchDecoder:
    return build_arch(config, rotary=Rotary(config.head_dim, config.max_positions, config.rope_theta, angle_dtype), **parts)


rope_model = build_rope()
assert not hasattr(rope_model, "wpe") and rope_model.blocks[0].attn.k.bias is None
ROPE_GRID = run_grid(build_rope)
grid_table(ROPE_GRID)
assert all(r["passed"] and r["kv_shape_ok"] for r in ROPE_GRID)

# %% [markdown] lang="en"
# **Negative control: the new chunk rotated from position 0.** A common slip is to rotate each call's
# tokens at positions $0, 1, \dots$, as if the chunk were a fresh sequence, while the mask still uses true
# positions. The cached keys then carry their true rotations and the new ones the wrong rotations; the
# relative distances the scores see are wrong. The cell wraps the rotation so that it counts from the
# first position of each call, and runs the usual check with chunks of 1, 2 and 5.

# %% [markdown] lang="zh"
# **负对照：新分块从位置 0 开始旋转。** 一个常见的疏忽是：每次调用都按位置 $0, 1, \dots$ 旋转新 token，仿佛这个分块是一条全新的序列，而掩码仍然使用真实位置。于是，缓存中的键带着正确的旋转，新的键却带着错误的旋转，分数所看到的相对距离就错了。下面的单元格包装了旋转，让它从每次调用的第一个位置开始计数，然后以分块长度 1、2、5 运行常规的检查。

# %%
class ChunkLocalRotary(nn.Module):
    # [en] WRONG on purpose: rotates every call's tokens as if they started at position 0.
    # [zh] 故意写错：把每次调用的 token 都当作从位置 0 开始来旋转。
    def __init__(self, rotary: Rotary):
        super().__init__()
        self.rotary = rotary

    def forward(self, x, positions):
        return self.rotary(x, positions - positions[0])


def build_rope_chunk_local(**parts):
    net = build_rope(**parts)
    net.rotary = ChunkLocalRotary(net.rotary)
    return net


ROPE_FROM_ZERO = [check_cached(build_rope_chunk_local, STREAM, 1, chunk) for chunk in (1, 2, 5)]
say_table([[str(r["chunk"]), f"{r['max_abs_logit_err']:.3f}", f"`{r['passed']}`"] for r in ROPE_FROM_ZERO],
          en=["chunk", "max abs logit error", "passed"], zh=["分块长度", "logits 最大绝对误差", "通过"])
assert not any(r["passed"] for r in ROPE_FROM_ZERO)

# %% [markdown] lang="en"
# **A lesson rather than a bug: a uniform shift of all positions.** Now number *every* position, in
# every call, $s = 100$ higher than it should be. With learned positions the model reads other rows of
# its table and its logits change. With RoPE every query and key turns by the same extra angle $s\theta_i$,
# which cancels in every score: the logits stay the same up to rounding. So RoPE cannot see an absolute
# offset at all, only distances. The cached-versus-full check passes for either model, because the shift
# applies to both paths alike: a numbering that is off by the same amount in every call is invisible to
# a check that compares two paths. With RoPE it does not even change the model; with learned positions
# it does, and only a comparison with an outside reference would notice. (Positions still matter for a
# model's maximum context: a shift that pushes them past the range seen in training is another problem.)

# %% [markdown] lang="zh"
# **一个教训，而不是错误：所有位置统一平移。** 现在让每次调用中的**每个**位置都比应有的位置大 $s = 100$。对可学习的位置嵌入，模型读到的是表中的其他行，logits 随之改变。对 RoPE，每个查询和键都多转了同样的角度 $s\theta_i$，这在每个分数里都会相互抵消：logits 在舍入误差范围内保持不变。所以 RoPE 根本看不到绝对偏移，只看得到距离。“缓存对照完整重算”的检查对两个模型都能通过，因为平移同样作用于两条路径：每次调用的编号都偏移同样的量，比较两条路径的检查就看不出来。对 RoPE，这种偏移甚至不会改变模型；对可学习的位置嵌入，它会改变模型，但只有与外部参照比较才能发现。（位置对模型的最大上下文长度仍然重要：如果平移把位置推到训练时见过的范围之外，那是另一个问题。）

# %%
def shifted_positions(past_len: int, new_len: int) -> torch.Tensor:
    return 100 + past_len + torch.arange(new_len)


with torch.inference_mode():
    rope64 = build_rope().double()
    learned64 = build_arch(GQA_CONFIGS["gqa2"]).double()
    rope_plain, _ = rope64(STREAM)
    learned_plain, _ = learned64(STREAM)
    with rope64.parts(positions_fn=shifted_positions):
        rope_shifted, _ = rope64(STREAM)
    with learned64.parts(positions_fn=shifted_positions):
        learned_shifted, _ = learned64(STREAM)
SHIFT_LESSON = {
    "rope_max_abs_logit_diff": (rope_shifted - rope_plain).abs().max().item(),
    "learned_max_abs_logit_diff": (learned_shifted - learned_plain).abs().max().item(),
    "rope_cached_vs_full": check_cached(lambda: build_rope(positions_fn=shifted_positions), STREAM, 2, 5, torch.float64),
    "learned_cached_vs_full": check_cached(lambda: build_arch(GQA_CONFIGS["gqa2"], positions_fn=shifted_positions), STREAM, 2, 5, torch.float64),
}
assert SHIFT_LESSON["rope_max_abs_logit_diff"] < 1e-10 < 1e-2 < SHIFT_LESSON["learned_max_abs_logit_diff"]
assert SHIFT_LESSON["rope_cached_vs_full"]["passed"] and SHIFT_LESSON["learned_cached_vs_full"]["passed"]
say(en=f"Shift by 100 (FP64): RoPE logits move by {SHIFT_LESSON['rope_max_abs_logit_diff']:.1e}, learned-position "
       f"logits by {SHIFT_LESSON['learned_max_abs_logit_diff']:.3f}; cached = full holds for both shifted models.",
    zh=f"平移 100（FP64）：RoPE 模型的 logits 只变化了 {SHIFT_LESSON['rope_max_abs_logit_diff']:.1e}，可学习位置模型的 logits 变化了 "
       f"{SHIFT_LESSON['learned_max_abs_logit_diff']:.3f}；两个平移后的模型都满足“缓存 = 完整重算”。")

# %% [markdown] lang="en"
# ### 5.1 Cross-check with Hugging Face Llama (optional)
#
# Everything so far compared our model with itself. A tiny `LlamaForCausalLM` (GQA and RoPE, built from
# a `LlamaConfig` with our sizes, nothing downloaded) is an outside referee: we copy our weights into it
# and compare in FP64. The mapping is one to one, with no transposes (Llama's projections are
# `nn.Linear`, like ours): `wte` → `model.embed_tokens`, `blocks[i].ln_1`/`ln_2` →
# `input_layernorm`/`post_attention_layernorm`, `attn.q/k/v/proj` → `self_attn.q_proj/k_proj/v_proj/o_proj`,
# `mlp.gate/up/down` → `mlp.gate_proj/up_proj/down_proj`, `ln_f` → `model.norm`, `lm_head` → `lm_head`.
# The configuration sets `num_key_value_heads=2`, `head_dim=16`, `rms_norm_eps=1e-5`, no biases, no
# tied embeddings, no special tokens, `rope_theta=10000` and `attn_implementation="eager"`.
#
# One finding comes before the comparison. Hugging Face's Llama, even after `.double()`, computes three
# steps in FP32: the rotary angles with their cosines and sines, the RMSNorm, and the attention softmax
# (read in `modeling_llama.py`: `.float()` in `LlamaRotaryEmbedding.forward`, `.to(torch.float32)` in
# `LlamaRMSNorm.forward`, `dtype=torch.float32` in `eager_attention_forward`; the next two cells show the
# effect of each). Against our pure FP64 model the referee therefore differs by FP32 rounding, far above
# `1e-10`. To compare at `1e-10` we build a copy of our model that performs the same three steps in FP32
# (`hf_precision=True`). The next cell holds the tools: the configuration, the weight mapping, Hugging
# Face's cached path through a `DynamicCache`, and one comparison function.

# %% [markdown] lang="zh"
# ### 5.1 与 Hugging Face Llama 交叉核对（可选）
#
# 到目前为止，我们都是拿自己的模型和自己比。一个很小的 `LlamaForCausalLM`（GQA 加 RoPE，用我们的尺寸构造 `LlamaConfig`，不下载任何东西）可以充当外部裁判：把我们的权重复制进去，在 FP64 下比较。权重映射是一一对应的，不需要转置（Llama 的投影和我们的一样都是 `nn.Linear`）：`wte` → `model.embed_tokens`，`blocks[i].ln_1`/`ln_2` → `input_layernorm`/`post_attention_layernorm`，`attn.q/k/v/proj` → `self_attn.q_proj/k_proj/v_proj/o_proj`，`mlp.gate/up/down` → `mlp.gate_proj/up_proj/down_proj`，`ln_f` → `model.norm`，`lm_head` → `lm_head`。配置项设为 `num_key_value_heads=2`、`head_dim=16`、`rms_norm_eps=1e-5`，没有偏置，不共享嵌入权重，没有特殊 token，`rope_theta=10000`，`attn_implementation="eager"`。
#
# 在比较之前，先说一个发现。Hugging Face 的 Llama 即使调用了 `.double()`，仍有三步在 FP32 下计算：旋转角及其余弦和正弦、RMSNorm，以及注意力的 softmax（见 `modeling_llama.py`：`LlamaRotaryEmbedding.forward` 中的 `.float()`、`LlamaRMSNorm.forward` 中的 `.to(torch.float32)`、`eager_attention_forward` 中的 `dtype=torch.float32`；后面两个单元格展示了每一步的影响）。因此，与我们纯 FP64 的模型相比，裁判的结果会相差 FP32 量级的舍入误差，远大于 `1e-10`。为了在 `1e-10` 的容差下比较，我们构建一个模型副本，让它也在 FP32 下完成这三步（`hf_precision=True`）。下一个单元格准备所需的工具：配置、权重映射、Hugging Face 通过 `DynamicCache` 走的缓存路径，以及一个比较函数。

# %%
def softmax_attention_fp32(q, k, v, allowed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1, dtype=torch.float32).to(q.dtype) @ v


FP32_STEPS = ("angles", "norm", "softmax")


def build_llama_like(hf_precision: bool = False, config: ArchConfig = LLAMA_CFG, fp32_steps=None, **parts) -> ArchDecoder:
    # [en] fp32_steps: which of Hugging Face's FP32 steps to reproduce; hf_precision=True means all three.
    # [zh] fp32_steps：要复现 Hugging Face 的哪几个 FP32 步骤；hf_precision=True 表示三个全部复现。
    steps = set(FP32_STEPS if hf_precision else fp32_steps or ())
    attend = {"attend": softmax_attention_fp32} if "softmax" in steps else {}
    net = build_rope(config, angle_dtype=torch.float32 if "angles" in steps else torch.float64, **(attend | parts))
    for module in net.modules():
        if isinstance(module, RMSNorm) and "norm" in steps:
            module.compute_dtype = torch.float32
    return net


def llama_state_dict(ours: ArchDecoder) -> dict:
    sd = {"model.embed_tokens.weight": ours.wte.weight, "model.norm.weight": ours.ln_f.weight,
          "lm_head.weight": ours.lm_head.weight}
    for i, block in enumerate(ours.blocks):
        prefix = f"model.layers.{i}."
        sd[prefix + "input_layernorm.weight"] = block.ln_1.weight
        sd[prefix + "post_attention_layernorm.weight"] = block.ln_2.weight
        for mine, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("proj", "o_proj")):
            sd[prefix + f"self_attn.{theirs}.weight"] = getattr(block.attn, mine).weight
        for mine, theirs in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            sd[prefix + f"mlp.{theirs}.weight"] = getattr(block.mlp, mine).weight
    return {name: tensor.detach().clone() for name, tensor in sd.items()}


def hf_fields(config: ArchConfig) -> dict:
    return dict(vocab_size=config.vocab, hidden_size=config.width, intermediate_size=config.mlp,
                num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.n_kv,
                head_dim=config.head_dim, max_position_embeddings=config.max_positions, rms_norm_eps=1e-5,
                hidden_act="silu", tie_word_embeddings=False, attention_dropout=0.0,
                bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation="eager",
                rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta})


def hf_llama(ours: ArchDecoder):
    hf = LlamaForCausalLM(LlamaConfig(**hf_fields(ours.config), attention_bias=False, mlp_bias=False)).eval()
    hf.load_state_dict(llama_state_dict(ours), strict=True)
    return hf.double()


@torch.inference_mode()
def hf_chunked(hf, ids, chunk):
    # [en] Hugging Face's cached path: one DynamicCache, filled chunk by chunk.
    # [zh] Hugging Face 的缓存路径：一个 DynamicCache，按分块逐次填充。
    cache, pieces, start = DynamicCache(config=hf.config), [], 0
    for length in chunk_lengths(ids.shape[1], chunk):
        out = hf(input_ids=ids[:, start:start + length], past_key_values=cache, use_cache=True)
        pieces.append(out.logits)
        start += length
    return torch.cat(pieces, dim=1), cache


@torch.inference_mode()
def cross_check(build, make_hf, chunks=(1, 2, 5)) -> dict:
    ours = build().double()
    hf = make_hf(ours)
    ids = STREAM
    result = {"full": (ours(ids)[0] - hf(input_ids=ids).logits).abs().max().item()}
    for chunk in chunks:
        ours_logits, ours_cache = run_chunked(ours, ids, chunk)
        hf_logits, hf_cache = hf_chunked(hf, ids, chunk)
        if isinstance(ours_cache[0], FullKV):
            result[f"kv_chunk_{chunk}"] = max(max((c.k - layer.keys).abs().max().item(), (c.v - layer.values).abs().max().item())
                                              for c, layer in zip(ours_cache, hf_cache.layers))
        result[f"cached_chunk_{chunk}"] = (ours_logits - hf_logits).abs().max().item()
    return result


def cross_table(cross: dict, labels: dict) -> None:
    def worst(errors: dict, prefix: str) -> str:
        values = [v for k, v in errors.items() if k.startswith(prefix)]
        return f"{max(values):.1e}" if values else "-"
    say_table([[labels[name], f"{e['full']:.1e}", worst(e, "cached_chunk"), worst(e, "kv_chunk")] for name, e in cross.items()],
              en=["our model (FP64)", "full call: logits", "cached, chunks of 1, 2, 5: logits", "cached K/V"],
              zh=["我们的模型（FP64）", "完整调用：logits", "缓存路径（分块长度 1、2、5）：logits", "缓存的 K/V"])


# %% [markdown] lang="en"
# First, the finding: the cell adds Hugging Face's three FP32 steps to our FP64 copy one at a time and
# compares a full call. Only with all three does the difference fall below `1e-10`.

# %% [markdown] lang="zh"
# 先验证上面的发现：下面的单元格把 Hugging Face 的三个 FP32 步骤逐个加进我们的 FP64 副本，比较一次完整调用。只有三步全部复现时，差异才降到 `1e-10` 以下。

# %%
LLAMA_FP32_STEPS = None
if HAVE_HF:
    with torch.inference_mode():
        LLAMA_FP32_STEPS = {}
        for count in range(len(FP32_STEPS) + 1):
            ours = build_llama_like(fp32_steps=FP32_STEPS[:count]).double()
            LLAMA_FP32_STEPS[" + ".join(FP32_STEPS[:count]) or "none"] = (ours(STREAM)[0] - hf_llama(ours)(input_ids=STREAM).logits).abs().max().item()
    say_table([[f"`{name}`", f"{error:.1e}"] for name, error in LLAMA_FP32_STEPS.items()],
              en=["Hugging Face's FP32 steps reproduced in our FP64 copy", "full call: max abs logit difference"],
              zh=["在我们的 FP64 副本中复现的 Hugging Face FP32 步骤", "完整调用：logits 最大绝对差"])
    assert list(LLAMA_FP32_STEPS.values())[-1] < 1e-10 < min(list(LLAMA_FP32_STEPS.values())[:-1])

# %% [markdown] lang="en"
# Then the comparison itself, full and cached (chunks of 1, 2 and 5), logits and every layer's cached K/V.
# The last row is section 4's negative control: the same copy with tiled K/V heads, which the referee
# must reject.

# %% [markdown] lang="zh"
# 然后是正式的比较：完整调用和缓存路径（分块长度 1、2、5），比较 logits 以及每一层缓存的 K/V。最后一行是第 4 节的负对照：同一个副本改用平铺的 K/V 头，裁判必须把它判为不一致。

# %%
LLAMA_CROSS = None
if HAVE_HF:
    LLAMA_CROSS = {
        "hf_precision": cross_check(lambda: build_llama_like(hf_precision=True), hf_llama),
        "pure_fp64": cross_check(build_llama_like, hf_llama),
        "tiled_kv_control": cross_check(lambda: build_llama_like(hf_precision=True, expand=tile_kv), hf_llama),
    }
    say(en="Largest absolute difference from Hugging Face `LlamaForCausalLM`:",
        zh="与 Hugging Face `LlamaForCausalLM` 的最大绝对差：")
    cross_table(LLAMA_CROSS, {"hf_precision": "`build_llama_like(hf_precision=True)`", "pure_fp64": "`build_llama_like()`",
                              "tiled_kv_control": "`hf_precision=True, expand=tile_kv`"})
    assert max(LLAMA_CROSS["hf_precision"].values()) < 1e-10
    # [en] The referee's FP32 steps are visible against pure FP64, but only as rounding.
    # [zh] 与纯 FP64 的模型相比，能看出裁判的 FP32 步骤，但差异只在舍入误差的量级。
    assert 1e-10 < LLAMA_CROSS["pure_fp64"]["full"] < 1e-5
    # [en] Section 4's tiling control is caught.
    # [zh] 第 4 节平铺 K/V 头的负对照被抓住了。
    assert min(LLAMA_CROSS["tiled_kv_control"].values()) > 1e-2
    say(en="Hugging Face Llama agrees with our GQA + RoPE model within 1e-10 in FP64, full and cached, logits and "
           "cached K/V, once our copy computes the same three steps in FP32; the tiled K/V heads of section 4 are "
           "caught here.",
        zh="当我们的模型副本也在 FP32 下计算那三步时，Hugging Face Llama 与我们的 GQA + RoPE 模型在 FP64 下的差异小于 1e-10，"
           "完整路径和缓存路径、logits 和缓存的 K/V 都是如此；第 4 节中平铺 K/V 头的错误在这里被抓住了。")
else:
    say(en=f"The cross-check with Hugging Face Llama is skipped: `transformers` is not available here ({HF_SKIP}).",
        zh=f"与 Hugging Face Llama 的交叉核对已跳过：当前环境没有可用的 `transformers`（{HF_SKIP}）。")
