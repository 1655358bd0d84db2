# %% [markdown] lang="en"
# ## 5. Try it: history length and chunk length
#
# The next cell has two knobs at the top: `HISTORY`, the number of positions already in the cache
# ($P$), and `CHUNK`, the number of new tokens in this call ($C$). Change them and run the cell
# again; section 6 uses the same two values, so run it afterwards too. The cell counts the keys each
# query may read and, for values other than section 4's, draws that section's figure again (when it fits
# on the screen).
#
# Two claims hold for any `HISTORY ≥ 0` and `CHUNK ≥ 1`, and the cell checks them: the queries read
# $P + 1, P + 2, \dots, P + C$ keys, so the last query reads every key; and the two alignments agree
# only when the cache is empty. If one fails, the cell says which.
#
# (The folded helper cell first checks the knobs' range and shortens long lists for the table.)

# %% [markdown] lang="zh"
# ## 5. 动手试试：历史长度与分块长度
#
# 下一个单元格顶部有两个可调参数：`HISTORY` 是缓存中已有的位置数（$P$），`CHUNK` 是本次调用送入的新 token 数（$C$）。修改它们后重新运行这个单元格；第 6 节沿用同样的两个值，所以接着把第 6 节也运行一遍。单元格统计每个查询可以读取的键数；设定的值与第 4 节不同时，还会按你的值重画第 4 节的图（只要屏幕放得下）。
#
# 对任意 `HISTORY ≥ 0`、`CHUNK ≥ 1`，下面两条结论都成立，单元格会逐一检查：各个查询依次能读取 $P + 1, P + 2, \dots, P + C$ 个键，所以最后一个查询能读取全部键；只有缓存为空时，两种对齐方式才一致。如果某条不成立，单元格会指出是哪一条。
#
# （下面折叠起来的辅助单元格负责检查参数范围，并截短表格中过长的列表。）

# %% tags=["hide-input"]
# [en] Out-of-range knobs stop the cell; say() explains why, in the notebook's language.
# [zh] 参数超出范围时，单元格会停下来，并用 say() 以笔记本的语言说明原因。
def check_knobs(history, chunk):
    if history < 0 or chunk < 1:
        say(en=f"`HISTORY` must be at least 0 and `CHUNK` at least 1 (they are {history} and {chunk}).",
            zh=f"`HISTORY` 至少为 0，`CHUNK` 至少为 1（现在分别是 {history} 和 {chunk}）。")
        raise ValueError(f"HISTORY = {history}, CHUNK = {chunk}")
    if history + chunk > MAX_POS:
        say(en=f"The toy has position embeddings for {MAX_POS} positions: `HISTORY + CHUNK` must not exceed {MAX_POS}.",
            zh=f"玩具模型只有 {MAX_POS} 个位置的位置嵌入：`HISTORY + CHUNK` 不能超过 {MAX_POS}。")
        raise ValueError(f"HISTORY + CHUNK = {history + chunk} > {MAX_POS}")


def short(values, limit=12):
    values = [int(v) for v in values]
    return str(values) if len(values) <= limit else str(values[:limit])[:-1] + ", ...]"

# %%
# [en] P: positions already in the cache; C: new tokens in this call.
# [zh] P：缓存中已有的位置数；C：本次调用送入的新 token 数。
HISTORY = 4
CHUNK = 2
check_knobs(HISTORY, CHUNK)

good = allowed_keys(HISTORY, CHUNK)
wrong = upper_left_mask(HISTORY, CHUNK)

say_table([[f"`{short(HISTORY + np.arange(CHUNK))}`", f"`{short(good.sum(axis=1))}`", f"`{short(wrong.sum(axis=1))}`"]],
          en=["absolute query positions", "keys readable per query, lower-right (ours)",
              "keys readable per query, upper-left"],
          zh=["查询的绝对位置", "每个查询可读取的键数（右下角对齐，我们的掩码）", "每个查询可读取的键数（左上角对齐）"])

# [en] The two claims; if one fails, say which in the notebook's language, then stop.
# [zh] 两条结论；若有一条不成立，先用笔记本的语言说明是哪一条，再停下来。
if good.sum(axis=1).tolist() != list(range(HISTORY + 1, HISTORY + CHUNK + 1)):
    say(en="Query $i$ should read exactly $P + i + 1$ keys.", zh="查询 $i$ 应当恰好能读取 $P + i + 1$ 个键。")
    raise AssertionError("good.sum(axis=1)")
if np.array_equal(good, wrong) != (HISTORY == 0):
    say(en="The two alignments should agree only when the cache is empty.", zh="只有缓存为空时，两种对齐方式才应当一致。")
    raise AssertionError("np.array_equal(good, wrong)")

# [en] The figure only for values other than section 4's, which already shows its own.
# [zh] 只在参数与第 4 节不同时画图：第 4 节的图已经画出了它自己的那组值。
figure = None
if (HISTORY, CHUNK) == (PAST, token_ids.shape[1] - PAST):
    say(en="These are the values of section 4, whose figure shows this grid: change a knob to draw another.",
        zh="这正是第 4 节的取值，那里的图画的就是这个网格：改一个参数，就会画出新的图。")
else:
    if HISTORY + CHUNK <= 120 and CHUNK <= 40:
        figure = MaskFigure(HISTORY, CHUNK)
    else:
        say(en="(The grid is too large to draw; the assertions above still checked it.)",
            zh="（网格太大，不再画出；上面的断言照样检查了它。）")
    say(en="Then run section 6: it uses the same two values.",
        zh="接着运行第 6 节：它沿用同样的两个值。")
figure
