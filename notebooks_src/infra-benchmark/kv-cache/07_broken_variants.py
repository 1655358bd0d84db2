# %% [markdown] lang="en"
# ## 7. Broken variants (negative controls): do the checks catch real mistakes?
#
# A check that has never failed proves little. We inject four bugs into the **same** model (the first
# three through its hooks, the fourth through a wrapper) and run them through the **same**
# `check_equivalence`. Two are classic:
#
# * **positions restart at zero** (`restart_positions`): every call numbers its tokens 0, 1, …, as if each chunk began a new sequence;
# * **mask without the offset** (`local_triangle_mask`): the upper-left triangle of section 3.
#
# A third, subtler bug shows why multi-token chunks matter: **no mask once a cache exists**
# (`no_mask_with_cache`: the mask is applied during prefill only). With one new token per call that is
# harmless, since a single new query may read every key (the keys hold only past and current
# positions). In a multi-token chunk, however, it lets a query read positions of the same chunk that
# lie in its future.
#
# The fourth breaks the first convention, layer ownership: **swapped layer caches**
# (`swapped_layer_caches`): every call hands layer 0's cache entry to layer 1 and layer 1's to layer 0.
#
# Each variant runs on the six-token example (prefix 4, then 2 tokens, as in section 2) and on the
# stream of section 6 with chunks of 1, 2 and 5 (batch 1, FP32).

# %% [markdown] lang="zh"
# ## 7. 故意改坏的版本（负对照）：检查能否查出真实的错误？
#
# 一项从未失败过的检查，说明不了多少问题。我们把四个错误注入**同一个**模型（前三个通过它的钩子，第四个通过一个包装类），再交给**同一个** `check_equivalence` 检查。其中两个是典型错误：
#
# * **位置从零重新开始**（`restart_positions`）：每次调用都把自己的 token 编号为 0、1、……，仿佛每个分块都是一条新序列的开头；
# * **掩码缺少偏移**（`local_triangle_mask`）：即第 3 节中的左上角三角形。
#
# 第三个错误更隐蔽，它说明了为什么必须测试含多个 token 的分块：**一旦有了缓存就不再加掩码**（`no_mask_with_cache`：只在预填充时使用掩码）。每次只输入一个新 token 时，这样做并无害处，因为键里只有过去和当前的位置，单个新查询本来就可以读取全部键。但在含多个 token 的分块里，它会让查询读到同一分块中位于自己“未来”的位置。

第四个错误破坏的是第一个约定，即缓存项归哪一层所有：**两层的缓存互换**（`swapped_layer_caches`）：每次调用都把第 0 层的缓存项交给第 1 层，把第 1 层的交给第 0 层。
#
# 每个版本都在两种输入上运行：六个 token 的例子（与第 2 节一样，先预填充 4 个，再输入 2 个），以及第 6 节的序列按分块长度 1、2、5 切分的情形（batch 为 1，FP32）。

# %%
# [en] WRONG on purpose: every call starts counting at 0.
# [zh] 故意写错：每次调用都从 0 开始编号。
def restart_positions(past_len: int, new_len: int) -> torch.Tensor:
    return torch.arange(new_len)


# [en] WRONG on purpose: causal mask during prefill, everything visible once a cache exists.
# [zh] 故意写错：预填充时使用因果掩码，一旦有了缓存就什么都能看到。
def mask_only_without_cache(past_len: int, new_len: int) -> torch.Tensor:
    if past_len == 0:
        return causal_mask(0, new_len)
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool)


# [en] WRONG on purpose: layer l receives the cache entry of the other layer (the list reversed). Only the
# [en] cache passed in is reversed, so the cache it returns holds, per layer, K/V built on wrong-layer data.
# [zh] 故意写错：第 l 层拿到的是另一层的缓存项（列表被反转）。只有传入的缓存被反转，所以它返回的缓存里，
# [zh] 每一层的 K/V 都是在另一层的数据上算出来的。
class SwappedLayerCaches(torch.nn.Module):
    def __init__(self, model: CacheDecoder):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, cache=None):
        return self.model(ids, None if cache is None else cache[::-1])


VARIANTS = {
    "restart_positions": {"positions_fn": restart_positions},
    "local_triangle_mask": {"mask_fn": local_triangle_mask},
    "no_mask_with_cache": {"mask_fn": mask_only_without_cache},
}
SIX_TOKENS = torch.tensor([IDS])
# [en] (name of the input, the input, chunk lengths): the six tokens as 4 + 2, then the stream in chunks of 1, 2 and 5.
# [zh] （输入的名字、输入、分块长度）：六个 token 按 4 + 2 切分，然后是序列按分块长度 1、2、5 切分。
SCENARIOS = [("SIX_TOKENS", SIX_TOKENS, [4, 2])] + [("STREAM", STREAM, c) for c in (1, 2, 5)]


def run_variant(net, hooks: dict) -> list[dict]:
    # [en] The hooks go on `model`; `net` is `model` itself or a wrapper that calls it (SwappedLayerCaches).
    # [zh] 钩子装在 `model` 上；`net` 要么就是 `model`，要么是调用它的包装（SwappedLayerCaches）。
    with model.hooks(**hooks):
        return [{"scenario": name, **check_equivalence(net, stream, 1, chunk)} for name, stream, chunk in SCENARIOS]


CONTROL_RUNS = ({"correct": run_variant(model, {})} | {name: run_variant(model, hooks) for name, hooks in VARIANTS.items()}
                | {"swapped_layer_caches": run_variant(SwappedLayerCaches(model), {})})
say_table([[f"`{variant}`", f"`{r['scenario']}`, {r['chunk']}", f"{r['max_abs_logit_err']:.3e}", f"`{r['passed']}`"]
           for variant, runs in CONTROL_RUNS.items() for r in runs],
          en=["variant", "input, chunk length", "max abs logit error", "passed"],
          zh=["版本", "输入，分块长度", "logits 最大绝对误差", "通过"])

# %% [markdown] lang="en"
# The correct model passes every scenario. Resetting the positions and dropping the offset are caught
# everywhere, including the one-token steps: with one new token, the upper-left triangle lets it see
# key 0 only. Swapping the layers' caches is caught everywhere too: from the second call on, each
# layer attends to keys and values the other layer projected. Dropping the mask after prefill passes
# the one-token run (its errors are rounding noise) and is caught only once a chunk holds several tokens. The cell below writes this prediction
# down, scenario by scenario, and asserts that the table above matches it.

# %% [markdown] lang="zh"
# 正确的模型通过了所有场景。位置从零重新开始、掩码缺少偏移这两个错误在所有场景中都被查了出来，包括每次只输入一个 token 的情形：只有一个新 token 时，左上角三角形只让它看到键 0。两层缓存互换也在所有场景中被查了出来：从第二次调用起，每一层关注的都是另一层投影出的键和值。预填充之后丢掉掩码的版本在逐 token 运行时能够通过（误差只是舍入噪声），直到一个分块里有多个 token 时才会被查出。下面的单元格把这个预测逐个场景写下来，并断言上表与它一致。

# %%
# [en] The prediction, in the order of SCENARIOS: SIX_TOKENS as 4 + 2, then STREAM in chunks of 1, 2, 5.
# [en] True = passes the equivalence check.
# [zh] 预测结果，顺序与 SCENARIOS 相同：SIX_TOKENS 按 4 + 2 切分，然后是 STREAM 按分块长度 1、2、5 切分。
# [zh] True 表示通过等价性检查。
PREDICTED = {
    "correct": [True, True, True, True],
    "restart_positions": [False, False, False, False],
    "local_triangle_mask": [False, False, False, False],
    "no_mask_with_cache": [False, True, False, False],
    "swapped_layer_caches": [False, False, False, False],
}
assert {variant: [r["passed"] for r in runs] for variant, runs in CONTROL_RUNS.items()} == PREDICTED

say(en="Every broken variant was caught. Largest logit error on the six-token example (4 + 2 tokens): "
       + ", ".join(f"`{name}` {runs[0]['max_abs_logit_err']:.3e}" for name, runs in CONTROL_RUNS.items() if name != "correct") + ".",
    zh="每个改坏的版本都被查出来了。六个 token 的例子（4 + 2 个 token）上 logits 的最大绝对误差："
       + "，".join(f"`{name}` {runs[0]['max_abs_logit_err']:.3e}" for name, runs in CONTROL_RUNS.items() if name != "correct") + "。")
