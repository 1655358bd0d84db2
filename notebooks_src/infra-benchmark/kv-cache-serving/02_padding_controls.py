# %% [markdown] lang="en"
# > **The equality rule of this notebook.** Two computations are asked to agree **bit for bit** only when
# > every kernel receives the same inputs in the same shapes and memory layout (or when the work is pure
# > data movement: copy, index, gather). A deterministic CPU kernel, here pinned to one thread, then does
# > the same arithmetic for both, in the same run on the same machine; another machine or PyTorch build may
# > give other bits, but gives them to both. Where a shape or a layout differs (a strided view against a fresh
# > tensor, a row inside a larger batch), a kernel may choose another blocking and order of summation, so
# > the comparison uses the dtype's tolerance ($10^{-5}$ in FP32, $10^{-10}$ in FP64). Each check below
# > says which case it is.
#
# What sits in a padding slot cannot matter: another padding token ID, or padding slots at position 7
# instead of 0, must give **bit-identical** logits at real positions. The padding keys' scores are
# replaced by $-\infty$ before the softmax, their weights are exactly 0, and $0 \cdot v = 0$ for any
# finite $v$; every other number, shape and layout is unchanged, so the rule asks for exact equality. A
# row that holds no token at all (an empty slot of the batch) is padding from end to end: the guard keeps
# it finite as well, and the other rows do not notice it (within the tolerance: the batch around them
# holds other numbers).

# %% [markdown] lang="zh"
# > **本笔记本的相等规则**：只有当每个内核收到的输入、形状和内存布局都相同时（或者只是搬运数据：复制、索引、收集），我们才要求两种计算**逐比特相同**。这时确定性的 CPU 内核（这里固定为单线程）在同一台机器、同一次运行中对两者做完全相同的运算；换一台机器或另一个 PyTorch 版本，得到的比特可能不同，但对两者仍然相同。只要形状或内存布局不同（跨步视图与新建的张量相比，或者同一行处在更大的 batch 中），内核就可能选择另一种划分方式和求和顺序，所以比较采用该精度的容差（FP32 为 $10^{-5}$，FP64 为 $10^{-10}$）。下面每项检查都会说明属于哪种情况。
#
# 填充位里放什么，不应产生任何影响：换一个填充 token ID，或者把填充位的位置从 0 改成 7，真实位置上的 logits 都必须**逐比特相同**。填充键的分数在 softmax 之前被替换成 $-\infty$，权重恰好为 0，而对任何有限的 $v$ 都有 $0 \cdot v = 0$；其余的数、形状和内存布局都不变，所以按上述规则要求完全相等。一个 token 都没有的行（batch 中的空位）从头到尾都是填充位：`guard_empty_rows` 同样让它保持有限值，其他行也察觉不到它的存在（在容差内：它们所在的 batch 里装的是别的数）。

# %%
with torch.inference_mode():
    base = generate_padded(model, PROMPTS)
    other_pad_id = generate_padded(model, PROMPTS, pad_id=cfg.vocab - 1)
    other_pad_position = generate_padded(model, PROMPTS, pad_position=7)
    # [en] Row 1 holds no token at all; rows 0 and 2 are the prompts of the batch above.
    # [zh] 第 1 行一个 token 都没有；第 0、2 行是上面那个 batch 里的提示。
    empty_ids, empty_mask = left_pad([PROMPTS[0], PROMPTS[0][:0], PROMPTS[2]])
    empty_logits, _ = padded_forward(model, empty_ids, empty_mask)
PAD_CONTENT_BIT_EXACT = (compare(other_pad_id["logits"], base["logits"])["bit_exact"]
                         and compare(other_pad_position["logits"], base["logits"])["bit_exact"])
empty_row = compare([empty_logits[row, empty_mask[row]] for row in (0, 2)],
                    [base["logits"][row][:PROMPT_LENGTHS[row]] for row in (0, 2)])
EMPTY_ROW_OK = bool(torch.isfinite(empty_logits).all()) and empty_row["close"]
say_table([[f"`pad_id = {cfg.vocab - 1}`, `pad_position = 7`", f"`{PAD_CONTENT_BIT_EXACT}`", "-"],
           ["`[PROMPTS[0], [], PROMPTS[2]]`", f"`{EMPTY_ROW_OK}`", f"{empty_row['max_abs_logit_err']:.1e}"]],
          en=["padding changed", "real logits unchanged (bit for bit / within tolerance)", "max abs logit error"],
          zh=["改动的填充", "真实位置的 logits 不变（逐比特 / 容差内）", "logits 的最大绝对误差"])
assert PAD_CONTENT_BIT_EXACT
assert EMPTY_ROW_OK

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
# prefill, keys and queries are easy to confuse. All four must fail the criterion, and only the last one
# may produce NaN.

# %% [markdown] lang="zh"
# **负对照**：四个改坏的版本都交给同一个 `check_padded` 检查：
#
# * **位置用 `arange`**：即第一份笔记本的规则，把填充位也算进位置；
# * **没有填充掩码**：只用因果掩码，于是真实查询会读到填充键；
# * **填充掩码加在查询上**：掩码遮住的是填充位上的**查询**，而不是填充位上的**键**（很容易写反：`[B, 1, T_new, 1]` 而不是 `[B, 1, 1, T_total]`），于是真实查询仍会读到填充键；
# * **不处理读不到键的行**：掩码都正确，只是去掉了 `guard_empty_rows`。
#
# 第三个版本说明了两种掩码为什么要分开：在预填充时把它们合成一个方阵，键和查询就很容易弄混。四个版本都必须通不过判据，而且只有最后一个会产生 NaN。

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
say_table([[f"`{name}`", f"{r['max_abs_logit_err']:.3e}".replace("nan", "NaN"), f"`{r['tokens_identical']}`", f"`{r['finite']}`", f"`{not r['passed']}`"]
           for name, r in PADDING_CONTROL_RUNS.items()],
          en=["broken variant", "max abs logit error", "tokens identical", "finite", "caught"],
          zh=["改坏的版本", "logits 的最大绝对误差", "token 一致", "数值有限", "查出"])
assert not any(r["passed"] for r in PADDING_CONTROL_RUNS.values())
assert {name for name, r in PADDING_CONTROL_RUNS.items() if not r["finite"]} == {"no_empty_row_guard"}

# %% [markdown] lang="en"
# Where does the NaN of the last control come from? Forward hooks on the two blocks catch their outputs
# during the prefill. After the first block, NaN sits exactly at the padding positions and every real
# position is finite. The second block reads those positions' K and V with weight 0, and after it every
# position of the two padded rows is NaN, the real ones included. The unpadded row stays finite throughout.

# %% [markdown] lang="zh"
# 最后一个负对照的 NaN 是从哪里来的？在两个 Transformer 块上注册前向钩子，截取预填充时它们的输出。经过第一层，NaN 恰好出现在所有填充位上，真实位置全都是有限值。第二层以权重 0 读取了这些位置的 K 和 V，经过它之后，两个有填充的行在每个位置上都变成了 NaN，真实位置也不例外。没有填充的那一行始终是有限值。

# %%
block_outputs = []
handles = [block.register_forward_hook(lambda module, args, out: block_outputs.append(out[0])) for block in model.blocks]
try:
    with torch.inference_mode():
        padded_forward(model, ids, key_mask, None, PADDING_CONTROLS["no_empty_row_guard"])
finally:
    for handle in handles:
        handle.remove()
after_block_1, after_block_2 = block_outputs                           # [B, T, width], [B, T, width]
nan_1 = after_block_1.isnan().any(dim=-1)                               # [B, T]
nan_2 = after_block_2.isnan().any(dim=-1)
say_table([[str(row), str(int((~key_mask[row]).sum())), str(int(nan_1[row].sum())), str(int(nan_2[row][key_mask[row]].sum()))]
           for row in range(len(PROMPTS))],
          en=["row", "padding slots", "NaN positions after block 1", "NaN real positions after block 2"],
          zh=["行", "填充位数", "第一层之后的 NaN 位置数", "第二层之后真实位置中的 NaN 数"])
padded_rows = (~key_mask).any(dim=-1, keepdim=True).expand_as(key_mask)
assert torch.equal(nan_1, ~key_mask) and torch.equal(nan_2, padded_rows)
