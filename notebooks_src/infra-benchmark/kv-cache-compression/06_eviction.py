# %% [markdown] lang="en"
# ## 7. Eviction policies: heavy hitters (H2O) and an observation window (SnapKV)
#
# A window decides what to keep by age. Eviction policies decide by attention. **H2O** (Zhang et al., 2023)
# observed that in trained models a small set of tokens, the *heavy hitters*, receives most of the attention; it
# keeps the tokens with the largest accumulated attention plus the most recent ones. **SnapKV** (Li et al., 2024)
# observed that the attention the last tokens of a prompt pay to the earlier ones predicts what generation will
# read; at the end of the prompt it keeps, for each head, the keys that an *observation window* of the last prompt
# tokens attends to most (after a 1-D pooling, so that neighbouring tokens stay together), plus the window itself.
# Both choose per head, and both keep the text positions (keys are cached after RoPE).
#
# These caches compute a different function: nothing can prove them equal to dense attention. We judge them as the
# architectures notebook judged its quantized caches: against dense attention, over a sweep of budgets, with bounds
# written into the code (set after a first run, with a margin we state), a figure, and a negative control:
# **evicting at random must do worse**.
#
# The setting, the same for every policy: each of 4 prompts of 64 tokens is read in one call; at the end of that
# call every layer's cache is cut to a **budget** of $b$ positions per head; then the model decodes 32 tokens one
# at a time, keeping all new tokens, fed with the dense model's greedy tokens (teacher forcing) so that every step
# compares the two caches on the same prefix. H2O's paper evicts step by step during generation; we apply its score
# once, at the end of the prompt, so that all policies compress the same prompt to the same budget. The model has
# four K/V heads (MHA, like the models H2O evaluated), so that each head keeps its own positions.
#
# `BudgetKV` is a `FullKV` that compresses itself once, when the attention layer shows it the prompt's weights
# (`observe`). One thing changes shape there. So far a layer's positions were one row, `[T]`, shared by every head
# and every sequence of the batch. After compression each (sequence, head) keeps positions of its own, so the cache
# holds them as `[B, H, T]`, and later calls expand the new tokens' positions to that shape before appending them.
# The mask needs no change: `causal` compares `key_pos[..., None, :]` with `query_pos[:, None]`, which broadcasts to
# one mask per head, `[B, H, T_new, T_keys]`, as the scores are. `EvictingAttention` is the ordinary attention layer
# with this cache, a hook that hands it the weights, and a fixed query bias explained below.
# %% [markdown] lang="zh"
# ## 7. 淘汰策略：重要 token（H2O）与观察窗口（SnapKV）
#
# 窗口按新旧决定保留什么，淘汰策略则按注意力来决定。**H2O**（Zhang 等人，2023）观察到，在训练好的模型中，一小部分 token（即重要 token）得到了大部分注意力；它保留累积注意力最大的那些 token，外加最近的 token。**SnapKV**（Li 等人，2024）观察到，提示末尾几个 token 对前面 token 的注意力，能够预测生成时会读取哪些内容；它在提示结束时，为每个头保留**观察窗口**（提示的最后几个 token）最关注的那些键（先做一维池化，让相邻的 token 一起保留），外加窗口本身。两者都按头分别选择，也都保留文本中的位置（缓存的是 RoPE 之后的键）。
#
# 这样的缓存计算的是另一个函数，根本不可能证明它们等于稠密注意力。我们像架构笔记本评判量化缓存那样评判它们：以稠密注意力为基准，扫描一系列预算，把误差界写进代码（在第一次运行之后定下，并说明留了多少余地），画一张图，再配一个负对照：**随机淘汰必须更差**。
#
# 所有策略采用同样的设置：4 个各含 64 个 token 的提示，每个都在一次调用中读入；这次调用结束时，每一层的缓存被削减到每个头 $b$ 个位置的**预算**；然后模型逐个解码 32 个 token，新 token 全部保留，输入的是稠密模型贪心选出的 token（teacher forcing），这样每一步都是在同一个前缀上比较两种缓存。H2O 论文是在生成过程中逐步淘汰的；我们只在提示结束时使用一次它的评分，这样所有策略都把同一个提示压缩到同一个预算。模型有四个 K/V 头（即 MHA，与 H2O 评测的模型相同），每个头各自保留自己的位置。
#
# `BudgetKV` 是一个 `FullKV`，它在注意力层把提示的注意力权重交给它时（`observe`）压缩自己一次。这时，缓存中位置张量的形状变了。到目前为止，一层的位置都只有一行 `[T]`，由所有头、batch 中的所有序列共用。压缩之后，每个（序列，头）都保留各自的位置，所以缓存以 `[B, H, T]` 的形状保存它们；之后的调用在追加新 token 之前，先把新 token 的位置扩展成这个形状。掩码不需要改动：`causal` 比较的是 `key_pos[..., None, :]` 和 `query_pos[:, None]`，广播之后正好每个头一个掩码，形状 `[B, H, T_new, T_keys]`，与分数相同。`EvictingAttention` 就是普通的注意力层，配上这种缓存、一处把注意力权重交给缓存的调用，以及下文解释的一个固定的查询偏置。

# %%
class BudgetKV(FullKV):
    # [en] One layer's cache that, after the first call (the prompt), keeps `budget` positions per head chosen by `policy`.
    # [zh] 单层缓存：第一次调用（提示）之后，按 `policy` 为每个头选出并保留 `budget` 个位置。
    def __init__(self, policy, budget: int):
        super().__init__()
        self.policy, self.budget, self.compressed = policy, budget, False

    def update(self, k, v, positions):
        if self.positions.dim() > 1:
            # [en] After compression every (batch row, head) has its own positions: [B, H, T].
            # [zh] 压缩之后，每个（batch 行，头）都有自己的位置：[B, H, T]。
            positions = positions.expand(*self.positions.shape[:-1], -1)
        return super().update(k, v, positions)

    def observe(self, weights):
        # [en] weights: the attention of the call that just ran, [B, H, T_new, T_keys]. Compress once, after the prompt.
        # [zh] weights：刚结束的这次调用的注意力权重，形状 [B, H, T_new, T_keys]。只在提示之后压缩一次。
        if self.compressed:
            return
        self.compressed = True
        if self.k.shape[-2] > self.budget:
            # [en] keep: [B, H, budget], positions in ascending order.
            # [zh] keep：[B, H, budget]，位置按升序排列。
            keep = self.policy(weights, self.budget)
            index = keep[..., None].expand(-1, -1, -1, self.k.shape[-1])
            self.k, self.v, self.positions = self.k.gather(2, index), self.v.gather(2, index), keep


class EvictingAttention(Attention):
    def __init__(self, c: ArchConfig, policy, budget: int, query_bias: float):
        super().__init__(c)
        self.policy, self.budget = policy, budget
        # [en] A fixed vector added to every query of a head, [H, 1, Dh] (see below).
        # [zh] 加到某个头每个查询上的固定向量，形状 [H, 1, Dh]（见下文）。
        bias = torch.randn(c.heads, 1, c.head_dim, generator=torch.Generator().manual_seed(SEED + 3))
        self.register_buffer("query_bias", query_bias * bias)

    def new_cache(self, caches: list):
        return BudgetKV(self.policy, self.budget)

    def forward(self, x, positions, cache):
        q = self.rotary(split_heads(self.q(x), self.heads) + self.query_bias, positions)
        k = self.rotary(split_heads(self.k(x), self.kv_heads), positions)
        v = split_heads(self.v(x), self.kv_heads)
        # [en] key_pos: [T] before the first eviction, [B, H, T] after it (each head keeps its own positions).
        # [zh] key_pos：第一次淘汰之前是 [T]，之后是 [B, H, T]（每个头保留各自的位置）。
        keys, values, key_pos = cache.update(k, v, positions)
        scores = q @ keys.transpose(-2, -1) * self.head_dim ** -0.5
        weights = scores.masked_fill(~causal(positions, key_pos), float("-inf")).softmax(dim=-1)
        cache.observe(weights)
        return self.proj(merge_heads(weights @ values))

# %% [markdown] lang="en"
# **The policies.** Each takes the prompt's attention weights `[B, H, P, P]` and the budget, and returns the
# positions to keep for every (prompt, head). `keep_top` keeps the highest scores, after forcing the newest positions
# in. H2O scores a key by the attention it received from all prompt queries and keeps half its budget for the newest
# positions. SnapKV scores a key by the attention of the last 8 prompt queries, max-pooled over 5 neighbours, and
# keeps those 8 window positions. These sizes are scaled down to our 64-token prompts: SnapKV's reference code
# (`init_snapkv` in `snapkv_utils.py` of FasterDecoding/SnapKV) defaults to an observation window of 32 and a pooling
# kernel of 5 for prompts of thousands of tokens, with average pooling (max pooling is its other option). The control
# keeps H2O's recent half and fills the rest at random: same recency, no information.

# %% [markdown] lang="zh"
# **各个策略。** 每个策略接收提示的注意力权重 `[B, H, P, P]` 和预算，为每个（提示，头）返回要保留的位置。`keep_top` 先强制保留最新的若干位置，再保留得分最高的位置。H2O 用一个键从全部提示查询那里得到的注意力之和作为它的得分，并把一半预算留给最新的位置。SnapKV 用最后 8 个提示查询对这个键的注意力作为得分，在相邻 5 个位置上做最大池化，并保留这 8 个窗口位置。这些尺寸是按我们 64 个 token 的提示缩小过的：SnapKV 的参考代码（FasterDecoding/SnapKV 中 `snapkv_utils.py` 的 `init_snapkv`）面向数千个 token 的提示，默认观察窗口为 32、池化核为 5，并使用平均池化（最大池化是它的另一个选项）。负对照保留与 H2O 相同的最新一半，其余位置随机选取：新旧程度相同，但不含任何信息。

# %%
def keep_top(scores, budget: int, newest: int):
    scores = scores.clone()                                                        # [B, H, T]
    scores[..., scores.shape[-1] - newest:] = float("inf")
    return scores.topk(budget, dim=-1).indices.sort(dim=-1).values                 # [B, H, budget]


def h2o(weights, budget: int):
    return keep_top(weights.sum(dim=-2), budget, newest=budget // 2)


def snapkv(weights, budget: int, window: int = 8, kernel: int = 5):
    votes = weights[:, :, -window:].sum(dim=-2)                                     # [B, H, T]
    return keep_top(F.max_pool1d(votes, kernel, stride=1, padding=kernel // 2), budget, newest=window)


def random_eviction(weights, budget: int):
    # [en] The negative control: H2O's recent half, the rest drawn at random.
    # [zh] 负对照：与 H2O 相同的最新一半，其余随机抽取。
    scores = torch.rand(*weights.shape[:2], weights.shape[-1], generator=torch.Generator().manual_seed(SEED))
    return keep_top(scores, budget, newest=budget // 2)


POLICIES = {"h2o": h2o, "snapkv": snapkv, "random": random_eviction}

# %% [markdown] lang="en"
# The shapes, on one 64-token prompt with H2O, a budget of 16 and the query bias introduced below set to 4: after the
# prompt, the positions of layer 0's cache are `[1, 4, 16]`, one row per head, and one more token makes them
# `[1, 4, 17]`. The second table lists what heads 0 and 1 kept: different positions, and the newest 8 in both (H2O's
# recent half).

# %% [markdown] lang="zh"
# 形状的变化：用 H2O、预算 16，并把下文介绍的查询偏置设为 4，处理一个 64 个 token 的提示。提示之后，第 0 层缓存的位置形状为 `[1, 4, 16]`，每个头一行；再送入一个 token，就变成 `[1, 4, 17]`。第二张表列出头 0 和头 1 保留的位置：两者不同，但都保留了最新的 8 个（即 H2O 留给最新位置的那一半）。

# %%
evict_cfg = replace(llama_cfg, kv_heads=4)
with torch.inference_mode():
    shape_demo = build(evict_cfg, lambda i: EvictingAttention(evict_cfg, h2o, 16, 4.0))
    demo_prompt = torch.randint(0, evict_cfg.vocab, (1, 64), generator=torch.Generator().manual_seed(SEED + 4))
    _, demo_cache = shape_demo(demo_prompt)
    kept = demo_cache[0].positions.clone()                                         # [1, H, 16]
    shape_demo(demo_prompt[:, :1], demo_cache)
BUDGET_SHAPES = {"prompt": list(kept.shape), "next_token": list(demo_cache[0].positions.shape)}
say_table([[f"`{call}`", str(shape)] for call, shape in zip(("net(prompt)", "net(token, cache)"), BUDGET_SHAPES.values())],
          en=["call", "shape of layer 0's cached positions"], zh=["调用", "第 0 层缓存的位置的形状"])
say_table([[str(h), ", ".join(map(str, kept[0, h].tolist()))] for h in (0, 1)],
          en=["head", "positions kept after the prompt"], zh=["头", "提示之后保留的位置"])
assert BUDGET_SHAPES == {"prompt": [1, 4, 16], "next_token": [1, 4, 17]}
assert not torch.equal(kept[0, 0], kept[0, 1]) and all(kept[0, h, -8:].tolist() == list(range(56, 64)) for h in range(4))

# %% [markdown] lang="en"
# **A model with favourites.** With random weights, attention has no favourites: any key is about as likely to
# matter to the next query as any other, and no policy can beat a coin toss. Trained models are different (H2O
# reports attention that is sparse and concentrated on a few tokens). We give our toy one simple cause of
# favourites: a fixed vector $b$ added to every query of a head before RoPE, as a large bias on the query projection
# would. Its share of the score of query $t$ for key $s$ is $b \cdot R_{s-t}\, k_s$ (RoPE rotates both), which
# depends on the key and on the distance $t - s$ but not on the query's content. So a key that lines up with $b$
# gains at the distances where it lines up, for every query at such a distance, and RoPE's slowly turning pairs
# keep that gain over a long range: such keys attract attention from most queries, not uniformly from all. The
# sweep runs twice, with that bias set to 0 (plain
# random weights) and to 4 (large against the rest of a query), so that the figure shows both cases.
#
# **The favourites, shown.** The next cell reads the same four 64-token prompts with each bias and records every
# layer's prompt attention. For each (layer, prompt, head) it takes the queries of the prompt's second half, finds
# the 8 keys (one eighth of the prompt) that receive the most attention from them, and reports two numbers: the
# share of those queries' attention that goes to these 8 keys, and the fraction of the queries whose own
# most-attended key is one of them. With the bias, both must be large (a share above one half); without it, the
# share must stay below a quarter. These thresholds were set after a first run.

# %% [markdown] lang="zh"
# **有偏好的模型。** 随机权重下，注意力没有偏好：对下一个查询来说，任何一个键都和别的键差不多重要，没有哪个策略能胜过抛硬币。训练好的模型则不然（H2O 报告说，注意力是稀疏的，集中在少数几个 token 上）。我们给玩具模型加上一个造成偏好的简单原因：在 RoPE 之前给某个头的每个查询都加上同一个固定向量 $b$，就像查询投影带一个很大的偏置那样。它在查询 $t$ 对键 $s$ 的分数中贡献 $b \cdot R_{s-t}\, k_s$（RoPE 把两者都旋转了），这一项取决于键和距离 $t - s$，而与查询本身的内容无关。所以与 $b$ 方向一致的键，会在方向一致的那些距离上得到加分，这些距离上的每个查询都如此；RoPE 中旋转较慢的那几对坐标，能让这份加分在很远的距离上仍然保持：这样的键会吸引大多数查询的注意力，但并不是均匀地吸引每一个查询。扫描运行两次：一次把这个偏置设为 0（普通的随机权重），一次设为 4（与查询的其余部分相比很大），图中把两种情形都画出来。
#
# **把偏好展示出来。** 下一个单元格用两种偏置分别读入同样的四个 64 token 的提示，记录每一层在提示上的注意力。对每个（层，提示，头），取提示后一半的查询，找出从这些查询得到注意力最多的 8 个键（提示的八分之一），报告两个数：这些查询的注意力中落在这 8 个键上的比例，以及自己最关注的键恰好是其中之一的查询所占的比例。有偏置时，两者都必须很大（比例超过一半）；没有偏置时，比例必须低于四分之一。这些阈值是在第一次运行之后定下的。

# %%
@torch.inference_mode()
def prompt_attention(prompts, bias: float):
    # [en] Every layer's attention weights on the prompt, [L, B, H, P, P], taken by a policy that records them (its cache is discarded).
    # [zh] 每一层在提示上的注意力权重，形状 [L, B, H, P, P]；由一个只负责记录的策略取得（它削减过的缓存随即丢弃）。
    seen = []

    def record(weights, budget: int):
        seen.append(weights)
        return keep_top(weights.sum(dim=-2), budget, newest=budget)

    build(evict_cfg, lambda i: EvictingAttention(evict_cfg, record, prompts.shape[-1] - 1, bias))(prompts)
    return torch.stack(seen)


def favourites(weights, top: int = 8) -> dict:
    # [en] The queries of the prompt's second half: [L, B, H, P/2, P].
    # [zh] 提示后一半的查询：[L, B, H, P/2, P]。
    late = weights[..., weights.shape[-1] // 2:, :]
    received = late.sum(dim=-2)                                                     # [L, B, H, P]
    favoured = received.topk(top, dim=-1).indices                                   # [L, B, H, top]
    own_top = late.argmax(dim=-1)                                                   # [L, B, H, P/2]
    return {"share": float((received.gather(-1, favoured).sum(-1) / received.sum(-1)).mean()),
            "queries_agreeing": float((own_top[..., None] == favoured[..., None, :]).any(-1).float().mean())}


FAVOURITE_PROMPTS = torch.randint(0, evict_cfg.vocab, (4, 64), generator=torch.Generator().manual_seed(SEED + 4))
FAVOURITES = {bias: favourites(prompt_attention(FAVOURITE_PROMPTS, bias)) for bias in (0.0, 4.0)}
say_table([[f"`query_bias = {bias}`", f"{f['share']:.0%}", f"{f['queries_agreeing']:.0%}"] for bias, f in FAVOURITES.items()],
          en=["model", "attention share of the 8 most-attended keys", "queries whose top key is one of the 8"],
          zh=["模型", "最受关注的 8 个键得到的注意力比例", "最关注的键在这 8 个之中的查询比例"])
assert FAVOURITES[4.0]["share"] > 0.5 > 0.25 > FAVOURITES[0.0]["share"]

# %% [markdown] lang="en"
# **The bounds.** They were set after a first run, with a margin, as the architectures notebook set those of its
# quantized caches; they were not predicted before any run, and where the margin is thin we say so:
#
# 1. with a budget of the whole prompt nothing is evicted, and every policy equals dense attention within FP32's
#    tolerance (an exact statement, no margin needed);
# 2. with favourites and half the prompt as budget, H2O and SnapKV keep at least 75% of the dense model's greedy tokens,
#    with a mean largest-logit error below 0.25 (this run: {{run:eviction.h2o_half_agreement:.0%}} and
#    {{run:eviction.h2o_half_error:.3f}} for H2O, {{run:eviction.snapkv_half_agreement:.0%}} and
#    {{run:eviction.snapkv_half_error:.3f}} for SnapKV): a wide margin;
# 3. the control: with favourites, at every budget below the prompt, random eviction's mean error is larger than each
#    policy's (a ratio above 1). This margin is thin. At the smallest budget, where SnapKV spends half of its 16
#    positions on its observation window, random eviction's error is only {{run:eviction.random_ratio_smallest:.2f}}
#    times the worse policy's in this run (at half the prompt, {{run:eviction.random_ratio_half:.2f}} times). The ratio
#    also compares slightly different recency budgets: the control keeps H2O's newest $b/2$ positions, SnapKV its newest 8,
#    which coincide only at $b = 16$. So the
#    cell also runs the favourites sweep on two more sets of prompts and asserts the bound on all three; the smallest
#    ratio there is {{run:eviction.random_ratio_other_prompts:.2f}}. The bound says only that random eviction does
#    worse, not by how much, and another seed could bring a ratio closer to 1.

# %% [markdown] lang="zh"
# **误差界。** 与架构笔记本为量化缓存定的界一样，这些界是在第一次运行之后留出余地定下的，并非事先预言；余地窄的地方，我们会直说：
#
# 1. 预算等于整个提示时，没有任何内容被淘汰，每个策略都在 FP32 的容差内等于稠密注意力（这是精确的结论，不需要余地）；
# 2. 有偏好、预算为提示的一半时，H2O 和 SnapKV 至少保住稠密模型 75% 的贪心 token，logits 最大绝对误差的平均值低于 0.25（本次运行：H2O 为 {{run:eviction.h2o_half_agreement:.0%}} 和 {{run:eviction.h2o_half_error:.3f}}，SnapKV 为 {{run:eviction.snapkv_half_agreement:.0%}} 和 {{run:eviction.snapkv_half_error:.3f}}）：余地很宽；
# 3. 负对照：有偏好时，在小于提示长度的每个预算下，随机淘汰的平均误差都大于这两种策略各自的平均误差（比值大于 1）。这个余地很窄。在最小的预算下，SnapKV 要把 16 个位置中的一半留给观察窗口，本次运行中随机淘汰的误差只是较差策略的 {{run:eviction.random_ratio_smallest:.2f}} 倍（预算为提示的一半时是 {{run:eviction.random_ratio_half:.2f}} 倍）。这个比值比较的，其实还是新旧程度上略有不同的预算：负对照与 H2O 一样保留最新的 $b/2$ 个位置，SnapKV 保留最新的 8 个，两者只在 $b = 16$ 时相同。所以下面的单元格还在另外两组提示上运行有偏好情形的扫描，并在全部三组上断言这条界：那里最小的比值是 {{run:eviction.random_ratio_other_prompts:.2f}}。这条界只说明随机淘汰更差，并不说明差多少；换一个随机种子，比值也可能更接近 1。

# %%
PROMPT_LEN, PROMPTS_N, STEPS = 64, (2 if QUICK else 4), (16 if QUICK else 32)
BUDGETS = [16, 32, 64] if QUICK else [16, 24, 32, 48, 64]
QUERY_BIASES = {"plain": 0.0, "favourites": 4.0}
PROMPTS = torch.randint(0, evict_cfg.vocab, (PROMPTS_N, PROMPT_LEN), generator=torch.Generator().manual_seed(SEED + 4))


@torch.inference_mode()
def decode(net, prompts, steps: int, tokens=None):
    # [en] Prompts in one call, then one token per call: the given tokens, or the model's own greedy choices.
    # [zh] 提示一次读入，之后每次调用一个 token：用给定的 token，或者模型自己贪心选出的 token。
    logits, cache = net(prompts)
    out, fed = [logits[:, -1:]], []
    for t in range(steps - 1):
        fed.append(out[-1].argmax(dim=-1) if tokens is None else tokens[:, t:t + 1])
        logits, cache = net(fed[-1], cache)
        out.append(logits)
    return torch.cat(out, dim=1), torch.cat(fed, dim=1)                            # [B, steps, vocab], [B, steps - 1]


def eviction_sweep(prompts, steps: int, budgets: list[int], bias: float) -> dict:
    # [en] Every policy at every budget against dense attention, teacher-forced on the dense model's greedy tokens.
    # [zh] 每个策略在每个预算下与稠密注意力比较，输入的是稠密模型贪心选出的 token（teacher forcing）。
    # [en] The dense baseline: the same layer with the same query_bias, no policy, and a budget of the whole prompt (nothing evicted).
    # [zh] 稠密基准：同样的层、同样的 query_bias，不设策略，预算等于整个提示（什么都不淘汰）。
    dense, greedy = decode(build(evict_cfg, lambda i: EvictingAttention(evict_cfg, None, PROMPT_LEN, bias)), prompts, steps)
    runs = {}
    for name, policy in POLICIES.items():
        for budget in budgets:
            approx, _ = decode(build(evict_cfg, lambda i: EvictingAttention(evict_cfg, policy, budget, bias)), prompts, steps, greedy)
            runs[f"{name}/{budget}"] = {
                "policy": name, "budget": budget, "exact": close(approx, dense),
                "mean_max_abs_logit_err": float((approx - dense).abs().amax(dim=-1).mean()),
                "greedy_agreement": float((approx.argmax(-1) == dense.argmax(-1)).float().mean())}
    return runs


EVICTION = {case: eviction_sweep(PROMPTS, STEPS, BUDGETS, bias) for case, bias in QUERY_BIASES.items()}
for case, runs in EVICTION.items():
    say(en=f"`query_bias = {QUERY_BIASES[case]}`: mean largest logit error / greedy agreement, by budget $b$",
        zh=f"`query_bias = {QUERY_BIASES[case]}`：各预算 $b$ 下 logits 最大绝对误差的平均值 / 贪心 token 一致的比例")
    say_table([[f"`{name}`"] + [f"{runs[f'{name}/{b}']['mean_max_abs_logit_err']:.3f} / {runs[f'{name}/{b}']['greedy_agreement']:.0%}"
                                for b in BUDGETS] for name in POLICIES],
              en=["policy"] + [f"$b = {b}$" for b in BUDGETS], zh=["策略"] + [f"$b = {b}$" for b in BUDGETS])

# %% [markdown] lang="en"
# The bounds, asserted on this run.

# %% [markdown] lang="zh"
# 在本次运行上用断言核对这些误差界。

# %%
def random_error_ratios(runs: dict) -> dict:
    # [en] Random eviction's mean error over the worse policy's, at each budget below the prompt.
    # [zh] 在小于提示长度的每个预算下，随机淘汰的平均误差与较差策略的平均误差之比。
    error = lambda name, b: runs[f"{name}/{b}"]["mean_max_abs_logit_err"]
    return {b: error("random", b) / max(error("h2o", b), error("snapkv", b))
            for b in sorted({run["budget"] for run in runs.values()}) if b < PROMPT_LEN}


EVICTION_BOUNDS = {"half_budget_min_greedy_agreement": 0.75, "half_budget_max_mean_error": 0.25, "random_min_error_ratio": 1.0}
fav, half = EVICTION["favourites"], PROMPT_LEN // 2
OTHER_PROMPTS = {seed: torch.randint(0, evict_cfg.vocab, (2, PROMPT_LEN), generator=torch.Generator().manual_seed(seed))
                 for seed in (SEED + 5, SEED + 6)}
RANDOM_RATIOS = {"main": random_error_ratios(fav)} | {
    f"seed_{seed}": random_error_ratios(eviction_sweep(prompts, 16, [16, 32], QUERY_BIASES["favourites"]))
    for seed, prompts in OTHER_PROMPTS.items()}
say_table([[str(SEED + 4) if name == "main" else name.removeprefix("seed_"), ", ".join(f"{b}: {ratio:.2f}" for b, ratio in ratios.items()),
            f"{min(ratios.values()):.2f}"] for name, ratios in RANDOM_RATIOS.items()],
          en=[f"seed of the prompts (with favourites; {SEED + 4}: this section's)", "budget: random eviction's error / the worse policy's", "smallest"],
          zh=[f"提示的随机种子（有偏好；{SEED + 4} 为本节的提示）", "预算：随机淘汰的误差 / 较差策略的误差", "最小值"])
CONTROLS["random_eviction"] = {"section": 7, "check": "eviction_sweep", "measured": min(RANDOM_RATIOS["main"].values()),
                               "other_prompt_sets": min(min(r.values()) for name, r in RANDOM_RATIOS.items() if name != "main"),
                               "caught": min(min(r.values()) for r in RANDOM_RATIOS.values()) > EVICTION_BOUNDS["random_min_error_ratio"]}
assert all(run["exact"] for case in EVICTION.values() for run in case.values() if run["budget"] == PROMPT_LEN)
assert all(fav[f"{name}/{half}"]["greedy_agreement"] >= EVICTION_BOUNDS["half_budget_min_greedy_agreement"]
           and fav[f"{name}/{half}"]["mean_max_abs_logit_err"] < EVICTION_BOUNDS["half_budget_max_mean_error"]
           for name in ("h2o", "snapkv"))
assert CONTROLS["random_eviction"]["caught"]

# %% [markdown] lang="en"
# The sweep as a figure: the mean largest logit error against the budget, for each policy, without and with
# favourites.

# %% [markdown] lang="zh"
# 把扫描结果画成图：每个策略的 logits 最大绝对误差平均值随预算的变化，左右两幅分别是无偏好和有偏好的情形。

# %%
fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4), sharey=True)
for ax, (case, runs) in zip(axes, EVICTION.items()):
    for (name, style) in zip(POLICIES, ("-o", "-s", ":x")):
        ax.plot(BUDGETS, [runs[f"{name}/{b}"]["mean_max_abs_logit_err"] for b in BUDGETS], style, markersize=4, label=name)
    ax.set_title(f"query_bias = {QUERY_BIASES[case]}", fontsize=10)
    ax.set_xlabel(f"budget b (positions per head, of {PROMPT_LEN})")
    ax.legend(fontsize=8)
axes[0].set_ylabel("mean max abs logit error vs dense")
fig.tight_layout()
EVICTION_PNG = OUT / "eviction_sweep.png"
fig.savefig(EVICTION_PNG, dpi=120)
plt.show()

# %% [markdown] lang="en"
# *Figure: how far each compressed cache lands from dense attention (vertical axis: the largest logit error of a
# step, averaged over the prompts and decode steps), as the budget $b$ (horizontal axis: positions kept per head, of
# the 64 of the prompt) grows to the whole prompt (where every curve reaches zero). Left, plain random weights
# (`query_bias = 0`): H2O ("h2o"), SnapKV ("snapkv") and the random control ("random", dotted) are close, because
# no key matters more than another. Right, with favourites (`query_bias = 4`): the two policies find the keys most
# queries attend to, and random eviction stays above both at every budget below the prompt, by a factor of
# {{run:eviction.random_ratio_smallest:.2f}} to {{run:eviction.random_ratio_largest:.2f}} over the worse policy.*
#
# **Why H2O and SnapKV swap places.** In this run SnapKV lands a little closer to dense attention than H2O without
# favourites, and H2O clearly closer with them (the half-budget numbers above). What the code predicts, not a proof:
# with favourites, a key's pull comes mostly from the bias term, which (above) depends on the key and the distance
# but not on the query, so every prompt query votes for the same keys; H2O adds 64 such votes, SnapKV only the last
# 8, and SnapKV also spends 8 of its slots on its window and max-pools, which keeps neighbours of a favoured key
# that are not favourites themselves. Without favourites no key is favoured by all queries, and the last prompt
# queries, which sit closest to the decode steps, are the better guide to what those steps will read.
#
# What this does not show: whether H2O or SnapKV keeps a *trained* model's answers. That depends on how a trained
# model's attention is really distributed, which random weights cannot imitate; our bias only gives the policies
# something to find. The papers measured quality instead. H2O checked accuracy on OPT, LLaMA and GPT-NeoX models
# over a range of tasks with 20% of the cache kept, and reports up to 29 times the throughput of DeepSpeed
# Zero-Inference and Hugging Face Accelerate, and up to 3 times that of FlexGen; SnapKV reports accuracy on the LongBench benchmark and the needle-in-a-haystack test, with 3.6 times
# faster generation and 8.2 times better memory efficiency than its baseline on 16k-token inputs.
#
# **Why serving systems rarely ship them.** Both policies choose per head: above, heads 0 and 1 of one layer kept
# different positions. A paged cache, like the one the [serving notebook]({{colab:infra-benchmark/kv-cache-serving}})
# builds, keeps one block table per sequence, shared by every head (and, in vLLM, by every layer of the same attention
# type): a block of positions
# can be given back only when no head still needs any position in it. Per-head eviction scatters the kept positions
# over all the blocks and frees almost none of them, unless the block manager and the memory layout are redesigned
# around it. vLLM, for one, offered neither H2O nor SnapKV when this was written; research libraries apply such policies to Hugging Face
# models, whose caches are plain per-layer tensors like ours: NVIDIA's kvpress, for example, ships SnapKV
# (`SnapKVPress`) and an H2O-style score of observed attention (`ObservedAttentionPress`), not H2O itself. The eviction that serving systems do ship
# drops whole positions, for every head at once: sliding windows (vLLM frees the blocks that leave a layer's window)
# and, in TensorRT-LLM, StreamingLLM's sink tokens (`sink_token_length`).

# %% [markdown] lang="zh"
# *图：各个压缩缓存偏离稠密注意力的程度（纵轴：每一步 logits 的最大绝对误差，对所有提示和解码步取平均），随预算 $b$（横轴：每个头保留的位置数，提示共 64 个）增大到整个提示（此时每条曲线都降到零）的变化。左图是普通的随机权重（`query_bias = 0`）：H2O（h2o）、SnapKV（snapkv）和随机淘汰的负对照（random，点线）相差不大，因为没有哪个键比别的键更重要。右图是有偏好的情形（`query_bias = 4`）：两种策略都找到了大多数查询都关注的那些键，在小于提示长度的每个预算下，随机淘汰都高于两者，是较差策略的 {{run:eviction.random_ratio_smallest:.2f}} 到 {{run:eviction.random_ratio_largest:.2f}} 倍。*
#
# **为什么 H2O 和 SnapKV 互换了名次。** 在本次运行中，无偏好时 SnapKV 比 H2O 略接近稠密注意力，有偏好时则是 H2O 明显更接近（见上面预算为提示一半时的数值）。以下只是从代码推断出的原因，并非证明：有偏好时，一个键吸引注意力主要靠偏置那一项，而（如上文所说）这一项取决于键和距离，与查询无关，所以每个提示查询都投给同样的那些键；H2O 把 64 个这样的投票加起来，SnapKV 只用最后 8 个；SnapKV 还要把 8 个位置留给观察窗口，而且最大池化会连带保留受偏好的键旁边那些本身并不受偏好的键。无偏好时，没有哪个键受到所有查询的偏好；最后几个提示查询离解码步最近，更能预示解码步会读取哪些键。
#
# 这张图**不能**说明的是：H2O 或 SnapKV 能否保住一个**训练好的**模型的答案。这取决于训练好的模型的注意力实际上如何分布，而随机权重模仿不了这一点；我们加的偏置只是给策略提供了可以找的东西。论文测量的是质量。H2O 在 OPT、LLaMA 和 GPT-NeoX 模型上、在一系列任务中检验了只保留 20% 缓存时的准确率，并报告其吞吐量最高可达 DeepSpeed Zero-Inference 和 Hugging Face Accelerate 的 29 倍、FlexGen 的 3 倍；SnapKV 报告了在 LongBench 基准和“大海捞针”测试上的准确率，在 16k token 的输入上，生成速度是其基线的 3.6 倍，内存效率是 8.2 倍。
#
# **为什么推理服务系统很少提供它们。** 这两种策略都按头分别选择：上面同一层的头 0 和头 1 保留的位置就不同。分页缓存（如[服务笔记本]({{colab:infra-benchmark/kv-cache-serving}})实现的那种）每条序列只有一张块表，由所有头（在 vLLM 中还包括注意力类型相同的所有层）共用：只有当没有任何一个头还需要某个物理块中的任何位置时，这个物理块才能归还。按头淘汰会让保留下来的位置散落在所有物理块里，几乎腾不出任何物理块，除非围绕它重新设计物理块的管理器和内存布局。以 vLLM 为例，撰写本文时它既不提供 H2O，也不提供 SnapKV；研究用的库把这类策略用在 Hugging Face 模型上，那里每层的缓存就是普通的张量，和我们的一样：例如 NVIDIA 的 kvpress 提供了 SnapKV（`SnapKVPress`）和一种按实际注意力打分、与 H2O 思路相同的策略（`ObservedAttentionPress`），但并没有 H2O 本身。推理服务系统真正提供的淘汰，都是对所有头同时丢弃整个位置：滑动窗口（vLLM 会释放离开某一层窗口的物理块），以及 TensorRT-LLM 中 StreamingLLM 的汇聚 token（`sink_token_length`）。
