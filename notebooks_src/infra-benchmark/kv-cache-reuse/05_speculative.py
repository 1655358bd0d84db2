# %% [markdown] lang="en"
# ## 6. Speculative decoding with rollback
#
# Plain decoding calls the model once per generated token. **Speculative decoding** (Leviathan et al.
# and Chen et al., 2023) lets a cheap **draft model** propose $k$ tokens, one after another, and then asks
# the model we actually want, the **target model**, to score all of them in one call over its cache. The
# target's distributions at these positions decide which drafts to keep. In the general method,
# **speculative sampling**, a draft token $x$ that the draft proposed with probability $q(x)$ is accepted
# with probability $\min(1, p(x) / q(x))$, where $p(x)$ is the target's probability for it. At the first
# rejection a replacement is drawn from the adjusted distribution $\max(0, p - q)$, renormalized, and the
# round ends; if all $k$ drafts are accepted, one more token is drawn from the target's distribution after
# the last one (the **bonus token**). This rule makes every token distributed exactly as if the target had
# sampled it alone. **Greedy decoding**, which this notebook implements, is the special case in which $p$
# and $q$ put all their probability on their argmax: a draft is accepted exactly when it equals the
# target's own choice, and the replacement is the target's choice. One target call thus yields between 1
# and $k + 1$ tokens, and they are exactly the tokens the target would have generated alone.

# %% [markdown] lang="zh"
# ## 6. 投机解码与缓存回滚
#
# 普通解码每生成一个 token 就要调用一次模型。**投机解码**（speculative decoding）由 Leviathan 等人和 Chen 等人（2023）提出：先让一个开销小的**草稿模型**逐个提出 $k$ 个 token，再让我们真正要用的**目标模型**读取缓存，在一次调用里给这 $k$ 个位置全部打分。目标模型在这些位置上的概率分布决定保留哪些草稿。在一般形式的**投机采样**（speculative sampling）中，草稿模型以概率 $q(x)$ 提出的草稿 token $x$，以概率 $\min(1, p(x) / q(x))$ 被接受，其中 $p(x)$ 是目标模型给它的概率。遇到第一个被拒绝的草稿时，从调整后的分布 $\max(0, p - q)$（归一化之后）中重新采样一个 token 代替它，这一轮随即结束；如果 $k$ 个草稿全部被接受，再从目标模型在最后一个草稿之后的分布中多采样一个 token（**额外 token**）。这条规则保证每个 token 的分布都与目标模型单独采样时完全相同。本笔记本实现的**贪心解码**是它的特例：$p$ 和 $q$ 把全部概率都放在各自的 argmax 上，于是草稿当且仅当等于目标模型自己的选择时才被接受，被拒绝时就换成目标模型的选择。这样，目标模型每调用一次得到 1 到 $k + 1$ 个 token，而且它们恰好就是目标模型单独生成时会给出的 token。

# %% [markdown] lang="en"
# The cache is where it can go wrong. The verifying call appended K/V for all $k$ drafts to the target's
# cache, and the draft model's cache holds its own guesses too. After the decision both must be **rolled
# back** to the confirmed tokens: the entries of rejected drafts are cut off. Hugging Face's
# `DynamicCache.crop` exists for this (`crop(-n)` removes the last $n$ positions of every layer); for our
# list of `(K, V)` pairs it is a slice. Why verify in one call at all: a call over $k + 1$ tokens reads the
# weights and the sequence's cache once, where $k + 1$ plain steps read them $k + 1$ times. On a GPU at batch 1
# such a call stays memory-bound, far left of an H100's ridge (section 9), so it costs about one step. A round saves
# time whenever its verifying call plus its draft calls take less than one plain step times the tokens the round
# yields; a call costing one step is the best case, not the condition. What a product over a few rows costs on this
# CPU, section 9's optional part measures: a property of the CPU's math library, not of speculative decoding.
#
# The draft model here is the target's own first layer followed by its final LayerNorm and vocabulary
# projection, a one-layer decoder that exits early. Self-speculative methods such as LayerSkip train a
# model so that such an early exit is a good draft; on our random weights it simply agrees with the target
# often enough to show the mechanism (the measured agreement is printed below).
#
# <details><summary>Background: trees of guesses, the bytes a verifying call saves, one shared draft cache (not needed for what follows)</summary>
#
# * **Trees.** SpecInfer, Medusa and EAGLE propose a *tree* of candidate continuations and verify all its
#   branches in one target call, with an attention mask that lets each candidate see only its own ancestors;
#   the longest branch the target agrees with is kept. We keep a single chain of $k$ drafts.
# * **Bytes.** Reading the cache once for all $k + 1$ queries raises its intensity about $(k + 1)$-fold. Batching
#   does not do this for the cache (each sequence reads its own), except where sequences share a cached
#   prefix and a shared-prefix kernel reads it once for all of them: FlashInfer's and vLLM's cascade
#   attention, Hydragen. Section 8 counts these bytes.
# * **One cache.** Our draft's layer is the target's layer 0, so for the confirmed tokens its K/V are the
#   target's layer-0 K/V (up to rounding, since the two models group the tokens into different calls).
#   LayerSkip therefore keeps one cache for the early layers, shared by draft and target, and the verifying
#   call mostly reuses what the draft computed there; we keep two separate caches, which makes the rollback
#   of each easier to see.
#
# </details>

# %% [markdown] lang="zh"
# 容易出错的是缓存。负责验证的那次调用把全部 $k$ 个草稿的 K/V 追加进了目标模型的缓存，草稿模型的缓存里也存着它自己的猜测。做出决定之后，两个缓存都必须**回滚**到已确认的 token：把被拒绝的草稿留下的缓存项截掉。Hugging Face 的 `DynamicCache.crop` 正是为此而设（`crop(-n)` 截掉每一层最后 $n$ 个位置）；对我们由 `(K, V)` 对组成的列表来说，截掉就是切片。为什么要在一次调用里验证？处理 $k + 1$ 个 token 的一次调用只读一遍权重和这条序列的缓存，而 $k + 1$ 个普通解码步要读 $k + 1$ 遍。在 GPU 上，batch 为 1 时这样的调用仍受限于内存带宽，远在 H100 的拐点左侧（第 9 节），耗时与一个解码步相当。只要一轮中验证调用与各次草稿调用的总耗时少于一个普通解码步的耗时乘以这一轮得到的 token 数，这一轮就能省下时间；验证调用只花一个解码步是最好的情形，而不是必要条件。只处理几行的乘法在本机 CPU 上耗时多少，第 9 节的可选部分会测量：这取决于 CPU 上的数学库，而不取决于投机解码本身。
#
# 这里的草稿模型是目标模型自己的第一层，后接目标模型的最终 LayerNorm 和词表投影：一个提前退出的单层解码器。LayerSkip 这类自投机方法会专门训练模型，让提前退出得到的输出可以直接当作好的草稿；在我们的随机权重上，它只是恰好经常与目标模型一致，足以演示这套机制（实测的一致率打印在下面）。
#
# <details><summary>背景知识：树形猜测、验证调用省下的字节、共用一份草稿缓存（读后文不需要）</summary>
#
# * **树形验证**：SpecInfer、Medusa 和 EAGLE 会一次给出一棵由候选续写组成的**树**，在一次目标模型调用中验证它的所有分支，所用的注意力掩码（attention mask）让每个候选只能看到自己的祖先；目标模型认可的最长分支被保留下来。我们只保留一串 $k$ 个草稿。
# * **字节**：缓存只读一遍，供全部 $k + 1$ 个查询使用，于是缓存部分的算术强度提高到约 $k + 1$ 倍。batch 对缓存做不到这一点（每条序列读取自己的缓存），除非几条序列共享一段已缓存的前缀、而专为共享前缀设计的内核为它们只读一遍这段前缀：FlashInfer 和 vLLM 的级联注意力（cascade attention），以及 Hydragen。第 8 节会数出这些字节。
# * **共用一份缓存**：我们的草稿模型那一层就是目标模型的第 0 层，所以对已确认的 token，它的 K/V 就是目标模型第 0 层的 K/V（只差舍入误差，因为两个模型把 token 分到不同的调用里计算）。因此 LayerSkip 只为前面几层保留一份缓存，由草稿模型和目标模型共用，验证调用在这几层上大多直接复用草稿模型算好的结果；我们保留两份独立的缓存，好让每份缓存的回滚都看得清楚。
#
# </details>

# %%
# [en] The target's first `layers` blocks, final LayerNorm and vocabulary projection, in its dtype, loaded strictly.
# [zh] 目标模型的前 `layers` 个 Transformer 块、最终 LayerNorm 和词表投影，精度与目标模型相同，以严格模式加载。
def early_exit_draft(target, layers=1):
    draft = CacheDecoder(DecoderConfig(**{**vars(target.config), "layers": layers})).to(target.lm_head.weight.dtype).eval()
    draft.load_state_dict({name: w for name, w in target.state_dict().items()
                           if not name.startswith("blocks.") or int(name.split(".")[1]) < layers})
    return draft


def cached_length(cache) -> int:
    return 0 if cache is None else cache[0][0].shape[-2]


# [en] Keep the first `length` positions of every layer (a view, nothing is copied).
# [zh] 保留每一层的前 `length` 个位置（只是视图，不复制任何数据）。
def crop(cache, length):
    return None if cache is None else [(k[:, :, :length], v[:, :, :length]) for k, v in cache]


draft = early_exit_draft(model)
SPEC_PROMPTS = [torch.randint(0, cfg.vocab, (16,), generator=torch.Generator().manual_seed(SEED + 20 + i)).tolist()
                for i in range(2 if QUICK else 4)]
SPEC_NEW = 40
# [en] The target's plain greedy runs: the reference for this section.
# [zh] 目标模型普通的贪心生成：本节的参照。
PLAIN = [greedy_generate(model, prompt, SPEC_NEW) for prompt in SPEC_PROMPTS]

# %%
with torch.inference_mode():
    # [en] Teacher forcing: both models read the target's own greedy text; how often do their choices agree?
    # [zh] teacher forcing：两个模型读取目标模型自己贪心生成的文本；它们的选择有多大比例一致？
    agree = []
    for prompt, (_, tokens) in zip(SPEC_PROMPTS, PLAIN):
        text = torch.tensor([prompt + tokens[:-1]])
        agree += (model(text)[0][0, len(prompt) - 1:].argmax(-1) == draft(text)[0][0, len(prompt) - 1:].argmax(-1)).tolist()
DRAFT_AGREEMENT = sum(agree) / len(agree)
DRAFT_PARAMS = sum(p.numel() for p in draft.parameters())
# [en] The draft's parameters outside its one block: embedding tables, final LayerNorm, vocabulary projection.
# [zh] 草稿模型在它唯一的 Transformer 块之外的参数：嵌入表、最终 LayerNorm、词表投影。
DRAFT_OUTSIDE_BLOCKS = DRAFT_PARAMS - sum(p.numel() for p in draft.blocks.parameters())
say(en=f"The one-layer draft chooses the target's token at {DRAFT_AGREEMENT:.1%} of {len(agree)} positions. "
       f"Its parameters: {DRAFT_PARAMS:,} of the target's {N_PARAMS:,} ({DRAFT_PARAMS / N_PARAMS:.0%}), of which "
       f"{DRAFT_OUTSIDE_BLOCKS:,} lie outside its block.",
    zh=f"单层草稿模型在 {len(agree)} 个位置中的 {DRAFT_AGREEMENT:.1%} 上选出了与目标模型相同的 token。"
       f"它的参数量为 {DRAFT_PARAMS:,}，目标模型为 {N_PARAMS:,}（占 {DRAFT_PARAMS / N_PARAMS:.0%}），"
       f"其中 {DRAFT_OUTSIDE_BLOCKS:,} 个位于它的 Transformer 块之外。")

# %% [markdown] lang="en"
# Why is this draft {{run:spec.draft_share:.0%}} of its target's size? Our toy decoder has only two blocks, and
# what lies outside them, the embedding tables (with {{run:spec.positions}} learned positions), the final
# LayerNorm and the vocabulary projection, holds {{run:spec.outside_share:.0%}} of its parameters. The draft keeps
# all of that and drops only the second block. A real draft is a separate, much smaller model of the same
# family (it must share the tokenizer): Leviathan et al. drafted for T5-XXL (11B parameters) with T5-small
# (77M), and a 1B Llama 3.2 can draft for Llama 3.1 70B. Only then is a draft call much cheaper than a target
# call. This notebook counts calls and tokens, not time: with a draft this close to its target in size,
# speculative decoding would save no time here.

# %% [markdown] lang="zh"
# 这个草稿模型的规模为什么达到目标模型的 {{run:spec.draft_share:.0%}}？我们的玩具解码器只有两个 Transformer 块，Transformer 块之外的部分，即嵌入表（含 {{run:spec.positions}} 个可学习的位置）、最终 LayerNorm 和词表投影，占了全部参数的 {{run:spec.outside_share:.0%}}。草稿模型把这些全部保留，只去掉了第二个 Transformer 块。实际使用的草稿模型是同一系列中另一个小得多的模型（它必须与目标模型共用分词器）：Leviathan 等人为 T5-XXL（110 亿参数）配的草稿模型是 T5-small（7,700 万参数）；又如 10 亿参数的 Llama 3.2 可以给 Llama 3.1 70B 当草稿模型。只有这样，草稿模型的一次调用才会比目标模型便宜得多。本笔记本统计的是调用次数和 token 数，而不是时间：草稿模型与目标模型规模如此接近，投机解码在这里省不下时间。

# %% [markdown] lang="en"
# `Speculator` is the loop. Each round, `propose` feeds the draft model the confirmed tokens its cache
# lacks and lets it guess $k$ tokens greedily; `verify` feeds the target model the newest confirmed token
# and the $k$ drafts in one call and keeps the accepted prefix plus the target's own next choice; then
# `rollback` crops both caches to the confirmed tokens except the newest, which neither model has read
# yet. The first round's verifying call also prefills the prompt. Near the end, a round drafts at most as
# many tokens as are still wanted minus one, so that no call produces a token beyond the budget (the rule
# Hugging Face's assisted generation follows too, so the numbers of calls can be compared in section 11).

# %% [markdown] lang="zh"
# `Speculator` 就是这个循环。每一轮中，`propose` 把草稿模型缓存里还没有的已确认 token 送进去，让它贪心地猜出 $k$ 个 token；`verify` 在一次调用中把最新的已确认 token 和 $k$ 个草稿送进目标模型，保留被接受的前缀，再加上目标模型自己的下一个选择；最后 `rollback` 把两个缓存都截短到已确认的 token，但不含最新的那个，因为两个模型都还没有读过它。第一轮的验证调用同时完成了提示的预填充。快结束时，一轮最多只提出“还需要的 token 数减一”个 token，这样任何一次调用都不会产生超出预算的 token（Hugging Face 的辅助生成遵循同样的规则，所以第 11 节可以比较两边的调用次数）。

# %%
class Speculator:
    def __init__(self, target, draft, k: int):
        self.target, self.draft, self.k = target, draft, k

    @torch.inference_mode()
    def generate(self, prompt: list[int], n_new: int) -> dict:
        tokens, self.target_cache, self.draft_cache = list(prompt), None, None
        self.target_calls, self.draft_calls, self.accepted, rows = 0, 0, [], []
        while len(tokens) - len(prompt) < n_new:
            drafts = self.propose(tokens, min(self.k, n_new - (len(tokens) - len(prompt)) - 1))
            new, scores = self.verify(tokens, drafts)
            tokens += new
            rows.append(scores)
            self.rollback(len(tokens) - 1)
        return {"tokens": tokens[len(prompt):], "logits": torch.cat(rows), "target_calls": self.target_calls,
                "draft_calls": self.draft_calls, "accepted": self.accepted}

    def propose(self, tokens, k):
        drafts, feed = [], tokens[cached_length(self.draft_cache):]
        for _ in range(k):
            logits, self.draft_cache = self.draft(torch.tensor([feed]), self.draft_cache)
            self.draft_calls += 1
            drafts.append(int(logits[0, -1].argmax()))
            feed = drafts[-1:]
        return drafts

    def verify(self, tokens, drafts):
        feed = (tokens if self.target_cache is None else tokens[-1:]) + drafts
        logits, self.target_cache = self.target(torch.tensor([feed]), self.target_cache)
        self.target_calls += 1
        # [en] The target's logits after the newest confirmed token and after each draft: [k + 1, vocab].
        # [zh] 目标模型在最新已确认 token 之后、以及每个草稿之后的 logits：[k + 1, vocab]。
        scores = logits[0, -len(drafts) - 1:]
        choice = scores.argmax(dim=-1).tolist()
        n = 0
        while n < len(drafts) and drafts[n] == choice[n]:
            n += 1
        self.accepted.append(n)
        return drafts[:n] + [choice[n]], scores[:n + 1]

    def rollback(self, length):
        self.target_cache = crop(self.target_cache, length)
        self.draft_cache = crop(self.draft_cache, min(length, cached_length(self.draft_cache)))

# %% [markdown] lang="en"
# **One round, step by step**, with $k = 3$. Say the confirmed text holds $T$ tokens. The target's cache holds
# $T - 1$ of them: all but the newest, which no model has read yet.
#
# 1. `propose`: the draft reads the confirmed tokens its cache lacks and guesses $d_1$; it reads $d_1$ and
#    guesses $d_2$, then reads $d_2$ and guesses $d_3$. It never reads $d_3$, so its cache now holds $T + 2$
#    positions.
# 2. `verify`: one target call reads the newest confirmed token and $d_1, d_2, d_3$, so its cache holds
#    $T + 3$ positions, and returns its own choice $c_1, \dots, c_4$ after each of them. Say $c_1 = d_1$ but
#    $c_2 \ne d_2$: $d_1$ is accepted, $d_2$ rejected, and the round yields $d_1$ and $c_2$. The text now has
#    $T + 2$ tokens; the target's $c_3$ and $c_4$ are thrown away, because they were computed after the
#    rejected $d_2$.
# 3. `rollback` to $T + 1$ positions, all but the newest token $c_2$: the target drops the K/V of $d_2$ and
#    $d_3$, the draft that of $d_2$. The next round starts by feeding $c_2$ to both.
#
# When all three drafts are accepted, the round yields $d_1, d_2, d_3$ and the bonus token $c_4$, and the
# rollback keeps $T + 3$ positions. The target's cache has exactly that; the draft's has only $T + 2$,
# because it never read $d_3$. This is why `rollback` crops the draft to
# `min(length, cached_length(self.draft_cache))`: its cache can be *shorter* than the confirmed text, and
# then nothing is cut (a slice past the end would keep everything anyway; the `min` says so), and the next
# `propose` feeds it $d_3$ and $c_4$. The table shows both kinds of round from a real run: `TracedSpeculator`
# is the same loop with a log of the text's length and both caches' lengths after each step. The table leaves
# out the first round: there the target has no cache yet, and its verifying call also prefills the prompt.

# %% [markdown] lang="zh"
# **逐步看一轮**，取 $k = 3$。设已确认的文本有 $T$ 个 token。目标模型的缓存存着其中 $T - 1$ 个：除了最新的那个，因为还没有任何模型读过它。
#
# 1. `propose`：草稿模型读入它缓存里还没有的已确认 token，猜出 $d_1$；再读入 $d_1$，猜出 $d_2$；再读入 $d_2$，猜出 $d_3$。它从不读入 $d_3$，所以此时它的缓存有 $T + 2$ 个位置。
# 2. `verify`：目标模型在一次调用中读入最新的已确认 token 和 $d_1, d_2, d_3$，于是它的缓存有 $T + 3$ 个位置；它在每个位置之后给出自己的选择 $c_1, \dots, c_4$。设 $c_1 = d_1$，但 $c_2 \ne d_2$：$d_1$ 被接受，$d_2$ 被拒绝，这一轮得到 $d_1$ 和 $c_2$。文本现在有 $T + 2$ 个 token；目标模型的 $c_3$ 和 $c_4$ 被丢弃，因为它们是在被拒绝的 $d_2$ 之后算出来的。
# 3. `rollback`：截短到 $T + 1$ 个位置，即除最新的 token $c_2$ 之外的全部：目标模型去掉 $d_2$ 和 $d_3$ 的 K/V，草稿模型去掉 $d_2$ 的 K/V。下一轮先把 $c_2$ 送进两个模型。
#
# 如果三个草稿全部被接受，这一轮得到 $d_1, d_2, d_3$ 和额外 token $c_4$，回滚时保留 $T + 3$ 个位置。目标模型的缓存恰好是这么多；草稿模型的缓存却只有 $T + 2$ 个位置，因为它从没读过 $d_3$。这就是 `rollback` 把草稿模型的缓存截短到 `min(length, cached_length(self.draft_cache))` 的原因：它的缓存可能比已确认的文本**更短**，这时什么也不截（切片越过末尾本来也会保留全部内容，`min` 把这一点写明），下一次 `propose` 再把 $d_3$ 和 $c_4$ 送进去。下表给出真实运行中这两种情况各一轮：`TracedSpeculator` 就是同一个循环，只是在每一步之后记下文本的长度和两个缓存的长度。表中略去了第一轮：那时目标模型还没有缓存，它的验证调用同时也在预填充提示。

# %%
class TracedSpeculator(Speculator):
    def generate(self, prompt, n_new):
        self.log = []
        return super().generate(prompt, n_new)

    def propose(self, tokens, k):
        drafts = super().propose(tokens, k)
        self.log.append({"text": len(tokens), "drafts": drafts, "draft_after_propose": cached_length(self.draft_cache)})
        return drafts

    def verify(self, tokens, drafts):
        new, scores = super().verify(tokens, drafts)
        self.log[-1].update(choices=scores.argmax(dim=-1).tolist(), accepted=self.accepted[-1], new=new,
                            target_after_verify=cached_length(self.target_cache))
        return new, scores

    def rollback(self, length):
        super().rollback(length)
        self.log[-1].update(target_after_rollback=cached_length(self.target_cache), draft_after_rollback=cached_length(self.draft_cache))


# [en] The first full round (3 drafts) of each kind: rejection at the second draft, and all three accepted.
# [zh] 两种情况各取第一个完整的一轮（3 个草稿）：在第二个草稿处拒绝的一轮，以及三个草稿全部被接受的一轮。
traced, TRACE = TracedSpeculator(model, draft, 3), {}
for prompt in SPEC_PROMPTS:
    traced.generate(prompt, SPEC_NEW)
    for row in traced.log[1:]:
        if len(row["drafts"]) == 3 and row["accepted"] in (1, 3):
            TRACE.setdefault(row["accepted"], row)
say_table([[f"{n} / 3", str(r["text"]), str(r["drafts"]), str(r["choices"]), str(r["new"]), str(r["draft_after_propose"]),
            str(r["target_after_verify"]), f"{r['target_after_rollback']} / {r['draft_after_rollback']}"] for n, r in sorted(TRACE.items())],
          en=["accepted", "text T", "drafts d", "target's choices c (to the first disagreement; all k + 1 if none)", "new tokens",
              "draft cache after `propose`", "target cache after `verify`", "after `rollback`: target / draft"],
          zh=["接受数", "文本长度 $T$", "草稿 $d$", "目标模型的选择 $c$（到第一个不一致处；全部一致时为 $k + 1$ 个）", "新 token",
              "`propose` 之后草稿模型的缓存", "`verify` 之后目标模型的缓存", "`rollback` 之后：目标模型 / 草稿模型"])
assert sorted(TRACE) == [1, 3] and all(
    r["draft_after_propose"] == r["text"] + 2 and r["target_after_verify"] == r["text"] + 3
    and r["target_after_rollback"] == r["text"] + n and r["draft_after_rollback"] == min(r["text"] + n, r["text"] + 2)
    and r["new"] == r["drafts"][:n] + r["choices"][n:n + 1] for n, r in TRACE.items())
