# %% [markdown] lang="en"
# ## 9. The cache object of transformers: `DynamicCache`
#
# Our cache is a plain list with one `(K, V)` pair per layer. Each call returns a new list, and
# `torch.cat` builds the longer tensors without writing into the old ones, so the caller's list still
# describes the prefix it described before the call. transformers keeps the same tensors differently.
# A `DynamicCache` holds one layer object per layer; during a call, each attention layer calls
# `cache.update(k, v, layer_idx)`, and the dynamic layer also concatenates with `torch.cat`: it
# replaces its `keys` and `values` attributes with new, longer tensors and leaves the old tensors
# untouched. What is updated in place is the cache object itself: the model returns the same object it
# was given, now holding the longer tensors, and the caller has no object left that describes the
# shorter prefix.
#
# The cell shows both on a short prefill of 8 positions followed by a chunk of 2: the tensor that
# layer 0 held before the call keeps its 8 positions and its values, and the object now points at a
# 10-position tensor; our old list still holds 8 positions.

# %% [markdown] lang="zh"
# ## 9. transformers 的缓存对象：`DynamicCache`
#
# 我们的缓存是一个普通列表，每层一对 `(K, V)`。每次调用都返回一个新列表，而 `torch.cat` 生成更长的新张量，不会改写旧张量，所以调用方手里的旧列表描述的仍是调用之前的那个前缀。transformers 保存的是同样的张量，保存方式却不同。`DynamicCache` 为每一层保存一个层对象（`DynamicLayer`）。一次调用中，每个注意力层都调用 `cache.update(k, v, layer_idx)`，层对象同样用 `torch.cat` 拼接：它用更长的新张量替换自己的 `keys` 和 `values` 属性，旧张量本身原封不动。被原地更新的是缓存对象本身：模型返回的正是传进去的那个对象，只不过它现在装着更长的张量，调用方手里再也没有描述较短前缀的对象了。
#
# 下面的单元格用一个小例子同时演示这两种方式：先预填充 8 个位置，再送入一个含 2 个 token 的分块。第 0 层在调用之前持有的张量仍然是 8 个位置，数值也没变，而缓存对象已经指向一个 10 个位置的新张量；我们的旧列表仍然只有 8 个位置。

# %%
if HAVE_TRANSFORMERS:
    walk_ids = peer_ids[:1, :10]
    with torch.inference_mode():
        hf_cache = DynamicCache(config=gpt2_64.config)
        gpt2_64(input_ids=walk_ids[:, :8], past_key_values=hf_cache, use_cache=True)
        _, our_cache = ours64(walk_ids[:, :8])
        keys_before = hf_cache.layers[0].keys
        keys_before_copy = keys_before.clone()
        out = gpt2_64(input_ids=walk_ids[:, 8:], past_key_values=hf_cache, use_cache=True)
        _, our_next = ours64(walk_ids[:, 8:], our_cache)

    walk_facts = {
        "out.past_key_values is hf_cache": out.past_key_values is hf_cache,
        "hf_cache.layers[0].keys is keys_before": hf_cache.layers[0].keys is keys_before,
        "torch.equal(keys_before, keys_before_copy)": torch.equal(keys_before, keys_before_copy),
        "keys_before.shape[2]": keys_before.shape[2],
        "hf_cache.get_seq_length()": hf_cache.get_seq_length(),
        "our_cache[0][0].shape[2]": our_cache[0][0].shape[2],
        "our_next[0][0].shape[2]": our_next[0][0].shape[2],
    }
    say_table([[f"`{expression}`", f"`{value}`"] for expression, value in walk_facts.items()],
              en=["expression, after the 2-token call", "value"], zh=["表达式（送入 2 个 token 之后）", "值"])
    # [en] The object is the one passed in and now holds 10 positions; the tensor it held before is a
    # [en] different, unchanged tensor of 8; our old list still describes the 8-position prefix.
    # [zh] 模型返回的正是传进去的对象，它现在有 10 个位置；它先前持有的张量是另一个张量，仍是 8 个位置、数值未变；
    # [zh] 我们的旧列表仍然描述 8 个位置的前缀。
    assert list(walk_facts.values()) == [True, False, True, 8, 10, 8, 10]

# %% [markdown] lang="en"
# So a `DynamicCache` can be reused, as long as we reuse it the way the object expects. There are two
# ways. Take a deep copy of the prefix cache before continuing (`copy.deepcopy`, as in the "Re-use
# Cache" example of the transformers documentation), or continue and then cut the cache back with
# `cache.crop(-n)`, which removes the last $n$ positions of every layer. Our list needs neither: keeping
# the old list is enough, and cutting our cache back means slicing every layer's K and V to the first
# $P$ positions.
#
# Why would a cache ever be cut back? For *speculative decoding*, which transformers calls *assisted
# generation* (`generate(..., assistant_model=...)`). A small draft model proposes several tokens; the
# large model checks them all in one call, which appends K and V for every proposed token to its cache;
# then it keeps the tokens it agrees with and rejects the rest. Before the next round the cache must
# forget the rejected positions, and that is what `crop` is for: the assisted decoding loop of
# transformers 5.23.0 (`GenerationMixin._assisted_decoding` in `transformers/generation/utils.py`) calls
# `past_key_values.crop(-n)` with $n$ the number of rejected draft tokens.
# Exercise 2 at the end replays one such round.

# %% [markdown] lang="zh"
# 所以 `DynamicCache` 可以重复使用，只是用法要符合这个对象的设计。办法有两种：续写之前先用 `copy.deepcopy` 把前缀缓存深拷贝一份，transformers 文档讲缓存复用的那一节（`Re-use Cache`）的例子就是这样做的；或者先续写，再用 `cache.crop(-n)` 把缓存截短，它会去掉每一层的最后 $n$ 个位置。我们的列表两种办法都用不着：留着旧列表就够了；要把我们的缓存截短，只需对每层的 K 和 V 做切片，保留前 $P$ 个位置。
#
# 缓存为什么会需要截短？这是为了**投机解码**（speculative decoding），transformers 称之为**辅助生成**（assisted generation，即 `generate(..., assistant_model=...)`）。一个小的草稿模型先提出若干个 token，目标模型（即大模型）在一次调用中把它们全部验证一遍；这次调用会把每个被提出的 token 的 K 和 V 都追加进目标模型的缓存。随后，目标模型接受与自己一致的 token，拒绝其余的。进入下一轮之前，缓存必须丢掉被拒绝的那些位置，`crop` 正是为此而设：transformers 5.23.0 的辅助生成循环（`transformers/generation/utils.py` 中的 `GenerationMixin._assisted_decoding`）会调用 `past_key_values.crop(-n)`，其中 $n$ 是被拒绝的草稿 token 数。本笔记本最后的练习 2 会重演这样的一轮。

# %% [markdown] lang="en"
# The experiment takes two cells. The first runs on GPT-2 alone: prefill 200 positions of section 4's
# sequences, take a deep copy of the cache, continue with 24 tokens, cut the cache back to 200 positions
# with `crop(-24)`, and continue from there with 24 different tokens. It asserts that the cropped cache
# gives exactly, bit for bit, the logits obtained from the deep copy. This holds on any machine, because
# both continuations make the same calls on the same values: `crop` slices the cached tensors, the deep
# copy copies them, and the next call concatenates either into a fresh tensor of the same layout.

# %% [markdown] lang="zh"
# 这个实验分两个单元格。第一个只在 GPT-2 上运行：用第 4 节的序列预填充 200 个位置，把缓存深拷贝一份，续写 24 个 token，再用 `crop(-24)` 把缓存截回 200 个位置，然后从那里续写另外 24 个 token。它断言：从截短后的缓存出发得到的 logits，与从深拷贝出发得到的逐比特相同；这在任何机器上都成立，因为两次续写是在相同的值上做相同的调用：`crop` 对缓存的张量做切片，深拷贝复制它们，下一次调用又都把它们拼接成内存布局相同的新张量。

# %%
CROP_PREFIX, CROP_TOKENS = 200, 24

if HAVE_TRANSFORMERS:
    prefix = peer_ids[:, :CROP_PREFIX]
    first = peer_ids[:, CROP_PREFIX:CROP_PREFIX + CROP_TOKENS]
    second = peer_ids[:, CROP_PREFIX + CROP_TOKENS:CROP_PREFIX + 2 * CROP_TOKENS]
    with torch.inference_mode():
        hf_cache = DynamicCache(config=gpt2_64.config)
        gpt2_64(input_ids=prefix, past_key_values=hf_cache, use_cache=True)
        snapshot = copy.deepcopy(hf_cache)
        gpt2_64(input_ids=first, past_key_values=hf_cache, use_cache=True)
        # [en] A copy that is not cropped, for the negative control of the next cell.
        # [zh] 一份不截短的副本，供下一个单元格的负对照使用。
        uncropped = copy.deepcopy(hf_cache)
        hf_cache.crop(-CROP_TOKENS)
        lengths = [c.get_seq_length() for c in (hf_cache, snapshot, uncropped)]
        # [en] crop(-24) left the 200 prefix positions, like the deep copy; the uncropped copy holds 224.
        # [zh] crop(-24) 留下了前缀的 200 个位置，与深拷贝相同；没有截短的副本有 224 个位置。
        assert lengths == [CROP_PREFIX, CROP_PREFIX, CROP_PREFIX + CROP_TOKENS]
        # [en] The cropped K/V, kept for the next cell: the continuation below appends to the cache.
        # [zh] 截短后的 K/V，留给下一个单元格：下面的续写会往缓存里追加。
        cropped_kv = [(layer.keys.clone(), layer.values.clone()) for layer in hf_cache.layers]
        after_crop = gpt2_64(input_ids=second, past_key_values=hf_cache, use_cache=True).logits
        after_copy = gpt2_64(input_ids=second, past_key_values=snapshot, use_cache=True).logits
    say(en=f"Cache lengths after `crop`, of the deep copy and of the uncropped copy: {lengths}. Continuation after "
           f"`crop` against the one from the deep copy: max abs error {max_abs_err(after_crop, after_copy):.1e}, "
           f"bit for bit equal: {torch.equal(after_crop, after_copy)}.",
        zh=f"`crop` 之后、深拷贝、未截短副本的缓存长度：{'、'.join(map(str, lengths))}。`crop` 之后的续写与从深拷贝"
           f"出发的续写相比：最大绝对误差 {max_abs_err(after_crop, after_copy):.1e}，逐比特相同：{'是' if torch.equal(after_crop, after_copy) else '否'}。")
    # [en] Bit for bit on any machine: crop slices the cached tensors and deepcopy copies them, and the
    # [en] next call concatenates either into a fresh tensor of the same layout: same calls, same inputs.
    # [zh] 在任何机器上都逐比特相同：crop 对缓存的张量做切片，deepcopy 复制它们，下一次调用又都把它们
    # [zh] 拼接成内存布局相同的新张量：相同输入上的相同调用。
    assert torch.equal(after_crop, after_copy)

# %% [markdown] lang="en"
# The second cell cuts our cache back the same way, by slicing every layer to its first 200 positions,
# and compares it with GPT-2's cropped cache layer by layer, then the continuations of both. The cut must
# change the cache's length, not merely hide entries: given no `position_ids`, `GPT2Model.forward`
# numbers the new tokens `torch.arange(T) + past_key_values.get_seq_length()` (`modeling_gpt2.py`),
# exactly our `absolute_positions` hook of section 3. So the negative control continues GPT-2 from the
# copy that was not cropped: the new tokens then sit 24 positions too late and read 24 extra keys, and
# the comparison with ours catches it.

# %% [markdown] lang="zh"
# 第二个单元格用同样的方式截短我们的缓存：把每一层切片，只保留前 200 个位置；然后把它与 GPT-2 截短后的缓存逐层比较，再比较两边的续写结果。截短必须真正改变缓存的长度，而不能只是把多出的部分藏起来：没有传入 `position_ids` 时，`GPT2Model.forward` 把新 token 的位置编为 `torch.arange(T) + past_key_values.get_seq_length()`（见 `modeling_gpt2.py`），这正是第 3 节里我们的 `absolute_positions` 钩子。所以负对照让 GPT-2 从没有截短的那份副本出发续写：这时新 token 的位置整体往后错了 24 个，还会多读 24 个键，与我们的结果一比就能查出来。

# %%
# [en] Our cache cut back to its first `length` positions: every layer's K and V sliced.
# [zh] 把我们的缓存截回前 `length` 个位置：每层的 K 和 V 都做切片。
def truncate(cache, length):
    return [(k[:, :, :length], v[:, :, :length]) for k, v in cache]


if HAVE_TRANSFORMERS:
    with torch.inference_mode():
        _, our_cache = ours64(prefix)
        _, our_cache = ours64(first, our_cache)
        our_cache = truncate(our_cache, CROP_PREFIX)
        crop_kv_error = max(max(max_abs_err(hf_k, k), max_abs_err(hf_v, v))
                            for (hf_k, hf_v), (k, v) in zip(cropped_kv, our_cache))
        ours_after, _ = ours64(second, our_cache)
        without_crop = gpt2_64(input_ids=second, past_key_values=uncropped, use_cache=True).logits

    crop_errors = {"cropped_kv": crop_kv_error, "logits_after_crop": max_abs_err(after_crop, ours_after),
                   "crop_vs_deep_copy": max_abs_err(after_crop, after_copy),
                   "logits_without_crop": max_abs_err(without_crop, ours_after)}
    say_table([[f"{crop_errors[key]:.1e}" for key in ("cropped_kv", "logits_after_crop", "logits_without_crop")]],
              en=["cropped K/V vs our sliced cache", "logits after `crop` vs ours", "no `crop` (negative control) vs ours"],
              zh=["截短后的 K/V 与我们切片后的缓存", "`crop` 之后的 logits 与我们的", "不做 `crop`（负对照）与我们的"])
    # [en] Cropped caches and continuations agree; without the crop the comparison fails.
    # [zh] 截短后的缓存和续写结果都一致；不截短则比较失败。
    crop_verdicts = [crop_errors[key] <= TOLERANCE[torch.float64] for key in ("cropped_kv", "logits_after_crop", "logits_without_crop")]
    assert crop_verdicts == [True, True, False]
    say(en=f"After `crop(-{CROP_TOKENS})` the library's cache and ours agree within $10^{{-10}}$, and so do the "
           "continuations. Without the crop, the same comparison fails.",
        zh=f"执行 `crop(-{CROP_TOKENS})` 之后，库的缓存与我们的在 $10^{{-10}}$ 的容差内一致，续写结果也一致。"
           "不做截短，同样的比较就会失败。")
