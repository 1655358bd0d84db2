# %% [markdown] lang="en"
# ## 6. One attention head, with and without the cache
#
# Sections 2 to 4 compared whole layers; this section goes down to one head of width 16 to **count the
# projections** the cache saves, row by row, for the `HISTORY` and `CHUNK` you chose in section 5
# (attention's own work is not counted; exercise 3's answer says in one sentence how it grows).
# Run it again after changing the knobs. This is a separate minimal head, not one of the four of section 2:
# its input `layer_input` is as wide as the head, one row per absolute position, with weights of its own,
# because the saving we count here depends only on how many rows go through the projections. The
# earlier call that filled the cache is shown only by its K and V projections, the ones the cache keeps.
#
# - **Full recomputation** projects all $P + C$ positions to Q, K and V, runs causal attention over
#   all of them, and keeps the last $C$ output rows.
# - **The cached path** projected K and V for the first $P$ positions earlier (that is the cache). In
#   this call it projects only the $C$ new rows, appends their K/V after the cached ones, and lets the
#   $C$ new queries attend with the offset mask.
#
# In FP64 both paths should agree up to rounding (section 2), so the cell compares them with `close`.
# Every projection goes through `project`, which counts the rows it receives: full recomputation sends
# $P + C$ rows, the cached path $C$ in this call (its $P$ history rows went through once, in the earlier
# call that filled the cache). That difference is the work the cache saves, and it starts with the second
# call: full recomputation projects the whole history again on every call, the cached path never projects
# it again (what that adds up to over a whole generation is exercise 3). The cell also runs the cached
# path once more with the upper-left triangle, the negative control, which the same comparison must
# reject whenever the cache is not empty.

# %% [markdown] lang="zh"
# ## 6. 单个注意力头：用缓存与不用缓存
#
# 第 2–4 节比较的是整层；本节回到单个注意力头（每头 16 维），为的是**逐行数出缓存省下的投影**（注意力本身的计算量不在这里统计；练习 3 的答案用一句话说明它如何增长）。`HISTORY` 和 `CHUNK` 沿用你在第 5 节中设定的值；改了参数之后，请把本节再运行一遍。这是一个单独的最小注意力头，不是第 2 节四个头中的某一个：它的输入 `layer_input` 每个绝对位置一行，宽度就等于每头的维度，权重也是它自己的，因为这里统计的节省只取决于有多少行经过投影。先前写入缓存的那次调用只算出了 K、V 投影，也就是缓存保存下来的那部分。
#
# - **完整重算**：把全部 $P + C$ 个位置投影成 Q、K、V，在所有位置上做因果注意力，只保留最后 $C$ 行输出。
# - **缓存路径**：前 $P$ 个位置的 K、V 早先已经算好，这就是缓存。本次调用只投影 $C$ 个新行，把它们的 K/V 拼接在缓存之后，再让这 $C$ 个新查询按带偏移的掩码做注意力。
#
# 在 FP64 精度下，两条路径的结果应当只差舍入误差（见第 2 节），所以单元格用 `close` 比较两者。每次投影都经过 `project`，它统计自己收到了多少行：完整重算送入 $P + C$ 行，缓存路径在本次调用中只送入 $C$ 行（它的 $P$ 个历史行只在先前写入缓存的那次调用中投影过一次）。差额就是缓存省下的计算，而且从第二次调用开始才显现出来：完整重算每次调用都把全部历史行重新投影一遍，缓存路径则不再投影它们（在整个生成过程中这会累积成多大的差距，留给练习 3 去算）。最后，单元格用左上角三角形再跑一次缓存路径，作为负对照：只要缓存不为空，同样的比较就必须查出它。

# %%
def single_head_attention(q, k, v, mask):
    # q: [C, Dh], k, v: [T, Dh], mask: bool [C, T] -> [C, Dh]
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return softmax(np.where(mask, scores, -np.inf)) @ v


# [en] Every projection goes through project(), which counts the rows each path sends through it.
# [zh] 每次投影都经过 project()，它统计每条路径送入的行数。
ROWS_PROJECTED = {"full": 0, "earlier call": 0, "this call": 0}


def project(rows, path, *weights):
    ROWS_PROJECTED[path] += rows.shape[0]
    return [rows @ w for w in weights]


head_rng = np.random.default_rng(SEED + 1)
Wq1, Wk1, Wv1 = (head_rng.normal(scale=1 / math.sqrt(HEAD_DIM), size=(HEAD_DIM, HEAD_DIM)) for _ in range(3))
layer_input = head_rng.normal(size=(HISTORY + CHUNK, HEAD_DIM))       # [P + C, Dh]

# [en] Full recomputation: every position goes through the projections again.
# [zh] 完整重算：每个位置都重新经过投影。
q_all, k_all, v_all = project(layer_input, "full", Wq1, Wk1, Wv1)
full_out = single_head_attention(q_all, k_all, v_all, allowed_keys(0, HISTORY + CHUNK))[HISTORY:]

# [en] Cached path: K/V of the history were stored during an earlier call ...
# [zh] 缓存路径：历史位置的 K/V 在之前的调用中已经存好……
k_cache, v_cache = project(layer_input[:HISTORY], "earlier call", Wk1, Wv1)
# [en] ... so this call projects only the new rows.
# [zh] ……所以这次调用只投影新的行。
chunk = layer_input[HISTORY:]                                          # [C, Dh]
q_new, k_new, v_new = project(chunk, "this call", Wq1, Wk1, Wv1)
k_cat = np.concatenate([k_cache, k_new])                               # [P + C, Dh]
v_cat = np.concatenate([v_cache, v_new])
cached_out = single_head_attention(q_new, k_cat, v_cat, allowed_keys(HISTORY, CHUNK))
wrong_out = single_head_attention(q_new, k_cat, v_cat, upper_left_mask(HISTORY, CHUNK))

say(en=f"$P = {HISTORY}$, $C = {CHUNK}$, head width {HEAD_DIM}, FP64. Rows are counted for this one call "
       f"(full recomputation keeps no cache, hence the dash); exercise 3 counts a whole generation.",
    zh=f"$P = {HISTORY}$，$C = {CHUNK}$，每头 {HEAD_DIM} 维，FP64。行数只统计这一次调用（完整重算不保存缓存，所以记为破折号）；练习 3 统计整个生成过程。")
say_table([["`full_out`", ROWS_PROJECTED["full"], "—"],
           ["`cached_out`", ROWS_PROJECTED["this call"], ROWS_PROJECTED["earlier call"]]],
          en=["path (its output)", "rows projected in this call",
              "rows projected by the earlier call (K, V: the cache)"],
          zh=["路径（其输出）", "本次调用投影的行数", "先前那次调用投影的行数（K、V，即缓存）"])
say_table([["`allowed_keys`", f"{max_abs_err(cached_out, full_out):.2e}"],
           ["`upper_left_mask`", f"{max_abs_err(wrong_out, full_out):.2e}"]],
          en=["mask of the cached path (second row: the control)", "max abs error vs `full_out`"],
          zh=["缓存路径所用的掩码（第二行是负对照）", "与 `full_out` 相比的最大绝对误差"])
# [en] The cache saves the projections of the P history rows: they went through once, earlier ...
# [zh] 缓存省下了 P 个历史行的投影：它们只在先前那次调用中投影过一次……
assert ROWS_PROJECTED == {"full": HISTORY + CHUNK, "earlier call": HISTORY, "this call": CHUNK}
# [en] ... and gives the same output; the upper-left triangle does not, unless the cache is empty.
# [zh] ……而输出相同；左上角三角形则不然，除非缓存为空。
assert close(cached_out, full_out) and close(wrong_out, full_out) == (HISTORY == 0)
