# %% [markdown] lang="en"
# One call first: a GQA model with 2 K/V heads, batch 2, chunks of 5 tokens, FP32. `check_cached` returns one
# row: the largest logit error, the largest error of the cached tensors, and whether both paths agreed.

# %% [markdown] lang="zh"
# 先看一次调用：一个有 2 个 K/V 头的 GQA 模型，batch 为 2，分块长度为 5，FP32。`check_cached` 返回一行结果：logits 的最大绝对误差、缓存张量的最大绝对误差，以及两条路径是否一致。

# %%
FIRST_CHECK = check_cached(lambda: build(ArchConfig(kv_heads=2)), batch=2, chunk=5)
say(en=f"One call of `check_cached`: largest logit error {FIRST_CHECK['max_abs_logit_err']:.1e}, largest cache error "
       f"{FIRST_CHECK['max_abs_cache_err']:.1e}: {'the two paths agree' if FIRST_CHECK['passed'] else 'the two paths disagree'}.",
    zh=f"调用一次 `check_cached`：logits 的最大绝对误差为 {FIRST_CHECK['max_abs_logit_err']:.1e}，缓存的最大绝对误差为 "
       f"{FIRST_CHECK['max_abs_cache_err']:.1e}，{'两条路径一致' if FIRST_CHECK['passed'] else '两条路径不一致'}。")
