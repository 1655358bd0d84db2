# %% [markdown] lang="en"
# ## 4. Batches of different lengths: left padding
#
# Three prompts of 3, 7 and 12 tokens go into one batch. A tensor must be rectangular, so the shorter
# prompts are filled up with **padding** slots to 12. Each padding slot gets some token ID (which one
# does not matter, and we check that it does not) and is marked 0 in an *attention mask* of shape
# `[B, T]` (1 = a real token). We pad on the **left** (`·` marks a padding slot; the first column is the
# row number):
#
# ```
# 0    ·   ·   ·   ·   ·   ·   ·   ·   ·  a0  a1  a2
# 1    ·   ·   ·   ·   ·  b0  b1  b2  b3  b4  b5  b6
# 2   c0  c1  c2  c3  c4  c5  c6  c7  c8  c9 c10 c11
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
# 三个提示分别有 3、7、12 个 token，要放进同一个 batch。张量必须是规整的矩形，所以较短的提示要用**填充**位补足到 12 个。每个填充位随便放一个 token ID（放哪个都无所谓，我们会验证这一点），并在形状为 `[B, T]` 的注意力掩码（attention mask，1 表示真实 token）里记为 0。我们在**左边**填充（`·` 表示填充位，最左一列是行号）：
#
# ```
# 0    ·   ·   ·   ·   ·   ·   ·   ·   ·  a0  a1  a2
# 1    ·   ·   ·   ·   ·  b0  b1  b2  b3  b4  b5  b6
# 2   c0  c1  c2  c3  c4  c5  c6  c7  c8  c9 c10 c11
# ```
#
# **为什么填在左边？** 生成时每一步都给每一行追加一个 token。采用左填充，每一行最新的真实 token 都在最后一列，所以一个解码步只需给整个 batch 加一列，`logits[:, -1]` 就是每一行下一个 token 的分布。如果填在右边，短行的最后一列是填充位：每一行都得从不同的列读出下一个 token，而新 token 会排在一串填充位之后，落在缓存的中间。
#
# 有了填充，第一份笔记本默认成立的两件事就不再成立了：
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


ids, key_mask = left_pad(PROMPTS)
positions = padded_positions(key_mask, ids.shape[1])
print(ids)
print(key_mask.int())
print(positions)
# [en] Every row's real tokens sit at positions 0, 1, ..., n - 1, and its newest token in the last column.
# [zh] 每一行的真实 token 都位于位置 0, 1, ..., n - 1，最新的 token 都在最后一列。
real_positions = [positions[row, key_mask[row]].tolist() for row in range(len(PROMPTS))]
assert real_positions == [list(range(n)) for n in PROMPT_LENGTHS] and bool(key_mask[:, -1].all())

# %% [markdown] lang="en"
# The mask of row 0 during prefill, drawn below: its three real queries read the real keys up to
# themselves. Its nine padding queries would read nothing: every key they are causally allowed to see is
# padding. A softmax over a row of $-\infty$ is $0/0$, NaN. The NaN would stay at padding positions in
# the first layer, but it becomes the K and V of those positions in the second layer, and a real query
# multiplies its attention weight 0 by that V: $0 \cdot \mathrm{NaN} = \mathrm{NaN}$. So `guard_empty_rows`
# lets a query with no visible key read every key instead. Its output is meaningless and finite, and
# nothing reads it: its K and V are padding keys, masked for every real query.
#
# The figure has three panels for row 0 (12 query slots down, 12 key slots across; green = may read):
# the causal mask (a prefill: no cached positions, $P = 0$), the padding mask (the same nine padding key columns hidden in every query row)
# and their AND, which is what the row's queries use before the guard. The cell then checks why the
# guard is needed: the queries that see no key at all are exactly the padding queries.

# %% [markdown] lang="zh"
# 下图画出预填充（prefill）时第 0 行的掩码：它的三个真实查询读取自己及之前的真实键。其余九个填充位上的查询则什么都读不到：按因果规则它们能看到的键全是填充位。对一整行 $-\infty$ 做 softmax 得到 $0/0$，即 NaN。在第一层，NaN 只停留在填充位上；但到了第二层，它成了这些位置的 K 和 V，而真实查询会用注意力权重 0 去乘这个 V：$0 \cdot \mathrm{NaN} = \mathrm{NaN}$。所以 `guard_empty_rows` 让一个键都看不到的查询改为读取所有的键。这样得到的输出没有意义，但都是有限值，而且不会被任何查询读取：它的 K 和 V 是填充键，对每个真实查询都被掩码遮住。
#
# 图中是第 0 行的三幅子图，绿色表示可以读取。纵轴 query slot 是 12 个查询槽位，横轴 key slot 是 12 个键槽位。三幅子图的标题依次是：causal mask (P = 0)，因果掩码（预填充时没有缓存的位置，$P = 0$）；padding mask (keys)，作用在键上的填充掩码（每一行查询都遮住同样九列填充键）；combined (AND)，两者的逻辑与，也就是加保护之前这一行的查询实际使用的掩码。总标题 row 0: 3 real tokens, left-padded to 12 的意思是：第 0 行有 3 个真实 token，左填充到 12 个槽位。随后的单元格说明为什么必须加这层保护：一个键都看不到的查询，恰好就是所有填充位上的查询。

# %%
def padding_mask(key_mask, new_len):
    # [en] Only keys are masked.
    # [zh] 只屏蔽键。
    return key_mask[:, None, None, :]                                  # [B, 1, 1, T_total]


def draw_padded_mask(key_mask, row):
    causal = causal_mask(0, key_mask.shape[1])
    combined = (causal[None, None] & padding_mask(key_mask, key_mask.shape[1]))[row, 0]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    panels = [("causal mask (P = 0)", causal), ("padding mask (keys)", key_mask[row][None].expand_as(causal)),
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
sees_no_key = ~(causal_mask(0, 12)[None, None] & padding_mask(key_mask, 12)).any(dim=-1)[:, 0]      # [B, T]
say_table([[str(row), str(int((~key_mask[row]).sum())), str(int(sees_no_key[row].sum()))] for row in range(len(PROMPTS))],
          en=["row", "padding slots", "queries that see no key"], zh=["行", "填充位数", "一个键都看不到的查询数"])
assert torch.equal(sees_no_key, ~key_mask)

# %% [markdown] lang="en"
# The guard, and the mask the decoder will use: causal AND padding, then guarded.

# %% [markdown] lang="zh"
# 下面是这层保护，以及解码器要用的掩码：因果掩码与填充掩码取逻辑与，再加上保护。

# %%
def guard_empty_rows(allowed):
    # [en] A padding query may have no key to read; let it read every key so its softmax stays finite.
    # [zh] 填充位上的查询可能一个键都读不到；让它读全部的键，softmax 才不会出现 NaN。
    return allowed | ~allowed.any(dim=-1, keepdim=True)


def padded_causal_mask(key_mask, new_len):
    # [en] Offset causal mask AND padding mask, built apart and combined, then guarded.
    # [zh] 带偏移的因果掩码与填充掩码分开构造，合并后再加保护。
    past_len = key_mask.shape[1] - new_len
    allowed = causal_mask(past_len, new_len)[None, None] & padding_mask(key_mask, new_len)   # [B, 1, T_new, T_total]
    return guard_empty_rows(allowed)

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
    # [zh] 参照：单个提示、不填充、第一份笔记本的缓存；最后再做一次完整重算。
    logits, cache = model(prompt[None])
    tokens = []
    for step in range(steps + 1):
        tokens.append(int(logits[0, -1].argmax()))
        if step == steps:
            break
        logits, cache = model(torch.tensor([[tokens[-1]]]), cache)
    # [en] Full recomputation of the prompt and the generated tokens.
    # [zh] 对提示和生成的 token 做完整重算。
    full_logits, _ = model(torch.cat((prompt, torch.tensor(tokens[:-1], dtype=torch.long)))[None])
    return {"logits": full_logits[0], "tokens": tokens}

# %% [markdown] lang="en"
# **The criterion.** For each row, the logits at its real positions through prefill and all 20 decode
# steps ($n + 20$ positions for a prompt of $n$ tokens) must equal those of a full recomputation of that
# prompt alone, unpadded, followed by the tokens it generated alone: within $10^{-5}$ in FP32 and
# $10^{-10}$ in FP64 (`atol = rtol`, as in the first notebook). The greedy tokens must be identical. A
# NaN anywhere fails the check (`allclose` treats NaN as unequal). The FP64 run converts the same
# weights. `compare`, a helper folded in section 1, makes the comparison.

# %% [markdown] lang="zh"
# **判据**：每一行在真实位置上的 logits（预填充加上全部 20 个解码步；提示有 $n$ 个 token 时共 $n + 20$ 个位置）必须等于完整重算的结果。完整重算的输入是该提示单独一条、不加填充，后面接上它单独运行时生成的 token；容差在 FP32 下为 $10^{-5}$，在 FP64 下为 $10^{-10}$（`atol = rtol`，与第一份笔记本相同）。贪心生成的 token 必须完全一致。任何位置出现 NaN 都算失败（`allclose` 认为 NaN 与任何值都不相等）。FP64 运行用的还是同一份权重，只是转换成了 FP64。比较由第 1 节折叠起来的小工具 `compare` 完成。

# %%
def in_dtype(model, dtype):
    return model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)


REFERENCE = {dtype: [generate_alone(in_dtype(model, dtype), p) for p in PROMPTS] for dtype in TOLERANCE}


def check_padded(model, dtype=torch.float32, rules=CORRECT_RULES, **options) -> dict:
    out = generate_padded(in_dtype(model, dtype), PROMPTS, rules=rules, **options)
    refs = REFERENCE[dtype]
    result = compare(out["logits"], [ref["logits"] for ref in refs])
    result["tokens_identical"] = out["tokens"] == [ref["tokens"] for ref in refs]
    result["passed"] = result["close"] and result["tokens_identical"]
    return result | {"dtype": DTYPE_NAME[dtype], "tokens": out["tokens"]}


PADDED = {DTYPE_NAME[d]: check_padded(model, d) for d in TOLERANCE}
say_table([[name.upper(), str(PROMPT_LENGTHS), f"{r['max_abs_logit_err']:.2e}", f"`{r['tokens_identical']}`", f"`{r['passed']}`"]
           for name, r in PADDED.items()],
          en=["dtype", "prompt lengths", "max abs logit error", "tokens identical", "passed"],
          zh=["精度", "提示长度", "logits 的最大绝对误差", "token 一致", "通过"])
say_table([[str(row), str(n), " ".join(map(str, tokens))] for row, (n, tokens) in enumerate(zip(PROMPT_LENGTHS, PADDED["fp32"]["tokens"]))],
          en=["row", "prompt tokens", "greedy tokens (fp32)"], zh=["行", "提示 token 数", "贪心生成的 token（FP32）"])
assert all(r["passed"] for r in PADDED.values())
