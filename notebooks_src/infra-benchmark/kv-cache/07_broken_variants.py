# %% [markdown] lang="en"
# ## 7. Broken variants (negative controls): do the checks catch real mistakes?
#
# A check that has never failed proves little. We inject two classic bugs into the **same** model
# through its hooks and run them through the **same** `check_equivalence`:
#
# * **positions restart at zero:** every call numbers its tokens 0, 1, …, as if each chunk began a new sequence;
# * **mask without the offset:** the upper-left (local) triangle of section 3.
#
# A third, subtler bug shows why multi-token chunks matter: **no mask once a cache exists** (the mask
# is applied during prefill only). With one new token per call that is harmless — a single new query
# may read every key, because the keys hold only past and current positions — but in a multi-token
# chunk it lets a query read positions of the same chunk that lie in its future.
#
# Each variant runs on the six-token example (prefix 4, then 2 tokens, as in section 2) and on the
# stream of section 6 with chunks of 1, 2 and 5 (batch 1, FP32).

# %% [markdown] lang="zh"
# ## 7. 故意改坏的版本（负对照）：检查能否发现真实的错误？
#
# 一项从未失败过的检查，说明不了多少问题。我们通过钩子把两个典型错误注入**同一个**模型，再用**同一个** `check_equivalence` 来检查：
#
# * **位置从零重新开始**：每次调用都从 0 开始给自己的 token 编号（0、1、……），仿佛每一块都是一条新序列的开头；
# * **掩码缺少偏移**：即第 3 节中左上角的（局部）三角形。
#
# 第三个错误更隐蔽，它说明了为什么必须测试多 token 的块：**一旦有了缓存就不再加掩码**（只在预填充时使用掩码）。每次只输入一个新 token 时，这样做并无害处：键里只有过去和当前的位置，单个新查询本来就可以读取全部键；但在含多个 token 的块里，它会让查询读到同一块中位于自己“未来”的位置。
#
# 每个版本都在两种输入上运行：六个 token 的例子（先预填充 4 个，再输入 2 个，同第 2 节），以及第 6 节的序列按块长 1、2、5 切分（batch 1，FP32）。

# %%
def restart_positions(past_len: int, new_len: int) -> torch.Tensor:
    """WRONG on purpose: every call starts counting at 0."""
    return torch.arange(new_len)


def mask_only_without_cache(past_len: int, new_len: int) -> torch.Tensor:
    """WRONG on purpose: causal mask during prefill, everything visible once a cache exists."""
    if past_len == 0:
        return causal_mask(0, new_len)
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool)


VARIANTS = {
    "restart_positions": {"positions_fn": restart_positions},
    "local_triangle_mask": {"mask_fn": local_triangle_mask},
    "no_mask_with_cache": {"mask_fn": mask_only_without_cache},
}
SIX_TOKENS = torch.tensor([IDS])
SCENARIOS = [("six tokens 4+2", SIX_TOKENS, [4, 2])] + [(f"stream, chunk {c}", STREAM, c) for c in (1, 2, 5)]


def run_variant(model: CacheDecoder, hooks: dict) -> list[dict]:
    with model.hooks(**hooks):
        return [{"scenario": name, **check_equivalence(model, stream, 1, chunk)} for name, stream, chunk in SCENARIOS]


CONTROL_RUNS = {"correct": run_variant(model, {})} | {name: run_variant(model, hooks) for name, hooks in VARIANTS.items()}
print(f"{'variant':<21}{'scenario':<18}{'max |logit err|':>16}  passed")
for variant, runs in CONTROL_RUNS.items():
    for r in runs:
        print(f"{variant:<21}{r['scenario']:<18}{r['max_abs_logit_err']:>16.3e}  {r['passed']}")

# %% [markdown] lang="en"
# The correct model passes every scenario. Resetting the positions and dropping the offset are caught
# everywhere, including the one-token steps: with one new token, the upper-left triangle lets it see
# key 0 only. Dropping the mask after prefill passes the one-token run (its errors are rounding
# noise) and is caught only once a chunk holds several tokens. The assertions below pin this down.

# %% [markdown] lang="zh"
# 正确的模型通过了所有场景。位置归零和缺少偏移这两个错误在所有场景中都能查出来，包括每次只输入一个 token 的情形：只有一个新 token 时，左上角三角形只让它看到键 0。预填充之后丢掉掩码的版本在逐 token 运行时能够通过（误差只是舍入噪声），直到一块里有多个 token 时才会暴露。下面的断言把这些结论固定下来。

# %%
def outcome(variant: str, scenario: str) -> dict:
    return next(r for r in CONTROL_RUNS[variant] if r["scenario"] == scenario)


assert all(r["passed"] for r in CONTROL_RUNS["correct"])
for variant in ("restart_positions", "local_triangle_mask"):
    assert not any(r["passed"] for r in CONTROL_RUNS[variant]), variant
assert all(local_triangle_mask(past, 1).tolist() == [[True] + [False] * past]  # one new token sees key 0 only
           for past in range(1, STREAM_LEN))
assert outcome("no_mask_with_cache", "stream, chunk 1")["passed"]          # a one-token step hides it
for scenario in ("six tokens 4+2", "stream, chunk 2", "stream, chunk 5"):
    assert not outcome("no_mask_with_cache", scenario)["passed"]           # multi-token chunks expose it
assert torch.equal(model.positions_fn(3, 2), torch.tensor([3, 4])) and model.mask_fn is causal_mask   # hooks restored

NEGATIVE_CONTROLS = {}
for variant in VARIANTS:
    runs = CONTROL_RUNS[variant]
    NEGATIVE_CONTROLS[variant] = {
        "max_abs_logit_err": outcome(variant, "six tokens 4+2")["max_abs_logit_err"],
        "detected": not all(r["passed"] for r in runs),
        "scenarios": [{k: r[k] for k in ("scenario", "chunk", "max_abs_logit_err", "max_abs_kv_err", "passed")} for r in runs],
    }
    print(f"{variant:<21} six-token 4+2 max |logit err| = {NEGATIVE_CONTROLS[variant]['max_abs_logit_err']:.3e}, "
          f"detected: {NEGATIVE_CONTROLS[variant]['detected']}")
assert all(control["detected"] for control in NEGATIVE_CONTROLS.values())
