# %% [markdown] lang="en"
# ## 7. Memory: reserved versus used
#
# Correctness settled, what does paging buy? We simulate a workload of 1,000 requests, drawn with a
# seeded generator: prompt lengths and output lengths are each **log-uniform** between 16 and 1,024
# tokens (many short requests, a few long ones), independently, and the context limit is
# $T_{\max}$ = 2,048, so every request fits. A request holds K/V from its prefill to its last decode
# step. After prefill it stores its $p$ prompt positions, and every decode step stores one more, so at
# its $j$-th step ($j = 0 \dots o - 1$ for $o$ output tokens) it uses $p + j$ positions; the last token
# generated is never fed back. What it *reserves* depends on the allocator:
#
# * `contiguous_max`, **contiguous, to the maximum length**: $T_{\max}$ positions, from the start;
# * `contiguous_final`, **contiguous, to the final length**: $p + o - 1$ positions, from the start,
#   which needs to know the output length in advance (no real server does);
# * `paged_8`, `paged_16`, `paged_32`, **paged**: $\lceil (p + j) / b \rceil \cdot b$ positions for
#   blocks of $b$ = 8, 16 or 32.
#
# We sum used and reserved positions over every step of every request (a time average, as a server's
# memory is occupied over time) and call $1 - \text{used}/\text{reserved}$ the **waste**. Bytes follow
# the first notebook's formula, per token $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$ (K and V, layers,
# KV heads, head dimension, bytes per element), for our decoder in FP32. The waste is a ratio, so it
# does not depend on the bytes per token: it is the same for any model.

# %% [markdown] lang="zh"
# ## 7. 内存：预留量与使用量
#
# 正确性有了保证，那么分页究竟能省下什么？我们用固定种子的随机数模拟一个包含 1000 个请求的负载：提示长度和输出长度相互独立，都在 16 到 1024 个 token 之间服从**对数均匀分布**（短请求多，长请求少）；上下文上限 $T_{\max}$ = 2048，所以每个请求都放得下。一个请求从预填充开始到最后一个解码步为止都占用 K/V。预填充之后它存储 $p$ 个提示位置，之后每个解码步再多存一个；因此在第 $j$ 步（输出 $o$ 个 token 时 $j = 0 \dots o - 1$），它使用 $p + j$ 个位置；最后生成的那个 token 不会再送回模型。它**预留**多少，则取决于分配方式：
#
# * `contiguous_max`，**连续分配，按最大长度**：从一开始就预留 $T_{\max}$ 个位置；
# * `contiguous_final`，**连续分配，按最终长度**：从一开始就预留 $p + o - 1$ 个位置，这要求事先知道输出长度（真实的推理服务无从知道）；
# * `paged_8`、`paged_16`、`paged_32`，**分页**：物理块大小 $b$ 取 8、16 或 32，预留 $\lceil (p + j) / b \rceil \cdot b$ 个位置。
#
# 我们把每个请求每一步的使用量和预留量分别累加（相当于按时间平均，因为服务器的内存是在一段时间里被占用的），并把 $1 - \text{使用量}/\text{预留量}$ 称为**浪费率**。字节数沿用第一份笔记本的公式，每个 token 为 $2 \cdot L \cdot H_{kv} \cdot D_h \cdot s$（依次为 K 和 V 两份、层数、K/V 头数、每头维度、每个元素的字节数），按我们的解码器和 FP32 计算。浪费率是一个比值，与每个 token 的字节数无关，所以对任何模型都一样。

# %%
N_REQUESTS, MIN_LEN, MAX_LEN, T_LIMIT = 1000, 16, 1024, 2048
MEMORY_BLOCKS = (8, 16, 32)


def log_uniform(rng, low, high, size):
    return np.floor(np.exp(rng.uniform(np.log(low), np.log(high + 1), size))).astype(int)


rng = np.random.default_rng(SEED)
WORK_PROMPTS = log_uniform(rng, MIN_LEN, MAX_LEN, N_REQUESTS)
WORK_OUTPUTS = log_uniform(rng, MIN_LEN, MAX_LEN, N_REQUESTS)
# [en] H_kv = heads in our decoder; FP32.
# [zh] 我们的解码器中 H_kv 等于头数；FP32。
BYTES_PER_TOKEN = 2 * cfg.layers * cfg.heads * cfg.head_dim * 4


def memory_table(prompts, outputs, limit, block_sizes) -> dict:
    used, reserved = 0, {"contiguous_max": 0, "contiguous_final": 0} | {f"paged_{b}": 0 for b in block_sizes}
    for p, o in zip(prompts.tolist(), outputs.tolist()):
        # [en] Positions stored at each step.
        # [zh] 每一步存储的位置数。
        lengths = p + np.arange(o)
        # [en] The last token is never fed back: the longest step stores p + o - 1 positions, the final length.
        # [zh] 最后一个 token 不会再送回模型：存储最多的那一步存了 p + o - 1 个位置，即最终长度。
        assert lengths.max() == p + o - 1
        used += int(lengths.sum())
        reserved["contiguous_max"] += limit * o
        reserved["contiguous_final"] += (p + o - 1) * o
        for b in block_sizes:
            slots = np.ceil(lengths / b).astype(int) * b
            # [en] At most one partly filled block.
            # [zh] 最多只有一个未填满的物理块。
            assert np.all((slots >= lengths) & (slots - lengths < b))
            reserved[f"paged_{b}"] += int(slots.sum())
    return {name: {"reserved_token_steps": r, "used_token_steps": used, "waste_pct": 100 * (1 - used / r),
                   "mean_reserved_kib": r / sum(outputs.tolist()) * BYTES_PER_TOKEN / 1024,
                   "mean_used_kib": used / sum(outputs.tolist()) * BYTES_PER_TOKEN / 1024}
            for name, r in reserved.items()}


MEMORY = memory_table(WORK_PROMPTS, WORK_OUTPUTS, T_LIMIT, MEMORY_BLOCKS)
say(en=(f"Workload: {N_REQUESTS} requests, prompts {WORK_PROMPTS.min()}-{WORK_PROMPTS.max()} tokens (median {int(np.median(WORK_PROMPTS))}), "
        f"outputs {WORK_OUTPUTS.min()}-{WORK_OUTPUTS.max()} (median {int(np.median(WORK_OUTPUTS))}); {BYTES_PER_TOKEN:,} bytes of K/V per token."),
    zh=(f"负载：{N_REQUESTS} 个请求，提示长 {WORK_PROMPTS.min()} 到 {WORK_PROMPTS.max()} 个 token（中位数 {int(np.median(WORK_PROMPTS))}），"
        f"输出长 {WORK_OUTPUTS.min()} 到 {WORK_OUTPUTS.max()} 个 token（中位数 {int(np.median(WORK_OUTPUTS))}）；每个 token 的 K/V 为 {BYTES_PER_TOKEN} 字节。"))
say_table([[f"`{name}`", f"{m['mean_reserved_kib']:,.1f}", f"{m['mean_used_kib']:,.1f}", f"{m['waste_pct']:.1f}%"]
           for name, m in MEMORY.items()],
          en=["allocation", "mean reserved per request step (KiB)", "mean used (KiB)", "waste"],
          zh=["分配方式", "每个请求每步的平均预留量（KiB）", "平均使用量（KiB）", "浪费率"])
assert BYTES_PER_TOKEN == 1024 and WORK_PROMPTS.min() >= MIN_LEN and WORK_OUTPUTS.max() <= MAX_LEN
assert np.all(WORK_PROMPTS + WORK_OUTPUTS - 1 <= T_LIMIT)
# [en] The workload the text describes: 1,000 requests, lengths in [16, 1024], T_max = 2,048, blocks of 8, 16 and 32.
# [zh] 正文所说的负载：1,000 个请求，长度在 [16, 1024] 之间，T_max = 2,048，物理块大小为 8、16、32。
assert (N_REQUESTS, MIN_LEN, MAX_LEN, T_LIMIT, MEMORY_BLOCKS) == (1000, 16, 1024, 2048, (8, 16, 32))
waste = {name: m["waste_pct"] for name, m in MEMORY.items()}
assert waste["contiguous_max"] > waste["contiguous_final"] > waste["paged_32"] > waste["paged_16"] > waste["paged_8"] > 0

# %% [markdown] lang="en"
# The figure shows the same numbers. On this workload, reserving the maximum length wastes
# {{run:memory.contiguous_max:.1f}}% of the reserved K/V memory; even knowing each final length in
# advance wastes {{run:memory.contiguous_final:.1f}}%, because a request reserves at its first step
# the positions it fills only at its last. Paging wastes {{run:memory.paged_8:.1f}}%,
# {{run:memory.paged_16:.1f}}% and {{run:memory.paged_32:.1f}}% with blocks of 8, 16 and 32: only the
# unfilled part of each request's last block, fewer than $b$ positions, which the cell asserts at every
# step.
#
# The vLLM paper (Kwon et al., SOSP 2023) reports that existing systems, which allocate contiguous K/V
# per request, waste 60–80% of their K/V memory, and paging less than 4%. Our reservation to the maximum
# length and our paged caches fall in these ranges; reserving to the final length, which needs the
# output length in advance, wastes less than 60% (the cell below asserts all three). The setups differ. The paper measured real serving systems on GPUs with real request
# traces, where waste also includes *external* fragmentation (free memory in gaps too small to use) and
# the effects of batching many requests at once; ours is an exact count on a synthetic distribution,
# per request, with no allocator at all. Smaller blocks lower the paged waste (asserted above), at the
# cost of longer block tables and more indexing.

# %% [markdown] lang="zh"
# 下图展示同样的数字。在这个负载上，按最大长度预留会浪费 {{run:memory.contiguous_max:.1f}}% 的预留 K/V 内存；即便事先知道每个请求的最终长度，也要浪费 {{run:memory.contiguous_final:.1f}}%，因为请求在第一步就预留了要到最后一步才填满的位置。分页时，物理块大小为 8、16、32 的浪费率分别为 {{run:memory.paged_8:.1f}}%、{{run:memory.paged_16:.1f}}% 和 {{run:memory.paged_32:.1f}}%：浪费的只是每个请求最后一个物理块中未填满的部分，少于 $b$ 个位置，上面的单元格对每一步都断言了这一点。
#
# vLLM 论文（Kwon 等，SOSP 2023）报告：按请求连续分配 K/V 的现有系统会浪费 60% 到 80% 的 K/V 内存，分页则不到 4%。我们按最大长度预留的结果和分页缓存的结果都落在这两个范围内；按最终长度预留需要事先知道输出长度，浪费率低于 60%（下面的单元格对这三点都做了断言）。不过实验设置不同。论文测量的是真实的推理服务系统，在 GPU 上用真实的请求轨迹运行，其浪费还包括**外部**碎片（空闲内存散落在太小而无法利用的空隙里），以及同时批处理大量请求带来的影响；我们则是在合成分布上逐个请求精确计数，根本没有内存分配器。物理块越小，分页的浪费越小（上面已断言），代价是块表更长、索引操作更多。

# %%
# [en] As reported by Kwon et al. (2023); our maximum-length reservation and paged caches fall in the same ranges,
# [en] the reservation to the final length below them.
# [zh] Kwon 等（2023）报告的数字；我们按最大长度预留和分页缓存的浪费率落在同样的范围内，按最终长度预留的浪费率则低于该范围。
VLLM_PAPER = {"contiguous_waste_pct": (60, 80), "paged_waste_pct_below": 4}
assert VLLM_PAPER["contiguous_waste_pct"][0] <= waste["contiguous_max"] <= VLLM_PAPER["contiguous_waste_pct"][1]
assert all(waste[f"paged_{b}"] < VLLM_PAPER["paged_waste_pct_below"] for b in MEMORY_BLOCKS)
assert waste["contiguous_final"] < VLLM_PAPER["contiguous_waste_pct"][0]

fig, ax = plt.subplots(figsize=(6.5, 3.4))
names = list(MEMORY)
bars = ax.barh(names, [MEMORY[n]["waste_pct"] for n in names],
               color=["#c44e52", "#dd8452"] + ["#55a868"] * len(MEMORY_BLOCKS))
for bar, name in zip(bars, names):
    ax.text(bar.get_width() + 1, bar.get_y() + bar.get_height() / 2, f"{MEMORY[name]['waste_pct']:.1f}%", va="center", fontsize=8)
ax.invert_yaxis()
ax.set_xlim(0, 105)
ax.set_xlabel("waste: reserved K/V slots holding no token (%)")
ax.set_title(f"{N_REQUESTS} simulated requests, prompt and output log-uniform in [{MIN_LEN}, {MAX_LEN}]", fontsize=9)
fig.tight_layout()
MEMORY_PNG = OUT / "memory_waste.png"
fig.savefig(MEMORY_PNG, dpi=120)
plt.show()

# %% tags=["prose-values"]
{"memory": {name: float(m["waste_pct"]) for name, m in MEMORY.items()}}
