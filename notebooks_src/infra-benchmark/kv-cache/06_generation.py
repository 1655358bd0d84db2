# %% [markdown] lang="en"
# ### 6.3 Greedy generation, with and without the cache
#
# So far every continuation was a predetermined stream. A real decoder chooses each next token from the
# logits it has just returned. The loop below is the one you will meet in libraries, reduced to greedy
# decoding (always the most likely token): a **prefill** over the prompt, then one token per step, each
# step feeding only the token just chosen together with the cache the previous call returned. With
# `use_cache=False` the same loop feeds the whole sequence every step instead, the full recomputation.
#
# The batch holds 2 prompts of 8 tokens each (the first 8 tokens of both stream rows), and each run
# generates 40 tokens. The two runs must choose the same tokens, and the logits that every step chose
# from must agree within the FP32 tolerance above. Equal tokens alone would be the weak test of
# matching argmax again, so we also look at how close the decision was: at every step the gap between
# the best and the second-best logit must be far larger than the difference between the two runs,
# otherwise equal tokens could be luck.

# %% [markdown] lang="zh"
# ### 6.3 贪心生成：用缓存与不用缓存
#
# 到目前为止，续写的 token 都来自预先确定的序列。真正的解码器要根据刚返回的 logits 选出下一个 token。下面的循环就是各种库里常见的写法，只是简化成了贪心解码（每次都选概率最大的 token）：先对提示做一次**预填充**，然后每步生成一个 token；每一步只送入刚选出的 token，以及上一次调用返回的缓存。当 `use_cache=False` 时，同一个循环每一步都改为把整个序列重新送入，也就是完整重算。
#
# batch 中有 2 个提示，每个 8 个 token（取序列两行各自的前 8 个 token），每次运行生成 40 个 token。两次运行必须选出相同的 token，而且每一步用来做选择的 logits 必须在上面的 FP32 容差内一致。只看 token 是否相同，又回到了只比较 argmax 的弱检验，所以我们还要看每次选择有多大把握：每一步 logits 中最大值与次大值之差（选择的余量）都必须远大于两次运行之间的差异，否则 token 相同可能只是运气。

# %%
GEN_PROMPT_LEN, GEN_TOKENS = 8, 40
GEN_PROMPTS = STREAM[:, :GEN_PROMPT_LEN]                       # [2, 8]


@torch.inference_mode()
def greedy_generate(model: CacheDecoder, prompt: torch.Tensor, new_tokens: int, use_cache: bool = True):
    # [en] The first call is the prefill: the whole prompt.
    # [zh] 第一次调用就是预填充：送入整个提示。
    ids, cache, step_input = prompt, None, prompt
    chosen_logits = []
    for _ in range(new_tokens):
        if use_cache:
            logits, cache = model(step_input, cache)            # [B, T_new, vocab]
        else:
            logits, _ = model(ids)                              # [B, T, vocab]
        next_logits = logits[:, -1]                             # [B, vocab]
        next_id = next_logits.argmax(dim=-1, keepdim=True)      # [B, 1]
        ids = torch.cat((ids, next_id), dim=1)
        step_input = next_id
        chosen_logits.append(next_logits)
    return ids[:, prompt.shape[1]:], torch.stack(chosen_logits, dim=1)   # [B, G], [B, G, vocab]


GEN_CACHED, GEN_CACHED_LOGITS = greedy_generate(model, GEN_PROMPTS, GEN_TOKENS, use_cache=True)
GEN_FULL, GEN_FULL_LOGITS = greedy_generate(model, GEN_PROMPTS, GEN_TOKENS, use_cache=False)
for row in range(GEN_PROMPTS.shape[0]):
    print(f"GEN_PROMPTS[{row}] ", GEN_PROMPTS[row].tolist())
    print(f"GEN_CACHED[{row}]  ", GEN_CACHED[row].tolist())
    print(f"GEN_FULL[{row}]    ", GEN_FULL[row].tolist())

# %% [markdown] lang="en"
# With random weights the two rows may fall into the same tokens (an untrained model tends to drift into a
# loop that depends little on its prompt; the cell says from which index); to show that this is not one
# row leaking into the other (a leak the grid of 6.2 could not see, as both paths would share it), each prompt is generated alone, in a batch of one, and must get exactly its batch row's
# tokens; the rows' different first tokens are the control.

# %% [markdown] lang="zh"
# 权重随机时，两行生成的 token 可能从某处起变得完全相同（未经训练的模型容易陷入一个与提示关系不大的循环；下面的单元格会给出下标）。为了说明这不是一行的内容漏进了另一行（6.2 的网格看不出这种混杂，因为两条路径会同样混杂），下面把每个提示单独生成一次（batch 为 1），它必须与 batch 中对应的行逐个 token 相同；两行的第一个 token 各不相同，这就是对照：它表明两行确实是不同的序列。

# %%
ALONE = [greedy_generate(model, GEN_PROMPTS[row:row + 1], GEN_TOKENS)[0][0] for row in range(GEN_PROMPTS.shape[0])]
# [en] Token ids are integers: each row alone must match its row of the batch exactly.
# [zh] token ID 是整数：每一行单独生成的结果必须与它在 batch 中的那一行完全相同。
assert all(torch.equal(alone, GEN_CACHED[row]) for row, alone in enumerate(ALONE))
assert GEN_CACHED[0, 0] != GEN_CACHED[1, 0]
same = (GEN_CACHED[0] == GEN_CACHED[1]).tolist()
# [en] The first index from which the two rows agree to the end.
# [zh] 两行从这个下标起一直相同，直到结尾。
SHARED_TAIL_FROM = len(same) - same[::-1].index(False)
say(en=f"Each of the {len(ALONE)} rows generated alone matches its batch row token for token; "
       + (f"the rows share their tokens from index {SHARED_TAIL_FROM} on." if SHARED_TAIL_FROM < len(same)
          else "the rows' last tokens differ."),
    zh=f"{len(ALONE)} 行单独生成的结果都与 batch 中对应的行逐个 token 相同；"
       + (f"两行从下标 {SHARED_TAIL_FROM} 起 token 相同。" if SHARED_TAIL_FROM < len(same) else "两行的最后一个 token 不同。"))

# %% [markdown] lang="en"
# The checks: the very same 40 tokens in both runs (cached and full) for each row, logits within tolerance at every step,
# and a decision margin that dwarfs the difference. A negative control completes the picture: with the
# upper-left mask swapped in through the hook, the cached run reads the wrong keys and the comparison
# fails. (The run without a cache has no past, and without a cache the two masks are the same triangle,
# as section 3 showed: the hook leaves that run correct.)

# %% [markdown] lang="zh"
# 接下来的检查包括：对每一行，两次运行（用缓存与不用缓存）生成了完全相同的 40 个 token；每一步的 logits 都在容差之内；选择的余量远大于两次运行的差异。最后再加一个负对照：通过钩子换上左上角三角形掩码后，用缓存的运行读错了键，比较随即失败。（不用缓存的运行没有缓存可读；第 3 节已经说明，没有缓存时两种掩码是同一个三角形，所以换上这个钩子后它仍然正确。）

# %%
GEN_TOL = TOLERANCE[torch.float32]


def compare_generations(cached, cached_logits, full, full_logits) -> dict:
    top2 = full_logits.topk(2, dim=-1).values                   # [B, G, 2]
    return {
        "tokens_equal": bool(torch.equal(cached, full)),
        "max_abs_logit_err": max_abs_err(cached_logits, full_logits),
        "min_top2_margin": (top2[..., 0] - top2[..., 1]).min().item(),
        "logits_close": close(cached_logits, full_logits),
    }


GENERATION = compare_generations(GEN_CACHED, GEN_CACHED_LOGITS, GEN_FULL, GEN_FULL_LOGITS)
# [en] Negative control: the cached run with the upper-left mask.
# [zh] 负对照：缓存路径换上左上角三角形掩码。
with model.hooks(mask_fn=local_triangle_mask):
    broken_tokens, broken_logits = greedy_generate(model, GEN_PROMPTS, GEN_TOKENS, use_cache=True)
GENERATION_BROKEN = compare_generations(broken_tokens, broken_logits, GEN_FULL, GEN_FULL_LOGITS)

say_table(
    [["`use_cache=True`", f"`{GENERATION['tokens_equal']}`", f"{GENERATION['max_abs_logit_err']:.3e}",
      f"`{GENERATION['logits_close']}`"],
     ["`use_cache=True`, `local_triangle_mask`", f"`{GENERATION_BROKEN['tokens_equal']}`",
      f"{GENERATION_BROKEN['max_abs_logit_err']:.3e}", f"`{GENERATION_BROKEN['logits_close']}`"]],
    en=["run, compared with `use_cache=False`", f"same {GEN_TOKENS} tokens", "max abs logit error", "within tolerance"],
    zh=["运行方式（与 `use_cache=False` 比较）", f"{GEN_TOKENS} 个 token 相同", "logits 最大绝对误差", "在容差内一致"],
)
say(en=f"The closest decision had a margin of {GENERATION['min_top2_margin']:.3e} between the best and the "
       f"second-best logit, {GENERATION['min_top2_margin'] / GENERATION['max_abs_logit_err']:,.0f} times the "
       f"largest difference between the two runs.",
    zh=f"最接近的一次选择，最大与次大 logit 之间的余量为 {GENERATION['min_top2_margin']:.3e}，"
       f"是两次运行之间最大绝对误差的 {GENERATION['min_top2_margin'] / GENERATION['max_abs_logit_err']:,.0f} 倍。")
assert GENERATION["tokens_equal"] and GENERATION["logits_close"]
assert GENERATION["min_top2_margin"] > 100 * GENERATION["max_abs_logit_err"] and not GENERATION_BROKEN["logits_close"]
