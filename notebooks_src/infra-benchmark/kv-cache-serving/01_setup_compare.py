# %% [markdown] lang="en"
# Two more helpers, folded: tools the checks below use, not part of the lesson. `compare` puts a run's
# logits next to a reference's (two lists, one tensor `[positions, vocab]` per sequence) and reports
# the largest absolute error (NaN if a NaN appears: a plain `max()` would skip it), whether they agree
# within the dtype's tolerance, whether they are bit-identical, and whether every logit is finite; two
# empty lists compare as equal, with error 0. `finite_or_none` writes such an error into `results.json`,
# where strict JSON has no NaN: a NaN becomes `null`.

# %% [markdown] lang="zh"
# 再加两个小工具，代码默认折叠：它们是后面各项检查用的工具，不属于本课内容。`compare` 把一次运行的 logits 与参照的 logits 放在一起比较（两组列表，每条序列一个 `[位置数, 词表大小]` 的张量），给出最大绝对误差（只要出现 NaN 就是 NaN，普通的 `max()` 会把 NaN 跳过）、两者是否在该精度的容差内一致、是否逐比特相同，以及所有 logits 是否都是有限值；两组空列表视为相等，误差为 0。`finite_or_none` 把这样的误差写进 `results.json`：严格的 JSON 没有 NaN，所以 NaN 写成 `null`。

# %% tags=["hide-input"]
def compare(got: list, want: list) -> dict:
    errors = [max_abs_err(a, b) if a.shape == b.shape else math.inf for a, b in zip(got, want, strict=True)]
    return {"max_abs_logit_err": float(torch.tensor([0.0, *errors]).max()),
            "close": all(close(a, b) for a, b in zip(got, want)),
            "bit_exact": all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(got, want)),
            "finite": all(bool(torch.isfinite(a).all()) for a in got)}


def finite_or_none(value):
    return float(value) if math.isfinite(value) else None
