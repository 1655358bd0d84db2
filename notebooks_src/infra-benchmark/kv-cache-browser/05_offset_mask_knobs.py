# %% [markdown] lang="en"
# ## 5. Try it: history length and chunk length
#
# The next cell has two knobs at the top: `HISTORY`, the number of positions already in the cache
# (`P`), and `CHUNK`, the number of new tokens in this call (`C`). Change them and run the cell
# again; section 6 uses the same two values, so run it afterwards too. The left grid is the offset
# mask, the right one the upper-left triangle.
#
# The assertions hold for any `HISTORY ≥ 0` and `CHUNK ≥ 1`: the grid has `C` rows and `P + C`
# columns; query `i` reads exactly `P + i + 1` keys; the last query reads every key; no query reads a
# key after its own position; and the two masks agree only when the cache is empty.

# %% [markdown] lang="zh"
# ## 5. 动手试试：历史长度与分块长度
#
# 下一个单元格顶部有两个可调参数：`HISTORY` 是缓存中已有的位置数（`P`），`CHUNK` 是本次调用送入的新 token 数（`C`）。修改它们后重新运行这个单元格；第 6 节沿用同样的两个值，所以接着把第 6 节也运行一遍。左边的网格是带偏移的掩码，右边是左上角三角形。
#
# 对任意 `HISTORY ≥ 0`、`CHUNK ≥ 1`，断言都应成立：网格有 `C` 行、`P + C` 列；查询 `i` 恰好能读取 `P + i + 1` 个键；最后一个查询能读取全部键；任何查询都读不到自己位置之后的键；只有缓存为空时，两种掩码才一致。

# %%
# [en] P: positions already in the cache; C: new tokens in this call.
# [zh] P：缓存中已有的位置数；C：本次调用送入的新 token 数。
HISTORY = 4
CHUNK = 2

# [en] Out-of-range knobs stop the cell; say() explains why, in the notebook's language.
# [zh] 参数超出范围时，单元格会停下来，并用 say() 以笔记本的语言说明原因。
if HISTORY < 0 or CHUNK < 1:
    say(en=f"`HISTORY` must be at least 0 and `CHUNK` at least 1 (they are {HISTORY} and {CHUNK}).",
        zh=f"`HISTORY` 至少为 0，`CHUNK` 至少为 1（现在分别是 {HISTORY} 和 {CHUNK}）。")
    raise ValueError(f"HISTORY = {HISTORY}, CHUNK = {CHUNK}")
if HISTORY + CHUNK > MAX_POS:
    say(en=f"The toy has position embeddings for {MAX_POS} positions: `HISTORY + CHUNK` must not exceed {MAX_POS}.",
        zh=f"玩具模型只有 {MAX_POS} 个位置的位置嵌入：`HISTORY + CHUNK` 不能超过 {MAX_POS}。")
    raise ValueError(f"HISTORY + CHUNK = {HISTORY + CHUNK} > {MAX_POS}")

good = allowed_keys(HISTORY, CHUNK)
wrong = upper_left_mask(HISTORY, CHUNK)
if HISTORY + CHUNK <= 60 and CHUNK <= 30:
    show_side_by_side(HISTORY, CHUNK)
else:
    say(en="(The grid is too large to print; the assertions below still check it.)",
        zh="（网格太大，不再打印；下面的断言照样会检查它。）")

q_pos = query_positions(HISTORY, CHUNK)
k_pos = np.arange(HISTORY + CHUNK)


def short(values, limit=12):
    values = [int(v) for v in values]
    return str(values) if len(values) <= limit else str(values[:limit])[:-1] + ", ...]"


say_table([[f"`{short(q_pos)}`", f"`{short(good.sum(axis=1))}`", f"`{short(wrong.sum(axis=1))}`"]],
          en=["absolute query positions", "keys readable per query, offset mask",
              "keys readable per query, upper-left triangle"],
          zh=["查询的绝对位置", "每个查询可读取的键数（带偏移的掩码）", "每个查询可读取的键数（左上角三角形）"])

# [en] An assertion evaluates its message only when it fails: say() then explains, in the notebook's
# [en] language, which claim broke.
# [zh] 断言只在失败时才计算它的消息：这时 say() 用笔记本的语言说明是哪条结论不成立。
assert good.shape == wrong.shape == (CHUNK, HISTORY + CHUNK), say(
    en="The grid should have `C` rows and `P + C` columns.", zh="网格应当有 `C` 行、`P + C` 列。")
assert good.sum(axis=1).tolist() == list(range(HISTORY + 1, HISTORY + CHUNK + 1)), say(
    en="Query `i` should read exactly `P + i + 1` keys.", zh="查询 `i` 应当恰好能读取 `P + i + 1` 个键。")
assert wrong.sum(axis=1).tolist() == list(range(1, CHUNK + 1)), say(
    en="The upper-left triangle should let query `i` read `i + 1` keys.",
    zh="左上角三角形应当只让查询 `i` 读取 `i + 1` 个键。")
assert good[-1].all(), say(en="The last query should read every key.", zh="最后一个查询应当能读取全部键。")
assert not (good & (k_pos[None, :] > q_pos[:, None])).any(), say(
    en="No query may read a key after its own position.", zh="任何查询都不能读取自己位置之后的键。")
assert np.array_equal(good, wrong) == (HISTORY == 0), say(
    en="The two masks should agree only when the cache is empty.", zh="只有缓存为空时，两种掩码才应当一致。")
