# %% [markdown] lang="en"
# ## 4. Batches of different lengths: left padding
#
# Three prompts of 3, 7 and 12 tokens go into one batch. A tensor must be rectangular, so the shorter
# prompts are filled up with **padding** slots to 12. Each padding slot gets some token ID (which one
# does not matter, and we check that it does not) and is marked 0 in an *attention mask* of shape
# `[B, T]` (1 = a real token). We pad on the **left**:
#
# ```
# row 0   pad pad pad pad pad pad pad pad pad  a0  a1  a2
# row 1   pad pad pad pad pad  b0  b1  b2  b3  b4  b5  b6
# row 2    c0  c1  c2  c3  c4  c5  c6  c7  c8  c9 c10 c11
# ```
#
# **Why on the left?** Generation appends one token per step to every row. With left padding every
# row's newest real token sits in the last column, so a decode step adds one column to the whole
# batch, and `logits[:, -1]` is every row's next-token distribution. With right padding the last column
# of a short row is padding: its next token would have to be read from a different column in every
# row, and its new tokens would land after a run of padding slots, in the middle of the cache.
#
# Padding changes two things the first notebook took for granted.
#
# * **Positions.** A row's first real token has position 0, wherever it sits in the batch. The
#   position of a slot is the number of real tokens before it: `cumsum(mask) - 1` along the row.
#   Padding slots get position 0 (any fixed value would do; we check that too).
# * **Visibility.** A query may read a key when the key is not in its future (the offset causal
#   mask of section 2) **and** the key is a real token (the *padding mask*). We build the two
#   separately, so each can be checked on its own, and combine them with a logical AND into a mask of
#   shape `[B, 1, T_new, T_total]`: one per row, shared by the heads.

# %% [markdown] lang="zh"
# ## 4. 长度不同的 batch：左填充
#
# 三个提示分别有 3、7、12 个 token，要放进同一个 batch。张量必须是规整的矩形，所以较短的提示要用**填充**位补足到 12 个。每个填充位随便放一个 token ID（放哪个都无所谓，我们会验证这一点），并在形状为 `[B, T]` 的注意力掩码（attention mask，1 表示真实 token）里记为 0。我们在**左边**填充：
#
# ```
# row 0   pad pad pad pad pad pad pad pad pad  a0  a1  a2
# row 1   pad pad pad pad pad  b0  b1  b2  b3  b4  b5  b6
# row 2    c0  c1  c2  c3  c4  c5  c6  c7  c8  c9 c10 c11
# ```
#
# **为什么填在左边？** 生成时每一步都给每一行追加一个 token。采用左填充，每一行最新的真实 token 都在最后一列，所以一个解码步只需给整个 batch 加一列，`logits[:, -1]` 就是每一行下一个 token 的分布。如果填在右边，短行的最后一列是填充位：每一行都得从不同的列读出下一个 token，而新 token 会排在一串填充位之后，落在缓存的中间。
#
# 填充改变了第一份笔记本视为理所当然的两件事。
#
# * **位置**：一行中第一个真实 token 的位置是 0，无论它位于 batch 的哪一列。某个槽位的位置等于它之前真实 token 的个数，即沿行计算 `cumsum(mask) - 1`。填充位的位置取 0（取任何固定值都可以，这一点我们也会验证）。
# * **可见性**：查询能读取一个键，须同时满足两个条件：键不在查询的“未来”（第 2 节带偏移的因果掩码），**并且**键是真实 token（**填充掩码**）。两种掩码分开构造，以便各自单独检查，再用逻辑与合成形状为 `[B, 1, T_new, T_total]` 的掩码：每行一个，各个头共用。

# %%
PROMPT_LENGTHS = (3, 7, 12)
DECODE_STEPS = 20
# [en] Any ID works for padding slots (checked below).
# [zh] 填充位用哪个 ID 都可以（下面会验证）。
PAD_ID = 0

gen = torch.Generator().manual_seed(SEED)
PROMPTS = [torch.randint(0, cfg.vocab, (n,), generator=gen) for n in PROMPT_LENGTHS]


def left_pad(prompts, pad_id=PAD_ID):
    # [en] Stack prompts of different lengths into one batch, padded on the left.
    # [zh] 把长度不同的提示叠成一个 batch，在左边填充。
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    # [en] True = a real token.
    # [zh] True 表示真实 token。
    key_mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        key_mask[row, width - len(prompt):] = True
    return ids, key_mask


def padded_positions(key_mask, new_len, pad_position=0):
    # [en] Position of a slot = real tokens before it; padding slots get a fixed value.
    # [zh] 槽位的位置 = 它之前真实 token 的个数；填充位取一个固定值。
    positions = key_mask.long().cumsum(dim=-1) - 1                     # [B, T_total]
    positions = positions.masked_fill(~key_mask, pad_position)
    return positions[:, -new_len:]                                     # [B, T_new]


def padding_mask(key_mask, new_len):
    # [en] Only keys are masked.
    # [zh] 只屏蔽键。
    return key_mask[:, None, None, :]                                  # [B, 1, 1, T_total]


def padded_causal_mask(key_mask, new_len):
    # [en] Offset causal mask AND padding mask, built apart and combined.
    # [zh] 带偏移的因果掩码与填充掩码分开构造，再合并。
    past_len = key_mask.shape[1] - new_len
    allowed = causal_mask(past_len, new_len)[None, None] & padding_mask(key_mask, new_len)   # [B, 1, T_new, T_total]
    return guard_empty_rows(allowed)


def guard_empty_rows(allowed):
    # [en] A padding query may have no key to read; let it read every key so its softmax stays finite.
    # [zh] 填充位上的查询可能一个键都读不到；让它读全部的键，softmax 才不会出现 NaN。
    return allowed | ~allowed.any(dim=-1, keepdim=True)


ids, key_mask = left_pad(PROMPTS)
print(ids)
print(key_mask.int())
print(padded_positions(key_mask, ids.shape[1]))
assert ids.shape == key_mask.shape == (3, 12) and key_mask.sum(-1).tolist() == list(PROMPT_LENGTHS)
assert padded_positions(key_mask, 12)[0].tolist() == [0] * 9 + [0, 1, 2]
assert padded_positions(key_mask, 12)[2].tolist() == list(range(12))
assert padded_positions(torch.cat((key_mask, torch.ones(3, 1, dtype=torch.bool)), 1), 1)[:, 0].tolist() == list(PROMPT_LENGTHS)
# [en] Left padding: the last column is real in every row; right padding would end two rows in padding.
# [zh] 左填充：每一行的最后一列都是真实 token；右填充则会让两行以填充位结尾。
assert torch.equal(ids[:, -1], torch.stack([p[-1] for p in PROMPTS]))
assert sum(len(p) < 12 for p in PROMPTS) == 2

# %% [markdown] lang="en"
# The mask of row 0 during prefill, drawn below: its three real queries read the real keys up to
# themselves. Its nine padding queries would read nothing: every key they are causally allowed to see is
# padding. A softmax over a row of $-\infty$ is $0/0$, NaN. The NaN would stay at padding positions in
# the first layer, but it becomes the K and V of those positions in the second layer, and a real query
# multiplies its attention weight 0 by that V: $0 \cdot \mathrm{NaN} = \mathrm{NaN}$. So `guard_empty_rows`
# lets a query with no visible key read every key instead. Its output is meaningless and finite, and
# nothing reads it: its K and V are padding keys, masked for every real query.

# %% [markdown] lang="zh"
# 下图画出预填充时第 0 行的掩码：它的三个真实查询读取自己及之前的真实键。其余九个填充位上的查询则什么都读不到：按因果规则它们能看到的键全是填充位。对一整行 $-\infty$ 做 softmax 得到 $0/0$，即 NaN。在第一层，NaN 只停留在填充位上；但到了第二层，它成了这些位置的 K 和 V，而真实查询会用注意力权重 0 去乘这个 V：$0 \cdot \mathrm{NaN} = \mathrm{NaN}$。所以 `guard_empty_rows` 让一个键都看不到的查询改为读取所有的键。这样得到的输出没有意义，但都是有限值，而且不会被任何查询读取：它的 K 和 V 是填充键，对每个真实查询都被掩码遮住。

# %%
def draw_padded_mask(key_mask, row):
    causal = causal_mask(0, key_mask.shape[1])
    combined = (causal[None, None] & padding_mask(key_mask, key_mask.shape[1]))[row, 0]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    panels = [("offset causal mask", causal), ("padding mask (keys)", key_mask[row][None].expand_as(causal)),
              ("combined (AND)", combined)]
    for ax, (title, mask) in zip(axes, panels):
        ax.imshow(mask.int().numpy(), cmap="Greens", vmin=0, vmax=1.4)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key slot")
        ax.set_xticks(range(0, key_mask.shape[1], 2))
        ax.set_yticks(range(0, key_mask.shape[1], 2))
    axes[0].set_ylabel("query slot")
    fig.suptitle(f"row {row}: {int(key_mask[row].sum())} real tokens, left-padded to {key_mask.shape[1]}", fontsize=10)
    fig.tight_layout()
    return fig


PADDING_PNG = OUT / "padding_mask.png"
draw_padded_mask(key_mask, 0).savefig(PADDING_PNG, dpi=110)
plt.show()
empty_rows = ~(causal_mask(0, 12)[None, None] & padding_mask(key_mask, 12)).any(-1)      # [B, 1, T]
# [en] Exactly the padding queries see no key.
# [zh] 读不到任何键的，恰好是填充位上的查询。
assert empty_rows.sum(-1).flatten().tolist() == [9, 5, 0]
assert guard_empty_rows(padded_causal_mask(key_mask, 12)).any(-1).all()

# %% [markdown] lang="en"
# The decoder of section 3 needs no change for this. Its hooks receive only `(past_len, new_len)`,
# but they may return per-row tensors: positions `[B, T_new]` go through the position table like
# `[T_new]` did, and a mask `[B, 1, T_new, T_total]` broadcasts over the heads in `masked_fill`.
# `padded_forward` installs hooks that read the batch's attention mask, runs the unchanged decoder
# with its `torch.cat` cache, and restores the default hooks afterwards. The `rules` argument lets us
# swap the positions or the mask for a broken one.

# %% [markdown] lang="zh"
# 第 3 节的解码器不用做任何修改。它的钩子虽然只拿到 `(past_len, new_len)`，却可以返回每行各自的张量：形状为 `[B, T_new]` 的位置照样可以查位置嵌入表，形状为 `[B, 1, T_new, T_total]` 的掩码在 `masked_fill` 里会自动广播到各个头。`padded_forward` 装上读取 batch 注意力掩码的钩子，用原封不动的解码器及其 `torch.cat` 缓存完成计算，之后恢复默认钩子。通过参数 `rules` 可以把位置或掩码换成改坏的版本。

# %%
CORRECT_RULES = {"positions": padded_positions, "mask": padded_causal_mask}


def padded_forward(model, ids, key_mask, cache=None, rules=CORRECT_RULES):
    # [en] key_mask covers the cache and the new tokens: [B, T_total].
    # [zh] key_mask 覆盖缓存和新 token：[B, T_total]。
    with model.hooks(positions_fn=lambda past_len, n: rules["positions"](key_mask, n),
                     mask_fn=lambda past_len, n: rules["mask"](key_mask, n)):
        return model(ids, cache)


@torch.inference_mode()
def generate_padded(model, prompts, steps=DECODE_STEPS, rules=CORRECT_RULES, pad_id=PAD_ID, pad_position=None):
    # [en] Prefill the left-padded batch, then `steps` greedy decode steps; keep every row's real logits.
    # [zh] 对左填充的 batch 做预填充，再做 `steps` 个贪心解码步；保留每行真实位置上的 logits。
    if pad_position is not None:
        rules = dict(rules, positions=lambda m, n: padded_positions(m, n, pad_position))
    ids, key_mask = left_pad(prompts, pad_id)
    logits, cache = padded_forward(model, ids, key_mask, None, rules)
    # [en] Prefill: real positions only.
    # [zh] 预填充：只保留真实位置。
    rows = [[logits[r, key_mask[r]]] for r in range(len(prompts))]
    tokens = [[] for _ in prompts]
    for step in range(steps + 1):
        # [en] Greedy choice.
        # [zh] 贪心选择。
        next_ids = logits[:, -1].argmax(dim=-1)                        # [B]
        for r in range(len(prompts)):
            tokens[r].append(int(next_ids[r]))
        if step == steps:
            break
        key_mask = torch.cat((key_mask, torch.ones(len(prompts), 1, dtype=torch.bool)), dim=1)
        logits, cache = padded_forward(model, next_ids[:, None], key_mask, cache, rules)
        for r in range(len(prompts)):
            rows[r].append(logits[r])                                  # [1, vocab]
    return {"logits": [torch.cat(r) for r in rows], "tokens": tokens, "cache": cache}


@torch.inference_mode()
def generate_alone(model, prompt, steps=DECODE_STEPS):
    # [en] The reference: one prompt, no padding, the first notebook's cache; then one full call.
    # [zh] 参照：单个提示、不填充、第一份笔记本的缓存；最后再做一次完整计算。
    logits, cache = model(prompt[None])
    tokens = []
    for step in range(steps + 1):
        tokens.append(int(logits[0, -1].argmax()))
        if step == steps:
            break
        logits, cache = model(torch.tensor([[tokens[-1]]]), cache)
    # [en] Full recomputation of the prompt and the generated tokens.
    # [zh] 对提示和生成的 token 做完整重算。
    full_logits, _ = model(torch.cat((prompt, torch.tensor(tokens[:-1])))[None])
    return {"logits": full_logits[0], "tokens": tokens}

# %% [markdown] lang="en"
# **The criterion.** For each row, the logits at its real positions through prefill and all 20 decode
# steps ($n + 20$ positions for a prompt of $n$ tokens) must equal those of a full recomputation of that
# prompt alone, unpadded, followed by the tokens it generated alone: within $10^{-5}$ in FP32 and
# $10^{-10}$ in FP64 (`atol = rtol`, as in the first notebook). The greedy tokens must be identical. A
# NaN anywhere fails the check (`allclose` treats NaN as unequal). The FP64 run converts the same
# weights.

# %% [markdown] lang="zh"
# **判据**：每一行在真实位置上的 logits（预填充加上全部 20 个解码步；提示有 $n$ 个 token 时共 $n + 20$ 个位置）必须等于完整重算的结果。完整重算的输入是该提示单独一条、不加填充，后面接上它单独运行时生成的 token；容差在 FP32 下为 $10^{-5}$，在 FP64 下为 $10^{-10}$（`atol = rtol`，与第一份笔记本相同）。贪心生成的 token 必须完全一致。任何位置出现 NaN 都算失败（`allclose` 认为 NaN 与任何值都不相等）。FP64 运行用的还是同一份权重，只是转换成了 FP64。

# %%
def in_dtype(model, dtype):
    return model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)


def worst(errors) -> float:
    errors = list(errors)
    # [en] max() would skip a NaN.
    # [zh] max() 会跳过 NaN。
    return float("nan") if any(math.isnan(e) for e in errors) else max(errors)


REFERENCE = {dtype: [generate_alone(in_dtype(model, dtype), p) for p in PROMPTS] for dtype in TOLERANCE}


def check_padded(model, dtype=torch.float32, rules=CORRECT_RULES, **options) -> dict:
    out = generate_padded(in_dtype(model, dtype), PROMPTS, rules=rules, **options)
    refs, tol = REFERENCE[dtype], TOLERANCE[dtype]
    errors = [max_abs_err(got, ref["logits"]) for got, ref in zip(out["logits"], refs)]
    close = all(got.shape == ref["logits"].shape and torch.allclose(got, ref["logits"], atol=tol, rtol=tol)
                for got, ref in zip(out["logits"], refs))
    same_tokens = all(got == ref["tokens"] for got, ref in zip(out["tokens"], refs))
    finite = all(bool(torch.isfinite(got).all()) for got in out["logits"])
    return {"dtype": DTYPE_NAME[dtype], "max_abs_logit_err": worst(errors), "per_row_err": errors,
            "tokens_identical": same_tokens, "finite": finite, "passed": bool(close and same_tokens and finite),
            "tokens": out["tokens"]}


PADDED = {DTYPE_NAME[d]: check_padded(model, d) for d in TOLERANCE}
say_table([[name, str(PROMPT_LENGTHS), f"{r['max_abs_logit_err']:.2e}",
            ", ".join(f"{e:.1e}" for e in r["per_row_err"]), f"`{r['tokens_identical']}`", f"`{r['passed']}`"]
           for name, r in PADDED.items()],
          en=["dtype", "prompt lengths", "max abs logit error", "per row", "tokens identical", "passed"],
          zh=["精度", "提示长度", "最大 logits 绝对误差", "各行", "token 一致", "通过"])
say_table([[str(row), str(n), " ".join(map(str, tokens))] for row, (n, tokens) in enumerate(zip(PROMPT_LENGTHS, PADDED["fp32"]["tokens"]))],
          en=["row", "prompt tokens", "greedy tokens (fp32)"], zh=["行", "提示 token 数", "贪心生成的 token（FP32）"])
assert all(r["passed"] for r in PADDED.values())
assert all(len(lg["logits"]) == n + DECODE_STEPS for lg, n in zip(REFERENCE[torch.float32], PROMPT_LENGTHS))

# %% [markdown] lang="en"
# What sits in a padding slot cannot matter: another padding token ID, or padding slots at position 7
# instead of 0, must give **bit-identical** logits at real positions. The padding keys' scores are
# replaced by $-\infty$ before the softmax, their weights are exactly 0, and $0 \cdot v = 0$ for any
# finite $v$. Every other number in the computation is unchanged, and so are the shape and memory layout
# of every call, so each kernel repeats the very same arithmetic: this equality holds on any machine, which
# is why we may ask for it bit for bit. A row that holds no token at all (an empty
# slot of the batch) is padding from end to end: the guard keeps it finite as well, and the other rows
# do not notice it.

# %% [markdown] lang="zh"
# 填充位里放什么，不应产生任何影响：换一个填充 token ID，或者把填充位的位置从 0 改成 7，真实位置上的 logits 都必须**逐比特相同**。填充键的分数在 softmax 之前被替换成 $-\infty$，权重恰好为 0，而对任何有限的 $v$ 都有 $0 \cdot v = 0$。计算中其余的数一个都没变，每次调用的形状和内存布局也都不变，所以每个算子执行的运算与原来完全一样：这个相等关系在任何机器上都成立，所以这里可以要求逐比特相同。一个 token 都没有的行（batch 中的空位）从头到尾都是填充位：`guard_empty_rows` 同样让它保持有限值，其他行也察觉不到它的存在。

# %%
with torch.inference_mode():
    base = generate_padded(model, PROMPTS)
    other_pad = generate_padded(model, PROMPTS, pad_id=cfg.vocab - 1)
    other_pos = generate_padded(model, PROMPTS, pad_position=7)
PAD_CONTENT_BIT_EXACT = all(torch.equal(a, b) and torch.equal(a, c)
                            for a, b, c in zip(base["logits"], other_pad["logits"], other_pos["logits"]))
say(en=f"Another padding ID or padding position: real logits bit-identical: `{PAD_CONTENT_BIT_EXACT}`.",
    zh=f"换一个填充 ID 或填充位置：真实位置上的 logits 逐比特相同：`{PAD_CONTENT_BIT_EXACT}`。")
assert PAD_CONTENT_BIT_EXACT
# [en] Row 1 holds no token at all.
# [zh] 第 1 行一个 token 都没有。
with torch.inference_mode():
    empty_ids, empty_mask = left_pad([PROMPTS[0], PROMPTS[0][:0], PROMPTS[2]])
    empty_logits, _ = padded_forward(model, empty_ids, empty_mask)
EMPTY_ROW_OK = bool(torch.isfinite(empty_logits).all()) and all(
    torch.allclose(empty_logits[row, empty_mask[row]], base["logits"][row][:n], atol=1e-5, rtol=1e-5)
    for row, n in ((0, PROMPT_LENGTHS[0]), (2, PROMPT_LENGTHS[2])))
say(en=f"A row with no token: finite everywhere, other rows unchanged: `{EMPTY_ROW_OK}`.",
    zh=f"一个 token 都没有的行：处处是有限值，其他行不受影响：`{EMPTY_ROW_OK}`。")
assert EMPTY_ROW_OK and int(empty_mask[1].sum()) == 0

# %% [markdown] lang="en"
# **Negative controls.** Four broken twins go through the same `check_padded`:
#
# * **positions from `arange`**: the first notebook's rule, which counts padding slots as positions;
# * **no padding mask**: the causal mask alone, so real queries read padding keys;
# * **padding mask on the queries**: the mask hides padding *queries* instead of padding *keys*
#   (an easy transposition: `[B, 1, T_new, 1]` instead of `[B, 1, 1, T_total]`), so real queries
#   still read padding keys;
# * **no guard for empty rows**: the correct masks without `guard_empty_rows`.
#
# The third one shows why the two masks must be kept apart: combined into one square matrix during
# prefill, keys and queries are easy to confuse.

# %% [markdown] lang="zh"
# **负对照**：四个改坏的版本都交给同一个 `check_padded` 检查：
#
# * **位置用 `arange`**：即第一份笔记本的规则，把填充位也算进位置；
# * **没有填充掩码**：只用因果掩码，于是真实查询会读到填充键；
# * **填充掩码加在查询上**：掩码遮住的是填充位上的**查询**，而不是填充位上的**键**（很容易写反：`[B, 1, T_new, 1]` 而不是 `[B, 1, 1, T_total]`），于是真实查询仍会读到填充键；
# * **不处理读不到键的行**：掩码都正确，只是去掉了 `guard_empty_rows`。
#
# 第三个版本说明了两种掩码为什么要分开：在预填充时把它们合成一个方阵，键和查询就很容易弄混。

# %%
def arange_positions(key_mask, new_len):
    past_len = key_mask.shape[1] - new_len
    # [en] WRONG on purpose: counts padding slots as positions.
    # [zh] 故意写错：把填充位也算作位置。
    return (past_len + torch.arange(new_len)).expand(key_mask.shape[0], new_len)


def causal_only(key_mask, new_len):
    past_len = key_mask.shape[1] - new_len
    # [en] WRONG on purpose: no padding mask.
    # [zh] 故意写错：没有填充掩码。
    return causal_mask(past_len, new_len)[None, None].expand(key_mask.shape[0], 1, -1, -1)


def padding_on_queries(key_mask, new_len):
    past_len = key_mask.shape[1] - new_len
    # [en] WRONG on purpose: hides padding queries, [B, 1, T_new, 1], not padding keys.
    # [zh] 故意写错：遮住的是填充位上的查询（[B, 1, T_new, 1]），而不是填充位上的键。
    queries = key_mask[:, None, -new_len:, None]
    return guard_empty_rows(causal_mask(past_len, new_len)[None, None] & queries)


def no_guard(key_mask, new_len):
    past_len = key_mask.shape[1] - new_len
    # [en] WRONG on purpose: no guard, so rows that see no key become NaN.
    # [zh] 故意写错：没有保护，读不到键的行会变成 NaN。
    return causal_mask(past_len, new_len)[None, None] & padding_mask(key_mask, new_len)


PADDING_CONTROLS = {
    "arange_positions": dict(CORRECT_RULES, positions=arange_positions),
    "no_padding_mask": dict(CORRECT_RULES, mask=causal_only),
    "padding_mask_on_queries": dict(CORRECT_RULES, mask=padding_on_queries),
    "no_empty_row_guard": dict(CORRECT_RULES, mask=no_guard),
}
PADDING_CONTROL_RUNS = {name: check_padded(model, torch.float32, rules) for name, rules in PADDING_CONTROLS.items()}
say_table([[f"`{name}`", f"{r['max_abs_logit_err']:.3e}", f"`{r['tokens_identical']}`", f"`{r['finite']}`", f"`{not r['passed']}`"]
           for name, r in PADDING_CONTROL_RUNS.items()],
          en=["broken variant", "max abs logit error", "tokens identical", "finite", "caught"],
          zh=["改坏的版本", "最大 logits 绝对误差", "token 一致", "数值有限", "查出"])
assert not any(r["passed"] for r in PADDING_CONTROL_RUNS.values())
# [en] NaN reached real positions.
# [zh] NaN 传到了真实位置。
assert not PADDING_CONTROL_RUNS["no_empty_row_guard"]["finite"]
assert all(r["finite"] for name, r in PADDING_CONTROL_RUNS.items() if name != "no_empty_row_guard")
# [en] With the guard: no NaN at any real position.
# [zh] 有了保护：任何真实位置都没有 NaN。
assert PADDED["fp32"]["finite"] and PADDED["fp64"]["finite"]

# %% [markdown] lang="en"
# Where does the NaN of the last control come from? Forward hooks on the two blocks catch their outputs
# during the prefill: after the first block, NaN sits exactly at the padding positions and every real
# position is finite; after the second block, which read those positions' K and V with weight 0, the
# real positions of the two padded rows are NaN too. The unpadded row stays finite throughout.

# %% [markdown] lang="zh"
# 最后一个负对照的 NaN 是从哪里来的？在两个 Transformer 块上注册前向钩子，截取预填充时它们的输出：经过第 1 个 Transformer 块，NaN 恰好出现在所有填充位上，真实位置全都是有限值；第 2 个 Transformer 块以权重 0 读取了这些位置的 K 和 V，经过它之后，两个有填充的行在真实位置上也变成了 NaN。没有填充的那一行始终是有限值。

# %%
block_outputs = []
handles = [block.register_forward_hook(lambda module, args, out: block_outputs.append(out[0])) for block in model.blocks]
try:
    ids, key_mask = left_pad(PROMPTS)
    with torch.inference_mode():
        padded_forward(model, ids, key_mask, None, PADDING_CONTROLS["no_empty_row_guard"])
finally:
    for handle in handles:
        handle.remove()
after_block_1, after_block_2 = block_outputs                           # [B, T, width], [B, T, width]
nan_1 = after_block_1.isnan().all(dim=-1)                               # [B, T]
nan_2 = after_block_2.isnan().all(dim=-1)
say_table([[str(row), str(int((~key_mask[row]).sum())), str(int(nan_1[row].sum())), str(int(nan_2[row][key_mask[row]].sum()))]
           for row in range(len(PROMPTS))],
          en=["row", "padding slots", "NaN positions after block 1", "NaN real positions after block 2"],
          zh=["行", "填充位数", "第 1 个 Transformer 块之后的 NaN 位置数", "第 2 个 Transformer 块之后真实位置中的 NaN 数"])
assert torch.equal(nan_1, ~key_mask) and torch.isfinite(after_block_1[key_mask]).all()
assert nan_2[0][key_mask[0]].all() and nan_2[1][key_mask[1]].all() and torch.isfinite(after_block_2[2]).all()
