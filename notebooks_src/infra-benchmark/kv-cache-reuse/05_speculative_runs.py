# %% [markdown] lang="en"
# **The criterion**: for every $k$ and every prompt ({{run:spec.prompts}} prompts of 16 tokens,
# {{run:spec.new_tokens}} new tokens each), the speculative tokens equal the target's plain greedy tokens,
# token for token, and the target logits that chose them equal the plain loop's within the FP32 tolerance
# (the verifying call computes $k + 1$ positions at once, the plain loop one, so the sums are grouped
# differently). The table also counts the calls: target calls against the {{run:spec.plain_calls}} of plain
# decoding (one per token), the draft tokens accepted per target call, and the tokens each target call yields.

# %% [markdown] lang="zh"
# **判据**：对每个 $k$ 和每个提示（{{run:spec.prompts}} 个各含 16 个 token 的提示，每个生成 {{run:spec.new_tokens}} 个新 token），投机解码得到的 token 必须与目标模型普通贪心生成的 token 逐个相同；选出这些 token 的目标模型 logits 必须在 FP32 容差内与普通循环的相同（验证调用一次计算 $k + 1$ 个位置，普通循环一次只算一个，求和的分组方式不同）。表中还统计了调用次数：目标模型的调用次数（普通解码每个 token 调用一次，共 {{run:spec.plain_calls}} 次），每次目标模型调用接受的草稿 token 数，以及每次目标模型调用得到的 token 数。

# %%
SPEC_KS = (1, 4, 8) if QUICK else (1, 2, 3, 4, 6, 8)


def run_speculative(speculator_class, k) -> dict:
    runs = [speculator_class(model, draft, k).generate(prompt, SPEC_NEW) for prompt in SPEC_PROMPTS]
    target_calls = sum(r["target_calls"] for r in runs)
    margins = [(top2[:, 0] - top2[:, 1]).min() for top2 in (logits.topk(2, dim=-1).values for logits, _ in PLAIN)]
    versus_plain = compare([r["logits"] for r in runs], [logits for logits, _ in PLAIN])
    draft_calls = sum(r["draft_calls"] for r in runs)
    # [en] Draft positions the budget rule removed: k per round, minus the drafts actually proposed.
    # [zh] 预算规则去掉的草稿位置数：每轮 k 个，减去实际提出的草稿数。
    return {"k": k, "target_calls": target_calls, "draft_calls": draft_calls, "budget_cut": k * target_calls - draft_calls,
            "plain_calls": SPEC_NEW * len(runs),
            "accepted_per_call": sum(sum(r["accepted"]) for r in runs) / target_calls,
            "tokens_per_call": SPEC_NEW * len(runs) / target_calls,
            "tokens_identical": all(r["tokens"] == tokens for r, (_, tokens) in zip(runs, PLAIN)),
            "logits_close": versus_plain["close"],
            "max_abs_logit_err": versus_plain["max_abs_logit_err"],
            "min_margin": float(min(margins))}


SPEC = [run_speculative(Speculator, k) for k in SPEC_KS]
say_table([[str(r["k"]), f"{r['target_calls']} / {r['plain_calls']}", str(r["draft_calls"]), f"{r['accepted_per_call']:.2f}",
            f"{r['tokens_per_call']:.2f}", f"{r['max_abs_logit_err']:.1e}", f"{r['min_margin']:.1e}"] for r in SPEC],
          en=["k", "target calls / plain", "draft calls", "drafts accepted per target call", "tokens per target call",
              "max abs logit error", "min margin (of the plain run, same for every k)"],
          zh=["$k$", "目标模型调用次数（投机解码 / 普通解码）", "草稿模型调用次数", "每次目标模型调用接受的草稿数", "每次目标模型调用得到的 token 数",
              "logits 的最大绝对误差", "最小余量（取自普通解码，对每个 $k$ 都相同）"])
assert all(r["tokens_identical"] and r["logits_close"] and r["min_margin"] > 100 * r["max_abs_logit_err"] for r in SPEC)
say(en="Checks passed for every $k$: the tokens are the plain loop's, token for token, and the logits that chose them are "
       "within the FP32 tolerance, far below the decisions' margins.",
    zh="对每个 $k$，检查全部通过：生成的 token 与普通循环逐个相同，选出它们的 logits 在 FP32 容差之内，误差远小于决策余量。")

# %% [markdown] lang="en"
# Every $k$ gives the target's own tokens, with far fewer target calls: {{run:spec.calls_k1}} instead of
# {{run:spec.plain_calls}} at $k = 1$, {{run:spec.calls_kmax}} at $k = {{run:spec.kmax}}$. These are calls, not seconds: the rounds
# themselves are not timed here, and a verifying call's cost of about one step holds for a GPU at batch 1 (what
# such a call costs on this CPU, and whether it pays, is in section 9's optional part). The gain levels off, because a
# long run of drafts is accepted only if every one of them agrees. If each draft agreed independently with
# probability $\alpha$, a round would yield $1 + \alpha + \dots + \alpha^k = (1 - \alpha^{k+1}) / (1 - \alpha)$
# tokens on average (Leviathan et al.). With $\alpha = {{run:spec.agreement:.3f}}$, the agreement measured above,
# the formula gives {{run:spec.formula_k1:.2f}} tokens per call at $k = 1$, where the run got {{run:spec.tokens_k1:.2f}}, and
# {{run:spec.formula_kmax:.2f}} at $k = {{run:spec.kmax}}$, where the run got only {{run:spec.tokens_kmax:.2f}}. The formula
# assumes (1) that drafts agree independently and (2) that every round holds $k$ drafts; both hold only roughly
# here. Breaking (2) can only lower the count; breaking (1) can move it either way:
#
# * **independence.** Agreement is not independent from one position to the next. Where agreements come in
#   longer runs than chance would give, long rounds are accepted more often and the measured count rises above
#   the formula; where they come in shorter runs, it falls below;
# * **full rounds.** The budget rule drafts at most the tokens still missing minus one, so the last round of
#   a prompt may hold fewer than $k$ drafts. This can only lower the count, and it matters more as $k$ grows:
#   the budget removed {{run:spec.budget_cut_k1}} draft positions at $k = 1$ and {{run:spec.budget_cut_kmax}} at
#   $k = {{run:spec.kmax}}$.
#
# The table after the figure gives, for each $k$, the measured count, the formula's and the draft positions the
# budget removed: at some $k$ the measured count lies above the formula, at others below. The draft calls grow
# with $k$ instead: the draft's work is wasted on every rejected guess, so the best $k$ depends on how much a
# draft call costs compared with a target call.
#
# *Figure: tokens per target call against $k$, the draft tokens per round: measured (blue dots) and from
# the formula with the measured agreement $\alpha$ (blue line); and draft calls per generated token
# (orange squares, right axis).*

# %% [markdown] lang="zh"
# 每个 $k$ 都得到了目标模型自己的 token，而目标模型的调用次数少得多：$k = 1$ 时为 {{run:spec.calls_k1}} 次，而不是 {{run:spec.plain_calls}} 次；$k = {{run:spec.kmax}}$ 时为 {{run:spec.calls_kmax}} 次。这里数的是调用次数，不是秒数，各轮本身并没有计时；“验证调用的耗时约等于一个解码步”说的是 GPU 上 batch 为 1 的情形（在本机 CPU 上，这样一次调用耗时多少、是否划算，见第 9 节的可选部分）。收益逐渐趋缓，因为一长串草稿只有在每一个都一致时才会全部被接受。如果每个草稿都以概率 $\alpha$ 独立地与目标模型一致，每一轮平均得到 $1 + \alpha + \dots + \alpha^k = (1 - \alpha^{k+1}) / (1 - \alpha)$ 个 token（Leviathan 等人）。取 $\alpha = {{run:spec.agreement:.3f}}$（上面实测的一致率），公式在 $k = 1$ 时给出每次调用 {{run:spec.formula_k1:.2f}} 个 token，实测为 {{run:spec.tokens_k1:.2f}}；在 $k = {{run:spec.kmax}}$ 时公式给出 {{run:spec.formula_kmax:.2f}}，实测却只有 {{run:spec.tokens_kmax:.2f}}。公式假设：（1）各个草稿独立地与目标模型一致；（2）每一轮都有 $k$ 个草稿。这两条在这里都只是近似成立。违反（2）只会让实测值变小；违反（1）则可能让它变大，也可能变小：
#
# * **独立**：相邻位置上的一致与否并不独立。如果一致的位置比随机情况下更容易连成长串，整轮被接受的情况就更多，实测值会高于公式；反之则低于公式；
# * **每轮都是完整的 $k$ 个草稿**：预算规则最多只提出还缺的 token 数减一个，所以一个提示的最后一轮可能不到 $k$ 个草稿。这只会让实测值变小，而且 $k$ 越大影响越大：$k = 1$ 时预算去掉了 {{run:spec.budget_cut_k1}} 个草稿位置，$k = {{run:spec.kmax}}$ 时去掉了 {{run:spec.budget_cut_kmax}} 个。
#
# 图后的表格对每个 $k$ 给出实测值、公式值以及预算去掉的草稿位置数：有的 $k$ 实测值高于公式，有的低于公式。草稿模型的调用次数则随 $k$ 增长：每个被拒绝的猜测都白白耗费了草稿模型的计算，所以最佳的 $k$ 取决于草稿模型一次调用与目标模型一次调用的开销之比。
#
# *图：横轴 draft tokens per round k 是每轮的草稿 token 数 $k$；左侧纵轴 tokens per target call 是每次目标模型调用得到的 token 数，图例中 measured（蓝色圆点）为实测，$(1 - \alpha^{k+1}) / (1 - \alpha)$（蓝色曲线）为用实测一致率 $\alpha$ 代入公式的结果；右侧纵轴 draft calls per token 是每生成一个 token 所需的草稿模型调用次数，图例中为 draft calls per token（橙色方块）。*

# %%
fig, ax = plt.subplots(figsize=(6, 3.4))
ks = [r["k"] for r in SPEC]
SPEC_FORMULA = [(1 - DRAFT_AGREEMENT ** (k + 1)) / (1 - DRAFT_AGREEMENT) for k in ks]
ax.plot(ks, [r["tokens_per_call"] for r in SPEC], "o", color="tab:blue", label="measured")
ax.plot(ks, SPEC_FORMULA, "-", color="tab:blue", alpha=0.5, label=r"$(1 - \alpha^{k+1}) / (1 - \alpha)$")
ax.set_xlabel("draft tokens per round k")
ax.set_ylabel("tokens per target call")
draft_axis = ax.twinx()
draft_axis.plot(ks, [r["draft_calls"] / r["plain_calls"] for r in SPEC], "s", color="tab:orange", label="draft calls per token")
draft_axis.set_ylabel("draft calls per token", color="tab:orange")
handles = ax.get_legend_handles_labels()[0] + draft_axis.get_legend_handles_labels()[0]
ax.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)
fig.tight_layout()
SPEC_PNG = OUT / "speculative_calls.png"
fig.savefig(SPEC_PNG, dpi=120)
plt.show()
assert SPEC_FORMULA[-1] > SPEC[-1]["tokens_per_call"]

# %%
say_table([[str(r["k"]), f"{r['tokens_per_call']:.2f}", f"{formula:.2f}", str(r["budget_cut"])] for r, formula in zip(SPEC, SPEC_FORMULA)],
          en=["k", "tokens per target call, measured", "from the formula", "draft positions removed by the budget"],
          zh=["$k$", "每次目标模型调用得到的 token 数（实测）", "公式值", "预算去掉的草稿位置数"])

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
spec_caught = not (no_rollback["tokens_identical"] and no_rollback["logits_close"])
say(en=f"Without the target's rollback ($k = 4$): the tokens {'equal' if no_rollback['tokens_identical'] else 'differ from'} the "
       f"plain loop's, the max abs logit error is {no_rollback['max_abs_logit_err']:.2f}; {'caught' if spec_caught else 'not caught'}.",
    zh=f"不回滚目标模型的缓存时（$k = 4$）：生成的 token 与普通循环{'相同' if no_rollback['tokens_identical'] else '不同'}，"
       f"logits 的最大绝对误差为 {no_rollback['max_abs_logit_err']:.2f}，{'已查出' if spec_caught else '未查出'}。")
assert spec_caught
