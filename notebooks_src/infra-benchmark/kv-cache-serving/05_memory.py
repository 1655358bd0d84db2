# %% [markdown] lang="en"
# ## 7. Memory: reserved versus used
#
# Correctness settled, what does paging buy? We simulate a workload of {{run:memory.requests:,}} requests,
# drawn with a seeded generator: prompt lengths and output lengths are each **log-uniform** between
# {{run:memory.min_len}} and {{run:memory.max_len:,}} tokens (many short requests, a few long ones),
# independently, and the context limit $T_{\max}$ is {{run:memory.t_max:,}} tokens, so every request fits. A
# request holds K/V from its prefill to its last decode step. After prefill it stores its $p$ prompt
# positions, and every decode step stores one more, so at its $j$-th step ($j = 0 \dots o - 1$ for $o$
# output tokens) it uses $p + j$ positions; the last token generated is never fed back. What it
# *reserves* depends on the allocator:
#
# * `contiguous_max`, **contiguous, to the maximum length**: $T_{\max}$ positions, from the start;
# * `contiguous_final`, **contiguous, to the final length**: $p + o - 1$ positions, from the start,
#   which needs to know the output length in advance (no real server does);
# * `paged_8`, `paged_16`, `paged_32`, **paged**: $\lceil (p + j) / b \rceil \cdot b$ positions for
#   blocks of $b = 8$, 16 or 32.
#
# We sum used and reserved positions over every step of every request (a time average, as a server's
# memory is occupied over time) and call $1 - \text{used}/\text{reserved}$ the **waste**. Bytes follow
# `kv_bytes_per_token` ({{run:memory.bytes_per_token:,}} bytes per token for our decoder in FP32). The
# waste is a ratio, so it does not depend on the bytes per token: for this workload (this distribution of
# lengths) it is the same for any model with this context limit.

# %% [markdown] lang="zh"
# ## 7. 内存：预留量与使用量
#
# 正确性有了保证，那么分页究竟能省下什么？我们用固定种子的随机数模拟一个包含 {{run:memory.requests:,}} 个请求的负载：提示长度和输出长度相互独立，都在 {{run:memory.min_len}} 到 {{run:memory.max_len:,}} 个 token 之间服从**对数均匀分布**（短请求多，长请求少）；上下文上限 $T_{\max}$ 为 {{run:memory.t_max:,}} 个 token，所以每个请求都放得下。一个请求从预填充开始到最后一个解码步为止都占用 K/V。预填充之后它存储 $p$ 个提示位置，之后每个解码步再多存一个。因此在第 $j$ 步（输出 $o$ 个 token 时，$j = 0 \dots o - 1$），它使用 $p + j$ 个位置；最后生成的那个 token 不会再送回模型。它**预留**多少，则取决于分配方式：
#
# * `contiguous_max`，**连续分配，按最大长度**：从一开始就预留 $T_{\max}$ 个位置；
# * `contiguous_final`，**连续分配，按最终长度**：从一开始就预留 $p + o - 1$ 个位置，这要求事先知道输出长度（真实的推理服务无从知道）；
# * `paged_8`、`paged_16`、`paged_32`，**分页**：物理块大小 $b$ 取 8、16 或 32，预留 $\lceil (p + j) / b \rceil \cdot b$ 个位置。
#
# 我们把每个请求每一步的使用量和预留量分别累加（相当于按时间平均，因为服务器的内存是在一段时间里被占用的），并把 $1 - \text{使用量}/\text{预留量}$ 称为**浪费率**。字节数按 `kv_bytes_per_token` 计算（我们的解码器在 FP32 下每个 token 为 {{run:memory.bytes_per_token:,}} 字节）。浪费率是一个比值，与每个 token 的字节数无关，所以对这个负载（这种长度分布）来说，上下文上限同为 $T_{\max}$ 的任何模型，浪费率都一样。

# %%
N_REQUESTS, MIN_LEN, MAX_LEN, T_LIMIT = 1000, 16, 1024, 2048
MEMORY_BLOCKS = (8, 16, 32)
# [en] H_kv = heads in our decoder; FP32.
# [zh] 我们的解码器中 H_kv 等于头数；FP32。
BYTES_PER_TOKEN = kv_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, 4)


def log_uniform(rng, low, high, size):
    return np.floor(np.exp(rng.uniform(np.log(low), np.log(high + 1), size))).astype(int)


rng = np.random.default_rng(SEED)
WORK_PROMPTS = log_uniform(rng, MIN_LEN, MAX_LEN, N_REQUESTS)
WORK_OUTPUTS = log_uniform(rng, MIN_LEN, MAX_LEN, N_REQUESTS)


def memory_table(prompts, outputs, limit, block_sizes) -> dict:
    used, reserved = 0, {"contiguous_max": 0, "contiguous_final": 0} | {f"paged_{b}": 0 for b in block_sizes}
    for p, o in zip(prompts.tolist(), outputs.tolist()):
        # [en] Positions stored at each step: p, p + 1, ..., p + o - 1. The last token is never fed back, so the
        # [en] longest step stores p + o - 1 positions: the final length, which contiguous_final reserves.
        # [zh] 每一步存储的位置数：p, p + 1, ..., p + o - 1。最后一个 token 不会再送回模型，所以存储最多的那一步
        # [zh] 存了 p + o - 1 个位置：即最终长度，也就是 contiguous_final 预留的长度。
        lengths = p + np.arange(o)
        assert lengths.max() == p + o - 1
        used += int(lengths.sum())
        reserved["contiguous_max"] += limit * o
        reserved["contiguous_final"] += (p + o - 1) * o
        for b in block_sizes:
            slots = np.ceil(lengths / b).astype(int) * b
            # [en] At every step, at most one partly filled block: fewer than b reserved slots hold no token.
            # [zh] 每一步最多只有一个未填满的物理块：预留而未存 token 的槽位少于 b 个。
            assert np.all((slots >= lengths) & (slots - lengths < b))
            reserved[f"paged_{b}"] += int(slots.sum())
    steps = int(outputs.sum())
    return {name: {"reserved_token_steps": r, "used_token_steps": used, "waste_pct": 100 * (1 - used / r),
                   "mean_reserved_kib": r / steps * BYTES_PER_TOKEN / 1024, "mean_used_kib": used / steps * BYTES_PER_TOKEN / 1024}
            for name, r in reserved.items()}


MEMORY = memory_table(WORK_PROMPTS, WORK_OUTPUTS, T_LIMIT, MEMORY_BLOCKS)
say(en=(f"Workload: {N_REQUESTS:,} requests, prompts of {WORK_PROMPTS.min()} to {WORK_PROMPTS.max():,} tokens (median {int(np.median(WORK_PROMPTS))}), "
        f"outputs of {WORK_OUTPUTS.min()} to {WORK_OUTPUTS.max():,} (median {int(np.median(WORK_OUTPUTS))})."),
    zh=(f"负载：{N_REQUESTS:,} 个请求，提示长 {WORK_PROMPTS.min()} 到 {WORK_PROMPTS.max():,} 个 token（中位数 {int(np.median(WORK_PROMPTS))}），"
        f"输出长 {WORK_OUTPUTS.min()} 到 {WORK_OUTPUTS.max():,} 个 token（中位数 {int(np.median(WORK_OUTPUTS))}）。"))
say_table([[f"`{name}`", f"{m['mean_reserved_kib']:,.1f}", f"{m['mean_used_kib']:,.1f}", f"{m['waste_pct']:.1f}%"]
           for name, m in MEMORY.items()],
          en=["allocation", "mean reserved per request step (KiB)", "mean used (KiB)", "waste"],
          zh=["分配方式", "每个请求每步的平均预留量（KiB）", "平均使用量（KiB）", "浪费率"])
waste = {name: m["waste_pct"] for name, m in MEMORY.items()}
# [en] Contiguous reservations waste most; paging wastes less, and less with smaller blocks.
# [zh] 连续预留浪费最多；分页浪费更少，物理块越小浪费越少。
assert waste["contiguous_max"] > waste["contiguous_final"] > waste["paged_32"] > waste["paged_16"] > waste["paged_8"] > 0

# %% tags=["prose-values"]
{"memory": {"requests": N_REQUESTS, "min_len": MIN_LEN, "max_len": MAX_LEN, "t_max": T_LIMIT, "bytes_per_token": BYTES_PER_TOKEN}
 | {name: float(m["waste_pct"]) for name, m in MEMORY.items()}
 | {f"used_{name}": float(100 - m["waste_pct"]) for name, m in MEMORY.items()}}

# %% [markdown] lang="en"
# On this workload, reserving the maximum length wastes {{run:memory.contiguous_max:.1f}}% of the reserved
# K/V memory; even knowing each final length in advance wastes {{run:memory.contiguous_final:.1f}}%,
# because a request reserves at its first step the positions it fills only at its last. Paging wastes
# {{run:memory.paged_8:.1f}}%, {{run:memory.paged_16:.1f}}% and {{run:memory.paged_32:.1f}}% with blocks
# of 8, 16 and 32: only the unfilled part of each request's last block, fewer than $b$ positions, which
# the cell asserts at every step. Smaller blocks waste less, at the cost of longer block tables and more
# indexing.
#
# **The vLLM paper's numbers.** Kwon et al. (SOSP 2023) measured how much of the K/V memory that serving
# systems reserve actually holds token states: **20.4%–38.2%** across three versions of Orca, against
# **96.3%** with vLLM. Orca (Max)
# reserves the maximum length, like our `contiguous_max`; Orca (Oracle) knows each request's true output
# length in advance and reserves exactly that, like our `contiguous_final`; vLLM allocates blocks on
# demand (16 positions by default), like our `paged_16`. In the same terms, the share of reserved memory
# holding tokens, ours are {{run:memory.used_contiguous_max:.1f}}%, {{run:memory.used_contiguous_final:.1f}}%
# and {{run:memory.used_paged_16:.1f}}%. The figure puts them next to the paper's bars for orientation
# only: the paper measured on GPUs, with its authors' own Orca (Orca is not public), on workloads
# synthesized from ShareGPT and Alpaca, and its bars also count *external* fragmentation (free memory in
# gaps too small for a request) and other allocator overheads. Fragmentation takes over a third of the Oracle bar
# (36.6%, beside 25.2% reserved for tokens to come); set it aside, and token states hold 60% of the rest, the
# quantity ours counts, exactly per request on a synthetic length distribution, with no allocator. What carries over is the order, which the cell
# asserts on our numbers only: the maximum length uses the least of its memory, the final length more,
# paging the most.

# %% [markdown] lang="zh"
# 在这个负载上，按最大长度预留会浪费 {{run:memory.contiguous_max:.1f}}% 的预留 K/V 内存；即便事先知道每个请求的最终长度，也要浪费 {{run:memory.contiguous_final:.1f}}%，因为请求在第一步就预留了要到最后一步才填满的位置。分页时，物理块大小为 8、16、32 的浪费率分别为 {{run:memory.paged_8:.1f}}%、{{run:memory.paged_16:.1f}}% 和 {{run:memory.paged_32:.1f}}%：浪费的只是每个请求最后一个物理块中未填满的部分，少于 $b$ 个位置，上面的单元格对每一步都断言了这一点。物理块越小，浪费越少，代价是块表更长、索引操作更多。
#
# **vLLM 论文中的数字**：Kwon 等人（SOSP 2023）测量了推理服务系统预留的 K/V 内存中，真正存放 token 状态的比例：三个版本的 Orca 为 **20.4% 到 38.2%**，vLLM 则为 **96.3%**。Orca (Max) 按最大长度预留，相当于我们的 `contiguous_max`；Orca (Oracle) 事先知道每个请求真实的输出长度，并恰好预留这么多，相当于我们的 `contiguous_final`；vLLM 按需分配物理块（默认每个物理块 16 个位置），相当于我们的 `paged_16`。按同样的口径，即预留内存中存有 token 的比例，我们的结果分别为 {{run:memory.used_contiguous_max:.1f}}%、{{run:memory.used_contiguous_final:.1f}}% 和 {{run:memory.used_paged_16:.1f}}%。图中把它们和论文的柱子画在一起，只是为了便于对照：论文是在 GPU 上测量的，Orca 用的是作者自己的实现（Orca 没有公开），负载依据 ShareGPT 和 Alpaca 合成，它的柱子还计入了**外部**碎片（空闲内存散落在容不下一个请求的空隙里）和内存分配器的其他开销。碎片占了 Oracle 那根柱子的三分之一以上（36.6%，另有 25.2% 是为尚未生成的 token 预留的）；除去碎片，token 状态占其余内存的 60%，这才与我们统计的量口径相同。我们没有内存分配器，是在合成的长度分布上逐个请求精确计数的。能够对应上的是三者的先后顺序，下面的单元格只用我们自己的数字断言这一点：按最大长度预留时利用率最低，按最终长度预留时高一些，分页最高。

# %%
# [en] The share of reserved K/V memory holding token states, as reported by Kwon et al. (2023), Figure 2.
# [zh] Kwon 等人（2023）图 2 报告的预留 K/V 内存中存放 token 状态的比例。
VLLM_PAPER_USED_PCT = {"Orca (Max)": 20.4, "Orca (Oracle)": 38.2, "vLLM": 96.3}
used = {name: 100 - w for name, w in waste.items()}
# [en] Our own order only; the paper's bars are drawn for orientation, not asserted against.
# [zh] 只断言我们自己的先后顺序；论文的柱子只画出来作对照，不拿来断言。
assert used["contiguous_max"] < used["contiguous_final"] < min(used[f"paged_{b}"] for b in MEMORY_BLOCKS)

bars = [("ours: contiguous_max", used["contiguous_max"], "#c44e52"), ("paper: Orca (Max)", VLLM_PAPER_USED_PCT["Orca (Max)"], None),
        ("ours: contiguous_final", used["contiguous_final"], "#dd8452"), ("paper: Orca (Oracle)", VLLM_PAPER_USED_PCT["Orca (Oracle)"], None)]
bars += [(f"ours: paged_{b}", used[f"paged_{b}"], "#55a868") for b in MEMORY_BLOCKS] + [("paper: vLLM", VLLM_PAPER_USED_PCT["vLLM"], None)]
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for y, (label, value, color) in enumerate(bars):
    ax.barh(y, value, color=color or "white", edgecolor="#555555", hatch=None if color else "//")
    ax.text(value + 1, y, f"{value:.1f}%", va="center", fontsize=8)
ax.set_yticks(range(len(bars)), [label for label, _, _ in bars], fontsize=8)
ax.invert_yaxis()
ax.set_xlim(0, 110)
ax.set_xlabel("reserved K/V memory holding tokens (%)")
ax.set_title(f"{N_REQUESTS} simulated requests (ours) and the vLLM paper's Figure 2 (hatched)", fontsize=9)
fig.tight_layout()
MEMORY_PNG = OUT / "memory_use.png"
fig.savefig(MEMORY_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# In the figure each bar is the share of reserved K/V memory that holds tokens (100% minus the waste):
# solid bars, labelled `ours:`, are our five allocations on the simulated workload (red: reserve the maximum
# length; orange: reserve the final length; green: paged with blocks of 8, 16 and 32), and hatched bars,
# labelled `paper:`, the paper's measurements, each placed under the allocation of ours that it corresponds
# to.

# %% [markdown] lang="zh"
# 图中每根柱子表示预留的 K/V 内存中存有 token 的比例（即 100% 减去浪费率），横轴标签 reserved K/V memory holding tokens (%) 就是这个意思。标签以 ours: 开头的实心柱是我们五种分配方式在模拟负载上的结果（红色：按最大长度预留；橙色：按最终长度预留；绿色：分页，物理块大小为 8、16、32）；标签以 paper: 开头、带斜线（hatched）的柱子是论文的测量结果，各自放在与之对应的我们那种分配方式下面。标题的意思是：{{run:memory.requests:,}} 个模拟请求（我们的结果）与 vLLM 论文图 2 的结果（带斜线）。
