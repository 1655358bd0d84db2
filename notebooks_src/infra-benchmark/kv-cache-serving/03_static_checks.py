# %% [markdown] lang="en"
# **The criteria**, on the padded batch of section 4 with prefill and 20 decode steps, in FP32 and FP64,
# with `T_max = 12 + 20 = 32`, exactly what the run needs, and once more in FP32 with one slot to spare
# (`T_max = 33`):
#
# 1. the logits equal those of the `torch.cat` store within the tolerance of their dtype ($10^{-5}$ in FP32,
#    $10^{-10}$ in FP64), and the greedy tokens are the same. Both stores hand the same values to the same
#    operations, but in different memory layouts: the static store passes a view of its buffer, whose heads
#    lie `T_max` slots apart in memory; the `torch.cat` store passes K and V with another stride pattern (in
#    the prefill, the view that `split_heads` returns). By the equality rule of section 4 this asks for the
#    tolerance; the table shows whether this run happened to be bit-exact;
# 2. the buffers' `data_ptr()` never changes across the 21 calls (the `torch.cat` store above is the
#    counterexample: its addresses changed at every call);
# 3. the unused slots, NaN until written, never reach the logits: every logit is finite, and the spare
#    slot of the second store still holds NaN at the end;
# 4. the capacity is exact: the 32 positions fill the buffer to its last slot, and one token more raises the
#    `ValueError` before anything is written.
#
# `check_static` (folded) runs a store and a fresh `torch.cat` store side by side; the cell after it shows
# the result and asserts criteria 1 to 3 and the exact fill.

# %% [markdown] lang="zh"
# **判据**：在第 4 节填充后的 batch 上做预填充和 20 个解码步，FP32 和 FP64 各一遍，`T_max = 12 + 20 = 32`，恰好是这次运行所需的长度；另外在 FP32 下再用一个多出一个槽位的存储对象（`T_max = 33`）运行一遍：
#
# 1. logits 与 `torch.cat` 存储对象的结果在该精度的容差内一致（FP32 为 $10^{-5}$，FP64 为 $10^{-10}$），贪心生成的 token 也相同。两种存储对象把相同的值交给相同的运算，但内存布局不同：静态存储对象交出的是缓冲区的视图，各头在内存中相隔 `T_max` 个槽位；`torch.cat` 存储对象交出的 K 和 V 是另一种跨步方式（预填充时就是 `split_heads` 返回的视图）。按第 4 节的相等规则，这里用容差比较；表中列出本次运行是否恰好逐比特相同；
# 2. 在全部 21 次调用中，缓冲区的 `data_ptr()` 始终不变（上面的 `torch.cat` 存储对象就是反例：它的地址每次调用都会改变）；
# 3. 未使用的槽位在写入之前一直是 NaN，但它们从未进入 logits：所有 logits 都是有限值，第二个存储对象那个空余的槽位到运行结束时仍然是 NaN；
# 4. 容量恰好够用：32 个位置正好填满缓冲区的最后一个槽位；再多一个 token，就在写入任何内容之前抛出上面所说的 `ValueError`。
#
# `check_static`（已折叠）让一个存储对象与一个新的 `torch.cat` 存储对象并排运行；再下一个单元格列出结果，并断言判据 1 到 3 以及缓冲区恰好填满。

# %% tags=["hide-input"]
T_MAX = max(PROMPT_LENGTHS) + DECODE_STEPS


def check_static(store) -> dict:
    # [en] The padded batch through `store` and through a fresh torch.cat store, in the store's dtype.
    # [zh] 让填充后的 batch 分别经过 `store` 和一个新的 torch.cat 存储对象，精度与 `store` 相同。
    dtype = store.k[0].dtype
    net = in_dtype(model, dtype)
    reference = generate_with_store(net, PROMPTS, CatStore(cfg, len(PROMPTS)))
    out = generate_with_store(net, PROMPTS, store)
    return compare(out["logits"], reference["logits"]) | {
        "dtype": DTYPE_NAME[dtype],
        "t_max": store.max_len,
        "tokens_identical": out["tokens"] == reference["tokens"],
        "pointers_fixed": all(p == out["pointers"][0] for p in out["pointers"]),
        "calls": len(out["pointers"]),
        "length": store.length,
        "unused_slots_nan": all(bool(t[:, :, store.length:].isnan().all()) for t in store.k + store.v),
        "store": store,
    }


def show_static(runs):
    say_table([[r["dtype"].upper(), str(r["t_max"]), f"{r['max_abs_logit_err']:.1e}", f"`{r['close'] and r['tokens_identical']}`",
                f"`{r['bit_exact']}`", f"`{r['pointers_fixed']}`", f"`{r['finite']}`", str(r["t_max"] - r["length"]),
                f"`{r['unused_slots_nan']}`"] for r in runs.values()],
              en=["dtype", "`T_max`", "max abs logit error vs `torch.cat`", "within tolerance, same tokens", "bit-exact on this run",
                  "`data_ptr()` fixed", "logits finite", "slots left", "they still hold NaN"],
              zh=["精度", "`T_max`", "与 `torch.cat` 相比 logits 的最大绝对误差", "在容差之内且 token 相同", "本次运行逐比特相同",
                  "`data_ptr()` 不变", "logits 有限", "剩余槽位数", "它们仍为 NaN"])

# %%
STATIC = {DTYPE_NAME[d]: check_static(StaticStore(cfg, len(PROMPTS), T_MAX, d)) for d in TOLERANCE}
STATIC["fp32_spare_slot"] = check_static(StaticStore(cfg, len(PROMPTS), T_MAX + 1))
show_static(STATIC)
# [en] The criterion, one line per clause, for every row: within tolerance of `torch.cat` with the same tokens;
# [en] buffers never moved, one call per step; finite logits, the unwritten slots still NaN, the buffer filled exactly to T_max.
# [zh] 判据，每行一条，对每一行结果都成立：与 `torch.cat` 在容差内一致且 token 相同；缓冲区从未移动，每步一次调用；
# [zh] logits 有限，没写过的槽位仍是 NaN，缓冲区恰好写满到 T_max。
for r in STATIC.values():
    assert r["close"] and r["tokens_identical"]
    assert r["pointers_fixed"] and r["calls"] == DECODE_STEPS + 1
    assert r["finite"] and r["unused_slots_nan"] and r["length"] == T_MAX

# %% [markdown] lang="en"
# One token past `T_max`: the prefill writes 12 positions and 20 decode steps fill the buffer to its last
# slot, so a 21st decode step (the 22nd call) does not fit. The full buffer must refuse it itself, with its
# own error, and keep what it holds.

# %% [markdown] lang="zh"
# 超出 `T_max` 一个 token：预填充写入 12 个位置，20 个解码步正好把缓冲区写到最后一个槽位，所以第 21 个解码步（即第 22 次调用）放不下。已经写满的缓冲区必须由存储对象自己拒绝这一步，抛出它自己的错误，并保留已有的内容。

# %%
overflow_store = StaticStore(cfg, len(PROMPTS), T_MAX)
try:
    generate_with_store(model, PROMPTS, overflow_store, steps=DECODE_STEPS + 1)
    OVERFLOW_ERROR = None
except ValueError as error:
    OVERFLOW_ERROR = f"{type(error).__name__}: {error}"
say(en=f"One token past `T_max = {T_MAX}`: `{OVERFLOW_ERROR}`; the store still holds {overflow_store.length} positions.",
    zh=f"超出 `T_max = {T_MAX}` 一个 token：`{OVERFLOW_ERROR}`；存储对象中仍是 {overflow_store.length} 个位置。")
assert OVERFLOW_ERROR is not None and OVERFLOW_ERROR.startswith("ValueError: length + new_len > T_max") and overflow_store.length == T_MAX

# %% [markdown] lang="en"
# **Negative controls.** Two bookkeeping mistakes, each compared with a fresh `torch.cat` store like the
# criterion:
#
# * **write at offset + 1**: new K/V go one slot too far, leaving a hole at the current length
#   (and the attention still reads up to the new end);
# * **reuse without reset**: the store is reused for a second batch (the same three prompts in
#   reverse order) without `reset()`; the new batch starts after the old one, and its queries read the
#   old batch's keys, at positions that continue the old count.
#
# The same reuse with `reset()` comes first in the table: it must pass.

# %% [markdown] lang="zh"
# **负对照**：两种记账错误，都像判据那样与一个新的 `torch.cat` 存储对象比较：
#
# * **在偏移 + 1 处写入**：新的 K/V 往后多偏了一个槽位，在当前长度处留下一个空洞（而注意力仍然读到新的末尾）；
# * **复用时不重置**：把用过的存储对象交给第二个 batch（还是这三个提示，顺序反过来），但没有调用 `reset()`；新 batch 接在旧 batch 之后，它的查询会读到旧 batch 的键，位置也接着旧的计数往下数。
#
# 表中第一行是调用了 `reset()` 的同样的复用，它必须通过。

# %%
class OffByOneStore(StaticStore):
    def write(self, layer, k, v):
        # [en] WRONG on purpose: one slot too far.
        # [zh] 故意写错：多偏了一个槽位。
        self.k[layer][:, :, self.start + 1:self.length + 1] = k
        self.v[layer][:, :, self.start + 1:self.length + 1] = v
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]


def check_reuse_static(reset: bool) -> dict:
    second = PROMPTS[::-1]
    store = StaticStore(cfg, len(PROMPTS), 2 * T_MAX)
    generate_with_store(model, PROMPTS, store)
    if reset:
        store.reset()
    out = generate_with_store(model, second, store)
    reference = generate_with_store(model, second, CatStore(cfg, len(second)))
    return compare(out["logits"], reference["logits"]) | {"tokens_identical": out["tokens"] == reference["tokens"]}


REUSE_WITH_RESET = check_reuse_static(reset=True)
STATIC_CONTROLS = {"write_at_offset_plus_one": check_static(OffByOneStore(cfg, len(PROMPTS), T_MAX)),
                   "reuse_without_reset": check_reuse_static(reset=False)}
say_table([[f"`{name}`", f"{r['max_abs_logit_err']:.3e}".replace("nan", "NaN"), f"`{r['finite']}`", f"`{r['close']}`"]
           for name, r in {"reset()": REUSE_WITH_RESET, **STATIC_CONTROLS}.items()],
          en=["variant", "max abs logit error vs `torch.cat`", "finite", "within tolerance"],
          zh=["版本", "与 `torch.cat` 相比 logits 的最大绝对误差", "数值有限", "在容差之内"])
# [en] reset() passes; the hole lets NaN through; reuse without reset is finite, but wrong.
# [zh] 调用 reset() 的版本通过；空洞让 NaN 传了出去；不重置就复用给出的是有限但错误的数。
assert [(r["close"], r["finite"]) for r in (REUSE_WITH_RESET, *STATIC_CONTROLS.values())] == [(True, True), (False, False), (False, True)]
