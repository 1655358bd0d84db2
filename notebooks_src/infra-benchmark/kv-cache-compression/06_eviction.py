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

# %% [markdown] lang="zh"
# ## 7. 淘汰策略：重要 token（H2O）与观察窗口（SnapKV）
#
# 窗口按新旧决定保留什么，淘汰策略则按注意力来决定。**H2O**（Zhang 等人，2023）观察到，在训练好的模型中，一小部分 token，即**重要 token**（heavy hitter），得到了大部分注意力；它保留累积注意力最大的那些 token，外加最近的 token。**SnapKV**（Li 等人，2024）观察到，提示末尾几个 token 对前面 token 的注意力，能够预测生成时会读取哪些内容；它在提示结束时，为每个头保留**观察窗口**（提示的最后几个 token）最关注的那些键（先做一维池化，让相邻的 token 一起保留），外加窗口本身。两者都按头分别选择，也都保留文本中的位置（缓存的是 RoPE 之后的键）。
#
# 这样的缓存计算的是另一个函数，根本不可能证明它们等于稠密注意力。我们像架构笔记本评判量化缓存那样评判它们：以稠密注意力为基准，扫描一系列预算，把误差界写进代码（在第一次运行之后定下，并说明留了多少余地），画一张图，再配一个负对照：**随机淘汰必须更差**。

# %% [markdown] lang="en"
# **The protocol**, the same for every policy: each of 4 prompts of 64 tokens is read in one call; at the end of
# that call every layer's cache is cut to a **budget** of $b$ positions per head; then the model decodes one token per
# call, keeping all new tokens, fed with the dense model's greedy tokens (teacher forcing) so that every step
# compares the two caches on the same prefix. 32 steps are compared: the first is the prompt call's own prediction,
# made before anything is evicted and so exact for every policy (the averages include it); the other 31 can differ.
# H2O's paper evicts step by step during generation; we apply its score
# once, at the end of the prompt, so that all policies compress the same prompt to the same budget. The model has
# four K/V heads (MHA, like the models H2O evaluated), so that each head keeps its own positions.

# %% [markdown] lang="zh"
# **实验规程**，所有策略都一样：4 个各含 64 个 token 的提示，每个都在一次调用中读入；这次调用结束时，每一层的缓存被削减到每个头 $b$ 个位置的**预算**；然后模型每次调用解码一个 token，新 token 全部保留，输入的是稠密模型贪心选出的 token（teacher forcing），这样每一步都是在同一个前缀上比较两种缓存。一共比较 32 步：第一步是提示那次调用自己的预测，发生在任何淘汰之前，所以对每个策略都是精确的（平均值也包含这一步）；其余 31 步才可能不同。H2O 论文是在生成过程中逐步淘汰的；我们只在提示结束时使用一次它的评分，这样所有策略都把同一个提示压缩到同一个预算。模型有四个 K/V 头（即 MHA，与 H2O 评测的模型相同），每个头各自保留自己的位置。

# %% [markdown] lang="en"
# **The policies.** Each takes the prompt's attention weights `[B, H, P, P]` and the budget, and returns the
# positions to keep for every (prompt, head). `keep_top` keeps the highest scores, after forcing the newest positions
# in. H2O scores a key by the attention it received from all prompt queries and keeps half its budget for the newest
# positions. SnapKV scores a key by the attention of the last 8 prompt queries, max-pooled over 5 neighbours, and
# keeps those 8 window positions. These sizes are scaled down to our 64-token prompts: SnapKV's reference code
# (`init_snapkv` in `snapkv_utils.py` of FasterDecoding/SnapKV) defaults to an observation window of 32 and a pooling
# kernel of 5 for prompts of thousands of tokens, with average pooling; we use its other option, max pooling, under
# which a key's score is the largest unpooled score (`votes`) within 2 positions of it, so every key within 2 positions
# of a strongly attended one scores at least that key's own unpooled score. The control
# keeps H2O's recent half and fills the rest at random: same recency, no information.

# %% [markdown] lang="zh"
# **各个策略。** 每个策略接收提示的注意力权重 `[B, H, P, P]` 和预算，为每个（提示，头）返回要保留的位置。`keep_top` 先强制保留最新的若干位置，再保留得分最高的位置。H2O 用一个键从全部提示查询那里得到的注意力之和作为它的得分，并把一半预算留给最新的位置。SnapKV 用最后 8 个提示查询对这个键的注意力作为得分，在相邻 5 个位置上做最大池化，并保留这 8 个窗口位置。这些尺寸是按我们 64 个 token 的提示缩小过的：SnapKV 的参考代码（FasterDecoding/SnapKV 中 `snapkv_utils.py` 的 `init_snapkv`）面向数千个 token 的提示，默认观察窗口为 32、池化核为 5，并使用平均池化；我们用的是它的另一个选项，最大池化：一个键的得分，是与它相距不超过 2 个位置的各个键池化前得分（`votes`）中的最大值，所以与某个被强烈关注的键相距不超过 2 个位置的每个键，得分都不低于那个键自己池化前的得分。负对照保留与 H2O 相同的最新一半，其余位置随机选取：新旧程度相同，但不含任何信息。

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
# **What changes in the cache object.** `BudgetKV` is a `FullKV` that compresses itself once, when the attention layer shows it the prompt's weights
# (`observe`). One thing changes shape there. So far a layer's positions were one row, `[T]`, shared by every head
# and every sequence of the batch. After compression each (sequence, head) keeps positions of its own, so the cache
# holds them as `[B, H, T]`, and later calls expand the new tokens' positions to that shape before appending them.
# The mask needs no change: `causal` compares `key_pos[..., None, :]` with `query_pos[:, None]`, which broadcasts to
# one mask per head, `[B, H, T_new, T_keys]`, as the scores are. `EvictingAttention` is the ordinary attention layer
# with this cache, a hook that hands it the weights, and a fixed query bias explained below.

# %% [markdown] lang="zh"
# **缓存对象有什么变化。**`BudgetKV` 是一个 `FullKV`，它在注意力层把提示的注意力权重交给它时（`observe`）压缩自己一次。这时，缓存中位置张量的形状变了。到目前为止，一层的位置都只有一行 `[T]`，由所有头、batch 中的所有序列共用。压缩之后，每个（序列，头）都保留各自的位置，所以缓存以 `[B, H, T]` 的形状保存它们；之后的调用在追加新 token 之前，先把新 token 的位置扩展成这个形状。掩码不需要改动：`causal` 比较的是 `key_pos[..., None, :]` 和 `query_pos[:, None]`，广播之后正好每个头一个掩码，形状 `[B, H, T_new, T_keys]`，与分数相同。`EvictingAttention` 就是普通的注意力层，配上这种缓存、一个把注意力权重交给缓存的钩子，以及下文解释的一个固定的查询偏置。

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
# The shapes, on one 64-token prompt with H2O, a budget of 16 and the query bias described below set to 4: layer 0's cached
# positions after the prompt and after one more token, then what heads 0 and 1 kept (the newest 8 in both: H2O's
# recent half).

# %% [markdown] lang="zh"
# 形状的变化：用 H2O、预算 16，并把下文介绍的查询偏置设为 4，处理一个 64 个 token 的提示。先列出处理完提示后、以及再送入一个 token 后，第 0 层缓存中位置张量的形状，再列出头 0 和头 1 保留的位置（两者都保留了最新的 8 个，即 H2O 留给最新位置的那一半）。

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
# **A model with favourites.** With random weights, attention has only weak, incidental preferences (keys of larger
# norm; and summing attention over queries, as H2O's score does, favours early keys, which more queries can see), so there is little for a policy to find: without help, expect
# results near the random-eviction control's (the sweep's figure gives the numbers). Trained models are different (H2O
# reports attention that is sparse and concentrated on a few tokens). `query_bias` is a toy stand-in for such
# trained attention: one fixed vector added to every query of a head before RoPE, so that the same few keys score
# high for most queries. Its score with key $s$, $b \cdot R_{s-t} k_s$, depends on the distance, but the slower half of
# the rotation's pairs turns by under one radian over 64 positions, and there the bias is almost constant. The sweep runs with it set to 0 (plain random weights) and to 4 (large against the rest of
# a query).
#
# **The favourites, shown.** The next cell reads the same four 64-token prompts with each bias and records every
# layer's prompt attention. For each (layer, prompt, head) it takes the queries of the prompt's second half, finds
# the 8 keys (one eighth of the prompt) that receive the most attention from them, and reports two numbers: the
# share of those queries' attention that goes to these 8 keys, and the fraction of the queries whose own
# most-attended key is one of them. With the bias, both must be large (a share above one half); without it, the
# share must stay below a quarter. These thresholds were set after a first run.

# %% [markdown] lang="zh"
# **有偏好的模型。** 随机权重下，注意力只有微弱的、偶然的偏好（范数较大的键；另外，像 H2O 的得分那样把注意力对各个查询求和，会偏向靠前的键，因为能看到它们的查询更多），所以策略几乎无从下手：不加帮助时，结果应与随机淘汰的对照相近（具体数字见扫描结果的图）。训练好的模型则不然（H2O 报告说，注意力是稀疏的，集中在少数几个 token 上）。`query_bias` 是这种训练后注意力的玩具替身：在 RoPE 之前给某个头的每个查询都加上同一个固定向量，使得同样几个键对大多数查询都得分很高。它给键 $s$ 带来的得分 $b \cdot R_{s-t} k_s$ 随距离变化；但转得较慢的那一半坐标对在 64 个位置内转过的角度不到 1 弧度，偏置在这些坐标上几乎不变。扫描时把它分别设为 0（普通的随机权重）和 4（与查询的其余部分相比很大）。
#
# **把偏好展示出来。** 下一个单元格用两种偏置分别读入同样的四个各含 64 个 token 的提示，记录每一层在提示上的注意力。对每个（层，提示，头），取提示后一半的查询，找出从这些查询得到注意力最多的 8 个键（提示的八分之一），报告两个数：这些查询的注意力中落在这 8 个键上的比例，以及自己最关注的键恰好是其中之一的查询所占的比例。有偏置时，两者都必须很大（比例超过一半）；没有偏置时，比例必须低于四分之一。这些阈值是在第一次运行之后定下的。

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
