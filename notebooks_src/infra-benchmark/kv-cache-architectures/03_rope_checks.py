# %% [markdown] lang="en"
# **The scores depend only on relative position, shown numerically.** Take one random query vector and one
# random key vector in FP64, rotate them to positions $m$ and $n$, and compare the score with the score after
# moving both by the same shift $s$, for all $m, n < 64$ and shifts up to 400. The rotation must also keep
# lengths (it is orthogonal). For contrast, adding learned position vectors (section 3's way) gives scores
# that change with the shift.

# %% [markdown] lang="zh"
# **用数值验证：分数只取决于相对位置。** 在 FP64 下取一个随机查询向量和一个随机键向量，分别旋转到位置 $m$ 和 $n$，再把两者同时平移 $s$，比较平移前后的分数；$m$ 和 $n$ 取遍所有小于 64 的值，平移量最大为 400。旋转还必须保持向量长度不变，因为它是正交变换。作为对照，如果像第 3 节那样加上可学习的位置向量，分数就会随平移而改变。

# %%
rotary64 = Rotary(cfg.head_dim, cfg.max_positions, 10000.0)
gen = torch.Generator().manual_seed(SEED)
q_vec, k_vec = (torch.randn(cfg.head_dim, generator=gen, dtype=torch.float64) for _ in range(2))
# [en] A random position table stands in for learned positions (wpe).
# [zh] 用一张随机的位置表代替可学习的位置嵌入（wpe）。
table = torch.randn(cfg.max_positions, cfg.head_dim, generator=gen, dtype=torch.float64)
SHIFTS, POS = [1, 7, 100, 400], torch.arange(64)


def rope_scores(rotate, shift: int):
    # [en] Scores of q at positions shift + m against k at positions shift + n, [64, 64].
    # [zh] 位于 shift + m 的 q 与位于 shift + n 的 k 之间的分数，形状 [64, 64]。
    return rotate(q_vec.expand(64, -1), shift + POS) @ rotate(k_vec.expand(64, -1), shift + POS).T


def shift_error(rotate) -> float:
    return max(max_abs_err(rope_scores(rotate, s), rope_scores(rotate, 0)) for s in SHIFTS)


learned = lambda x, positions: x + table[positions]
RELATIVE = {"rope_shift_error": shift_error(rotary64), "learned_shift_error": shift_error(learned),
            "rope_norm_error": max_abs_err(rotary64(q_vec.expand(448, -1), torch.arange(448)).norm(dim=-1),
                                           q_vec.norm().expand(448))}
say(en=f"Shifting both positions by {', '.join(map(str, SHIFTS))}: RoPE scores change by at most "
       f"{RELATIVE['rope_shift_error']:.1e} (FP64) and lengths are kept to {RELATIVE['rope_norm_error']:.1e}; with learned "
       f"positions the scores change by {RELATIVE['learned_shift_error']:.2f}.",
    zh=f"把两个位置同时平移 {'、'.join(map(str, SHIFTS))}：RoPE 的分数最多变化 {RELATIVE['rope_shift_error']:.1e}（FP64），"
       f"向量长度的误差不超过 {RELATIVE['rope_norm_error']:.1e}；用可学习的位置向量时，分数变化了 {RELATIVE['learned_shift_error']:.2f}。")
assert RELATIVE["rope_shift_error"] < 1e-12 and RELATIVE["rope_norm_error"] < 1e-12
assert RELATIVE["learned_shift_error"] > 1.0

# %% [markdown] lang="en"
# **Pair by pair: RoPE is its formula.** The shift test holds for any rotation by angles proportional to the
# position: also for one that turns every pair the wrong way, or at the wrong frequencies. It cannot tell
# whether `Rotary` computes the formula of this section, and cached-versus-full cannot either (both paths
# would share the mistake). So we compare `Rotary` with the formula itself, written out pair by pair with the
# frequencies computed anew: for every position $p < 512$ and every pair $i < D_h/2$, coordinates $i$ and
# $i + D_h/2$ must become $(x_i \cos p\theta_i - x_{i+D_h/2} \sin p\theta_i,\; x_i \sin p\theta_i + x_{i+D_h/2} \cos p\theta_i)$,
# in FP64, within $10^{-12}$. The negative control turns every pair backwards, by $-p\theta_i$: it passes the
# shift test and fails this one.

# %% [markdown] lang="zh"
# **逐对核对：RoPE 与它的公式一致。** 只要转角与位置成正比，上面的平移检验就成立：即使每一对都转错了方向，或者频率不对，也照样成立。因此它判断不了 `Rotary` 算的是不是本节的公式，“缓存对照完整重算”同样判断不了（两条路径会犯同一个错误）。所以我们直接拿 `Rotary` 与公式本身比较：逐对写出公式，并重新计算频率。对每个位置 $p < 512$ 和每一对 $i < D_h/2$，第 $i$ 维和第 $i + D_h/2$ 维必须变为 $(x_i \cos p\theta_i - x_{i+D_h/2} \sin p\theta_i,\; x_i \sin p\theta_i + x_{i+D_h/2} \cos p\theta_i)$，在 FP64 下最大绝对误差不超过 $10^{-12}$。负对照让每一对都反向旋转 $-p\theta_i$：它能通过平移检验，却通不过这项检查。

# %%
def rope_by_formula(x, positions, theta: float = 10000.0):
    # [en] The rotation written out pair by pair: pair i is (x_i, x_{i + D_h/2}), turned by p * theta**(-2i/D_h).
    # [zh] 逐对写出的旋转：第 i 对是 (x_i, x_{i + D_h/2})，旋转角为 p * theta**(-2i/D_h)。
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


rope_input = torch.randn(1, 2, cfg.max_positions, cfg.head_dim, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
every_position = torch.arange(cfg.max_positions)
by_formula = rope_by_formula(rope_input, every_position)
ROPE_FORMULA = {"rotary": max_abs_err(rotary64(rope_input, every_position), by_formula),
                "backwards": max_abs_err(turned_backwards(rope_input, every_position), by_formula),
                "backwards_shift_error": shift_error(turned_backwards)}
backwards_caught = ROPE_FORMULA["backwards"] > 1.0
CONTROLS["rope_turned_backwards"] = {"section": 5, "check": "rope_by_formula", "caught": backwards_caught}
say(en=f"`Rotary` against the formula (FP64, 512 positions): largest difference {ROPE_FORMULA['rotary']:.1e}. Turned backwards: "
       f"its scores change under the shifts by only {ROPE_FORMULA['backwards_shift_error']:.1e}, so it passes the shift test, "
       f"but it is {ROPE_FORMULA['backwards']:.2f} from the formula, caught.",
    zh=f"`Rotary` 对照公式（FP64，512 个位置）：最大绝对误差为 {ROPE_FORMULA['rotary']:.1e}。反向旋转：平移时分数只变化 "
       f"{ROPE_FORMULA['backwards_shift_error']:.1e}，能通过平移检验，但与公式的最大绝对误差为 {ROPE_FORMULA['backwards']:.2f}，已查出。")
assert ROPE_FORMULA["rotary"] < 1e-12
assert ROPE_FORMULA["backwards_shift_error"] < 1e-12 and backwards_caught

# %% [markdown] lang="en"
# From here on the model is Llama-shaped: GQA with $H_{kv} = 2$, RoPE, RMSNorm, the gated SiLU MLP and no
# biases (`LLAMA_CFG`). **Criterion: cached path = full recomputation** over the same 12 configurations as
# section 4. **Negative control: the new chunk rotated from position 0.** A common slip is to rotate each
# call's tokens at positions $0, 1, \dots$, as if the chunk were a fresh sequence, while the mask still uses
# true positions. Keys are rotated before they are cached, so each key keeps the rotation of its place inside
# its own chunk: only the first chunk's keys are right, and keys from different chunks carry inconsistent
# rotations. With one token per call every angle is 0 and the cached path loses positions entirely; the full
# path, one call from position 0, stays right. `RotatedFromZero` overrides `rotate` to do exactly that; the
# check must fail for chunks of 1, 2 and 5.

# %% [markdown] lang="zh"
# 从这里开始，模型采用 Llama 的结构：$H_{kv} = 2$ 的 GQA、RoPE、RMSNorm、带门控的 SiLU MLP，不带偏置（`LLAMA_CFG`）。**判据：缓存路径 = 完整重算**，仍是第 4 节的 12 种配置。**负对照：新分块从位置 0 开始旋转。** 一个常见的疏忽是：每次调用都按位置 $0, 1, \dots$ 旋转新 token，仿佛这个分块是一条全新的序列，而掩码仍使用真实位置。键是旋转之后才存进缓存的，所以每个键保留的是它在自己分块内位置上的旋转：只有第一个分块的键是对的，不同分块的键带着彼此不一致的旋转。每次只送入一个 token 时，所有转角都是 0，缓存路径完全丢失了位置信息；完整路径只有一次从位置 0 开始的调用，仍然正确。`RotatedFromZero` 重写了 `rotate`，恰好犯了这个错误；分块长度为 1、2、5 时，检查都必须失败。

# %%
LLAMA_CFG = ArchConfig(kv_heads=2, rope=True, norm="rms", mlp_kind="swiglu", bias=False)


class RotatedFromZero(Attention):
    # [en] WRONG on purpose: every call's tokens are rotated as if they started at position 0.
    # [zh] 故意写错：把每次调用的 token 都当作从位置 0 开始来旋转。
    def rotate(self, x, positions):
        return super().rotate(x, positions - positions[0])


ROPE_GRID = run_grid(lambda: build(LLAMA_CFG))
rotated = run_control(lambda: build(LLAMA_CFG, lambda i: RotatedFromZero(LLAMA_CFG)))
CONTROLS["rotated_from_zero"] = {"section": 5, "check": "check_cached", "caught": rotated["caught"]}
summary_table({"`build(LLAMA_CFG)`": ROPE_GRID})
say(en=f"Rotated from position 0: the check fails for chunks of 1, 2 and 5 (smallest logit error "
       f"{rotated['measured']:.2f}), caught.",
    zh=f"从位置 0 开始旋转：分块长度为 1、2、5 时检查全部失败（logits 的最大绝对误差最小也有 "
       f"{rotated['measured']:.2f}），已查出。")
assert all(r["passed"] for r in ROPE_GRID) and rotated["caught"]

# %% [markdown] lang="en"
# **A lesson rather than a bug: a uniform shift of all positions.** Now number *every* token $s = 100$ higher
# than it should be (the decoder takes explicit `positions`). With learned positions the model reads other
# rows of its table and its logits change. With RoPE every query and key turns by the same extra angle
# $s\theta_i$, which cancels in every score: the logits stay the same up to rounding. So RoPE cannot see an
# absolute offset at all, only distances. A numbering that is off by the same amount in every call is also
# invisible to cached-versus-full, which compares two paths that share it. With RoPE it does not even change
# the model; with learned positions it does, and only an outside reference would notice. (Positions still
# matter for a model's maximum context: a shift that pushes them past the range seen in training is another
# problem.)

# %% [markdown] lang="zh"
# **不算错误，却值得记住：所有位置统一平移。** 现在让**每个** token 的编号都比应有的大 $s = 100$（解码器接受显式传入的 `positions`）。对可学习的位置嵌入，模型读到的是表中的其他行，logits 随之改变。对 RoPE，每个查询和键都多转了同样的角度 $s\theta_i$，它在每个分数中相互抵消，logits 在舍入误差范围内保持不变。所以 RoPE 根本看不到绝对偏移，只看得到距离。如果每次调用的编号都偏移同样的量，“缓存对照完整重算”也看不出来，因为它比较的两条路径带着同样的偏移。对 RoPE，这种偏移甚至不会改变模型；对可学习的位置嵌入，它会改变模型，但只有外部裁判才能发现。（不过位置仍受模型最大上下文长度的约束：平移如果把位置推出训练时见过的范围，那是另一个问题。）

# %%
with torch.inference_mode():
    shifted = 100 + torch.arange(STREAM_LEN)
    rope64, learned64 = build(LLAMA_CFG).double(), build(GQA2).double()
    SHIFT_LESSON = {"rope_logit_change": max_abs_err(rope64(STREAM, positions=shifted)[0], rope64(STREAM)[0]),
                    "learned_logit_change": max_abs_err(learned64(STREAM, positions=shifted)[0], learned64(STREAM)[0])}
say(en=f"All positions shifted by 100 (FP64): the RoPE model's logits move by {SHIFT_LESSON['rope_logit_change']:.1e}, "
       f"the learned-position model's by {SHIFT_LESSON['learned_logit_change']:.3f}.",
    zh=f"所有位置统一平移 100（FP64）：RoPE 模型的 logits 只变化了 {SHIFT_LESSON['rope_logit_change']:.1e}，"
       f"可学习位置模型的 logits 变化了 {SHIFT_LESSON['learned_logit_change']:.3f}。")
assert SHIFT_LESSON["rope_logit_change"] < 1e-10 < 1e-2 < SHIFT_LESSON["learned_logit_change"]
