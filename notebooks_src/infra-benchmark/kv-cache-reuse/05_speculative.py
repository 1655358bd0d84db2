# %% [markdown] lang="en"
# ## 6. Speculative decoding with rollback
#
# Plain decoding calls the model once per generated token. **Speculative decoding** (Leviathan et al.
# and Chen et al., 2023) lets a cheap **draft model** propose $k$ tokens, one after another, and then asks
# the model we actually want, the **target model**, to score all of them in one call over its cache. The
# target's logits at each of these positions say which token it would have chosen there. In greedy
# decoding the drafts are accepted from the left as long as they equal the target's choice; at the first
# disagreement the target's own choice is taken instead, and if all $k$ drafts are accepted, the target's
# choice after the last one comes on top (the **bonus token**). One target call thus yields between 1 and
# $k + 1$ tokens, and they are exactly the tokens the target would have generated alone: a draft token is
# kept only where it equals the target's own argmax.
#
# The cache is where it can go wrong. The verifying call appended K/V for all $k$ drafts to the target's
# cache, and the draft model's cache holds its own guesses too. After the decision both must be **rolled
# back** to the confirmed tokens: the entries of rejected drafts are cut off. Hugging Face's
# `DynamicCache.crop` exists for this (`crop(-n)` removes the last $n$ positions of every layer); for our
# list of `(K, V)` pairs it is a slice. Why one call over $k + 1$ tokens costs about as much as a call over
# one is the subject of sections 8 and 9.
#
# The draft model here is the target's own first layer followed by its final LayerNorm and output
# projection, a one-layer decoder that exits early. Self-speculative methods such as LayerSkip train a
# model so that such an early exit is a good draft; on our random weights it simply agrees with the target
# often enough to show the mechanism (the measured agreement is printed below).

# %% [markdown] lang="zh"
# ## 6. 投机解码与缓存回滚
#
# 普通解码每生成一个 token 就要调用一次模型。**投机解码**（speculative decoding，Leviathan 等人和 Chen 等人，2023）先让一个开销小的**草稿模型**逐个提出 $k$ 个 token，再让我们真正要用的**目标模型**读取缓存，在一次调用里给这 $k$ 个位置全部打分。目标模型在这些位置上的 logits 表明它自己在那里会选哪个 token。在贪心解码中，草稿 token 从左往右逐个接受，只要它等于目标模型的选择；遇到第一个不一致的位置，就改用目标模型自己的选择；如果 $k$ 个草稿全部被接受，目标模型在最后一个草稿之后的选择也白白得到（**额外 token**）。这样，目标模型每调用一次得到 1 到 $k + 1$ 个 token，而且它们恰好就是目标模型单独生成时会给出的 token：草稿 token 只有在等于目标模型自己的 argmax 时才会保留。
#
# 容易出错的是缓存。负责验证的那次调用把全部 $k$ 个草稿的 K/V 追加进了目标模型的缓存，草稿模型的缓存里也存着它自己的猜测。做出决定之后，两个缓存都必须**回滚**到已确认的 token：被拒绝的草稿留下的缓存项要截掉。Hugging Face 的 `DynamicCache.crop` 正是为此而设（`crop(-n)` 截掉每一层最后 $n$ 个位置）；对我们由 `(K, V)` 对组成的列表来说，截短就是切片。为什么一次处理 $k + 1$ 个 token 的调用与只处理一个 token 的调用开销差不多，是第 8、9 节的主题。
#
# 这里的草稿模型是目标模型自己的第一层，后接目标模型的最终 LayerNorm 和输出投影：一个提前退出的单层解码器。LayerSkip 这类自投机方法专门训练模型，使这种提前退出成为好的草稿；在我们的随机权重上，它只是恰好经常与目标模型一致，足以演示这套机制（实测的一致率打印在下面）。

# %%
# [en] The target's first `layers` blocks, final LayerNorm and output projection, in its dtype, loaded strictly.
# [zh] 目标模型的前 `layers` 个 Transformer 块、最终 LayerNorm 和输出投影，精度与目标模型相同，以严格模式加载。
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
PLAIN = [greedy_generate(model, prompt, SPEC_NEW) for prompt in SPEC_PROMPTS]
with torch.inference_mode():
    # [en] Teacher forcing: both models read the target's own greedy text; how often do their choices agree?
    # [zh] teacher forcing：两个模型读取目标模型自己贪心生成的文本；它们的选择有多大比例一致？
    agree = []
    for prompt, (_, tokens) in zip(SPEC_PROMPTS, PLAIN):
        text = torch.tensor([prompt + tokens[:-1]])
        agree += (model(text)[0][0, len(prompt) - 1:].argmax(-1) == draft(text)[0][0, len(prompt) - 1:].argmax(-1)).tolist()
DRAFT_AGREEMENT = sum(agree) / len(agree)
say(en=f"The one-layer draft chooses the target's token at {DRAFT_AGREEMENT:.1%} of {len(agree)} positions; "
       f"its parameters: {sum(p.numel() for p in draft.parameters()):,} of the target's {N_PARAMS:,}.",
    zh=f"单层草稿模型在 {len(agree)} 个位置中的 {DRAFT_AGREEMENT:.1%} 上选出了与目标模型相同的 token；"
       f"它的参数量为 {sum(p.numel() for p in draft.parameters()):,}，目标模型为 {N_PARAMS:,}。")

# %% [markdown] lang="en"
# `Speculator` is the loop. Each round, `propose` feeds the draft model the confirmed tokens its cache
# lacks and lets it guess $k$ tokens greedily; `verify` feeds the target model the newest confirmed token
# and the $k$ drafts in one call and keeps the accepted prefix plus the target's own next choice; then
# `rollback` crops both caches to the confirmed tokens except the newest, which neither model has read
# yet. The first round's verifying call also prefills the prompt. Near the end, a round drafts at most as
# many tokens as are still wanted minus one, so that no call produces a token beyond the budget (the rule
# Hugging Face's assisted generation follows too, so the numbers of calls can be compared in section 11).

# %% [markdown] lang="zh"
# `Speculator` 就是这个循环。每一轮中，`propose` 把草稿模型缓存里还没有的已确认 token 送进去，让它贪心地猜出 $k$ 个 token；`verify` 在一次调用中把最新的已确认 token 和 $k$ 个草稿送进目标模型，保留被接受的前缀，再加上目标模型自己的下一个选择；最后 `rollback` 把两个缓存都截短到已确认的 token，但不含最新的那个，因为两个模型都还没有读过它。第一轮的验证调用同时完成了提示的预填充。快结束时，一轮最多只起草“还需要的 token 数减一”个 token，这样任何一次调用都不会产生超出预算的 token（Hugging Face 的辅助生成遵循同样的规则，所以第 11 节可以比较两边的调用次数）。

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
# **The criterion**: for every $k$ and every prompt ({{run:spec.prompts}} prompts of 16 tokens,
# {{run:spec.new_tokens}} new tokens each), the speculative tokens equal the target's plain greedy tokens,
# token for token, and the target logits that chose them equal the plain loop's within the FP32 tolerance
# (the verifying call computes $k + 1$ positions at once, the plain loop one, so the sums are grouped
# differently). The table also counts the calls: target calls against the {{run:spec.plain_calls}} of plain
# decoding (one per token), the draft tokens accepted per target call, and the tokens each target call yields.

# %% [markdown] lang="zh"
# **判据**：对每个 $k$ 和每个提示（{{run:spec.prompts}} 个长 16 个 token 的提示，每个生成 {{run:spec.new_tokens}} 个新 token），投机解码得到的 token 必须与目标模型普通贪心生成的 token 逐个相同；选出这些 token 的目标模型 logits 必须在 FP32 容差内与普通循环的相同（验证调用一次计算 $k + 1$ 个位置，普通循环一次只算一个，求和的分组方式不同）。表中还统计了调用次数：目标模型的调用次数（普通解码每个 token 调用一次，共 {{run:spec.plain_calls}} 次），每次目标模型调用接受的草稿 token 数，以及每次目标模型调用得到的 token 数。

# %%
SPEC_KS = (1, 4, 8) if QUICK else (1, 2, 3, 4, 6, 8)


def run_speculative(speculator_class, k) -> dict:
    runs = [speculator_class(model, draft, k).generate(prompt, SPEC_NEW) for prompt in SPEC_PROMPTS]
    target_calls = sum(r["target_calls"] for r in runs)
    margins = [(top2[:, 0] - top2[:, 1]).min() for top2 in (logits.topk(2, dim=-1).values for logits, _ in PLAIN)]
    return {"k": k, "target_calls": target_calls, "draft_calls": sum(r["draft_calls"] for r in runs),
            "plain_calls": SPEC_NEW * len(runs),
            "accepted_per_call": sum(sum(r["accepted"]) for r in runs) / target_calls,
            "tokens_per_call": SPEC_NEW * len(runs) / target_calls,
            "tokens_identical": all(r["tokens"] == tokens for r, (_, tokens) in zip(runs, PLAIN)),
            "logits_close": all(close(r["logits"], logits) for r, (logits, _) in zip(runs, PLAIN)),
            "max_abs_logit_err": worst(max_abs_err(r["logits"], logits) for r, (logits, _) in zip(runs, PLAIN)),
            "min_margin": float(min(margins))}


SPEC = [run_speculative(Speculator, k) for k in SPEC_KS]
say_table([[str(r["k"]), f"{r['target_calls']} / {r['plain_calls']}", str(r["draft_calls"]), f"{r['accepted_per_call']:.2f}",
            f"{r['tokens_per_call']:.2f}", f"`{r['tokens_identical']}`", f"{r['max_abs_logit_err']:.1e}", f"{r['min_margin']:.1e}"] for r in SPEC],
          en=["k", "target calls / plain", "draft calls", "drafts accepted per target call", "tokens per target call",
              "tokens identical", "max logit err", "min margin"],
          zh=["k", "目标模型调用次数 / 普通解码", "草稿模型调用次数", "每次目标调用接受的草稿数", "每次目标调用得到的 token 数",
              "token 完全相同", "最大 logits 误差", "最小余量"])
assert all(r["tokens_identical"] and r["logits_close"] and r["min_margin"] > 100 * r["max_abs_logit_err"] for r in SPEC)

# %% [markdown] lang="en"
# Every $k$ gives the target's own tokens, with far fewer target calls: {{run:spec.calls_k1}} instead of
# {{run:spec.plain_calls}} at $k = 1$, {{run:spec.calls_kmax}} at $k = {{run:spec.kmax}}$. The gain flattens, because a
# long run of drafts is accepted only if every one of them agrees. If each draft agreed independently with
# probability $\alpha$, a round would yield $1 + \alpha + \dots + \alpha^k = (1 - \alpha^{k+1}) / (1 - \alpha)$
# tokens on average (Leviathan et al.). With $\alpha$ = {{run:spec.agreement:.3f}}, the agreement measured above,
# the formula gives {{run:spec.formula_k1:.2f}} tokens per call at $k = 1$, where the run got {{run:spec.tokens_k1:.2f}}, and
# {{run:spec.formula_kmax:.2f}} at $k = {{run:spec.kmax}}$, where the run got only {{run:spec.tokens_kmax:.2f}}: agreement is not
# independent from one position to the next, and the last rounds are cut short by the budget. The
# draft calls grow with $k$ instead: the draft's work is wasted on every rejected guess, so the best $k$
# depends on how much a draft call costs compared with a target call.
#
# *Figure: tokens per target call against $k$, measured (dots) and from the formula with the measured
# agreement (line); draft calls per generated token (squares, right axis).*

# %% [markdown] lang="zh"
# 每个 $k$ 都得到了目标模型自己的 token，而目标模型的调用次数少得多：$k = 1$ 时为 {{run:spec.calls_k1}} 次，而不是 {{run:spec.plain_calls}} 次；$k = {{run:spec.kmax}}$ 时为 {{run:spec.calls_kmax}} 次。收益逐渐变平，因为一长串草稿只有在每一个都一致时才会全部被接受。如果每个草稿都以概率 $\alpha$ 独立地与目标模型一致，每一轮平均得到 $1 + \alpha + \dots + \alpha^k = (1 - \alpha^{k+1}) / (1 - \alpha)$ 个 token（Leviathan 等人）。取 $\alpha$ = {{run:spec.agreement:.3f}}（上面实测的一致率），公式在 $k = 1$ 时给出每次调用 {{run:spec.formula_k1:.2f}} 个 token，实测为 {{run:spec.tokens_k1:.2f}}；在 $k = {{run:spec.kmax}}$ 时公式给出 {{run:spec.formula_kmax:.2f}}，实测却只有 {{run:spec.tokens_kmax:.2f}}：相邻位置上的一致与否并不独立，而且最后几轮会被预算截短。草稿模型的调用次数则随 $k$ 增长：每个被拒绝的猜测都白白耗费了草稿模型的计算，所以最佳的 $k$ 取决于草稿模型一次调用与目标模型一次调用的开销之比。
#
# *图：每次目标模型调用得到的 token 数随 $k$ 的变化，圆点为实测，曲线为用实测一致率代入公式的结果；方块为每生成一个 token 所需的草稿模型调用次数（右侧纵轴）。*

# %%
fig, ax = plt.subplots(figsize=(6, 3.4))
ks = [r["k"] for r in SPEC]
SPEC_FORMULA = [(1 - DRAFT_AGREEMENT ** (k + 1)) / (1 - DRAFT_AGREEMENT) for k in ks]
ax.plot(ks, [r["tokens_per_call"] for r in SPEC], "o", color="tab:blue", label="measured")
ax.plot(ks, SPEC_FORMULA, "-", color="tab:blue", alpha=0.5, label="(1 - a^(k+1)) / (1 - a)")
ax.set_xlabel("draft tokens per round k")
ax.set_ylabel("tokens per target call")
ax.legend(loc="upper left")
draft_axis = ax.twinx()
draft_axis.plot(ks, [r["draft_calls"] / r["plain_calls"] for r in SPEC], "s", color="tab:orange")
draft_axis.set_ylabel("draft calls per token", color="tab:orange")
fig.tight_layout()
SPEC_PNG = OUT / "speculative_calls.png"
fig.savefig(SPEC_PNG, dpi=120)
plt.show()
assert SPEC_FORMULA[-1] > SPEC[-1]["tokens_per_call"]

# %% tags=["prose-values"]
{"spec": {"prompts": len(SPEC_PROMPTS), "new_tokens": SPEC_NEW, "plain_calls": SPEC[0]["plain_calls"],
          "calls_k1": SPEC[0]["target_calls"], "calls_kmax": SPEC[-1]["target_calls"], "kmax": SPEC[-1]["k"],
          "agreement": DRAFT_AGREEMENT, "formula_k1": SPEC_FORMULA[0], "tokens_k1": SPEC[0]["tokens_per_call"],
          "formula_kmax": SPEC_FORMULA[-1], "tokens_kmax": SPEC[-1]["tokens_per_call"]}}

# %% [markdown] lang="en"
# **Negative control: forgetting to crop the target's cache.** `NoTargetRollback` crops only the draft's
# cache. The rejected drafts' K/V stay in the target's cache, so the next verifying call reads tokens that
# are not in the text, and every later position is off by their number.

# %% [markdown] lang="zh"
# **负对照：忘了截短目标模型的缓存**。`NoTargetRollback` 只截短草稿模型的缓存。被拒绝草稿的 K/V 留在目标模型的缓存里，于是下一次验证调用会读到文本中并不存在的 token，之后每个位置都偏移了这些 token 的个数。

# %%
class NoTargetRollback(Speculator):
    def rollback(self, length):
        # [en] WRONG on purpose: the target's cache keeps the rejected drafts.
        # [zh] 故意写错：目标模型的缓存保留了被拒绝的草稿。
        self.draft_cache = crop(self.draft_cache, min(length, cached_length(self.draft_cache)))


no_rollback = run_speculative(NoTargetRollback, 4)
SPEC_CONTROLS = {"target_cache_not_cropped": {"k": 4, "tokens_identical": no_rollback["tokens_identical"],
                                              "max_abs_logit_err": no_rollback["max_abs_logit_err"],
                                              "caught": not (no_rollback["tokens_identical"] and no_rollback["logits_close"])}}
say(en=f"Without the target's rollback (k = 4): tokens identical `{no_rollback['tokens_identical']}`, largest logit "
       f"difference {no_rollback['max_abs_logit_err']:.2f}: caught `{SPEC_CONTROLS['target_cache_not_cropped']['caught']}`.",
    zh=f"不回滚目标模型的缓存时（k = 4）：token 完全相同 `{no_rollback['tokens_identical']}`，logits 的最大差异为 "
       f"{no_rollback['max_abs_logit_err']:.2f}：查出 `{SPEC_CONTROLS['target_cache_not_cropped']['caught']}`。")
assert SPEC_CONTROLS["target_cache_not_cropped"]["caught"]
