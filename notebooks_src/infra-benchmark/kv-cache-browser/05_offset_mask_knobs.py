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
# ## 5. 动手试试：历史长度与块长
#
# 下一个单元格顶部有两个可调参数：`HISTORY` 是缓存中已有的位置数（`P`），`CHUNK` 是本次调用送入的新 token 数（`C`）。修改它们后重新运行这个单元格；第 6 节沿用同样的两个值，所以接着把第 6 节也运行一遍。左边的网格是带偏移的掩码，右边是左上角三角形。
#
# 对任意 `HISTORY ≥ 0`、`CHUNK ≥ 1`，断言都应成立：网格有 `C` 行、`P + C` 列；查询 `i` 恰好能读取 `P + i + 1` 个键；最后一个查询能读取全部键；任何查询都读不到自己位置之后的键；只有缓存为空时，两种掩码才一致。

# %%
HISTORY = 4  # P: positions already in the cache
CHUNK = 2    # C: new tokens in this call

assert HISTORY >= 0 and CHUNK >= 1, "HISTORY must be >= 0 and CHUNK >= 1"
assert HISTORY + CHUNK <= MAX_POS, f"the toy has position embeddings for {MAX_POS} positions"

good = allowed_keys(HISTORY, CHUNK)
wrong = upper_left_mask(HISTORY, CHUNK)
if HISTORY + CHUNK <= 60 and CHUNK <= 30:
    show_side_by_side(HISTORY, CHUNK)
else:
    print("(grid too large to print; the assertions below still check it)")

q_pos = query_positions(HISTORY, CHUNK)
k_pos = np.arange(HISTORY + CHUNK)


def short(values, limit=12):
    values = [int(v) for v in values]
    return str(values) if len(values) <= limit else str(values[:limit])[:-1] + ", ...]"


print(f"\nabsolute query positions:                    {short(q_pos)}")
print(f"keys readable per query, offset mask:        {short(good.sum(axis=1))}")
print(f"keys readable per query, upper-left triangle: {short(wrong.sum(axis=1))}")

assert good.shape == wrong.shape == (CHUNK, HISTORY + CHUNK)
assert good.sum(axis=1).tolist() == list(range(HISTORY + 1, HISTORY + CHUNK + 1))
assert wrong.sum(axis=1).tolist() == list(range(1, CHUNK + 1))
assert good[-1].all()                                  # the last query reads every key
assert not (good & (k_pos[None, :] > q_pos[:, None])).any()  # nobody reads its own future
assert np.array_equal(good, wrong) == (HISTORY == 0)  # they agree only for an empty cache
