# %% [markdown] lang="en"
# ## 8. The cache object of transformers: `DynamicCache`
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
# ## 8. transformers 的缓存对象：`DynamicCache`
#
# 我们的缓存是一个普通列表，每层一对 `(K, V)`。每次调用都返回一个新列表，而 `torch.cat` 生成更长的新张量，不会改写旧张量，所以调用方手里的旧列表描述的仍是调用之前的那个前缀。transformers 保存的是同样的张量，保存方式却不同。`DynamicCache` 为每一层保存一个层对象；一次调用中，每个注意力层都会调用 `cache.update(k, v, layer_idx)`，而这种动态层同样用 `torch.cat` 拼接：它用更长的新张量替换自己的 `keys` 和 `values` 属性，旧张量原封不动。被原地更新的是缓存对象本身：模型返回的正是传进去的那个对象，只不过它现在装着更长的张量，调用方手里再也没有描述较短前缀的对象了。
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

    assert out.past_key_values is hf_cache
    assert hf_cache.layers[0].keys is not keys_before
    assert torch.equal(keys_before, keys_before_copy) and keys_before.shape[2] == 8
    assert hf_cache.get_seq_length() == hf_cache.layers[0].keys.shape[2] == 10
    assert our_cache[0][0].shape[2] == 8 and our_next[0][0].shape[2] == 10
    print("hf_cache.layers[0].keys:", list(keys_before.shape), "->", list(hf_cache.layers[0].keys.shape))
    print("our_cache[0][0]:        ", list(our_cache[0][0].shape), "->", list(our_next[0][0].shape))
    say(en="The old tensor is unchanged; the `DynamicCache` object returned by the model is the one passed in, "
           "now holding the longer tensor.",
        zh="旧张量没有变；模型返回的 `DynamicCache` 对象就是传进去的那个，只是现在装着更长的张量。")

# %% [markdown] lang="en"
# So a `DynamicCache` can be reused, as long as we reuse it the way the object expects. There are two
# ways. Take a deep copy of the prefix cache before continuing (`copy.deepcopy`, as in the "Re-use
# Cache" example of the transformers documentation), or continue and then cut the cache back with
# `cache.crop(-n)`, which removes the last n positions of every layer. Our list needs neither: keeping
# the old list is enough, and cutting our cache back means slicing every layer's K and V to the first
# P positions.
#
# The cell runs one experiment on both models: prefill 200 positions of section 4's sequences,
# continue with 24 tokens, cut both caches back to 200 positions (`crop(-24)` on GPT-2's side, slicing
# on ours), and continue from there with 24 different tokens. It asserts that the cropped caches agree
# with each other layer by layer, that the continuation after the crop gives the same logits on both
# sides, and that on GPT-2's side it gives exactly the logits obtained from a deep copy taken right
# after the prefill. That last claim is bit for bit, and holds on any machine: the crop slices the cached
# tensors and the deep copy copies them, and the next call concatenates either into a fresh tensor of the
# same layout, so both continuations make the same calls on the same inputs. As a negative control, it also continues from a cache that was not cropped: the new tokens
# then sit 24 positions too late and read 24 extra keys, and the comparison catches it.

# %% [markdown] lang="zh"
# 所以 `DynamicCache` 可以重复使用，只是用法要符合这个对象的设计。办法有两种：续写之前先把前缀缓存深拷贝一份（`copy.deepcopy`，transformers 文档中“Re-use Cache”一节的例子就是这样做的）；或者先续写，再用 `cache.crop(-n)` 把缓存截短，它会去掉每一层的最后 n 个位置。我们的列表两种办法都用不着：留着旧列表就够了；要把我们的缓存截短，只需对每层的 K 和 V 做切片，保留前 P 个位置。
#
# 下面的单元格在两个模型上做同一个实验：用第 4 节的序列预填充 200 个位置，续写 24 个 token，再把两边的缓存都截回 200 个位置（GPT-2 一侧用 `crop(-24)`，我们这一侧用切片），然后从那里续写另外 24 个 token。它断言三件事：截短后的两份缓存逐层一致；截短后的续写在两边给出相同的 logits；在 GPT-2 一侧，截短后续写得到的 logits 与从预填充后立即做的深拷贝出发得到的完全相同。最后这一条是逐比特相同，而且在任何机器上都成立：截短只是对缓存的张量做切片，深拷贝只是复制它们，下一次调用又都把它们拼接成内存布局相同的新张量，所以两次续写是同样的输入上的同样的调用。作为负对照，它还从一份没有截短的缓存出发续写：这时新 token 的位置整体往后错了 24 个，还会多读 24 个键，比较能抓住这个错误。

# %%
CROP_PREFIX, CROP_TOKENS = 200, 24


# [en] Our cache cut back to its first `length` positions: every layer's K and V sliced.
# [zh] 把我们的缓存截回前 `length` 个位置：每层的 K 和 V 都做切片。
def truncate(cache, length):
    return [(k[:, :, :length], v[:, :, :length]) for k, v in cache]


if HAVE_TRANSFORMERS:
    prefix = peer_ids[:, :CROP_PREFIX]
    first = peer_ids[:, CROP_PREFIX:CROP_PREFIX + CROP_TOKENS]
    second = peer_ids[:, CROP_PREFIX + CROP_TOKENS:CROP_PREFIX + 2 * CROP_TOKENS]
    assert not torch.equal(first, second)
    with torch.inference_mode():
        hf_cache = DynamicCache(config=gpt2_64.config)
        gpt2_64(input_ids=prefix, past_key_values=hf_cache, use_cache=True)
        snapshot = copy.deepcopy(hf_cache)
        gpt2_64(input_ids=first, past_key_values=hf_cache, use_cache=True)
        uncropped = copy.deepcopy(hf_cache)
        hf_cache.crop(-CROP_TOKENS)
        lengths = [c.get_seq_length() for c in (hf_cache, snapshot, uncropped)]

        _, our_cache = ours64(prefix)
        _, our_cache = ours64(first, our_cache)
        our_cache = truncate(our_cache, CROP_PREFIX)

        assert all(layer.keys.shape == k.shape for layer, (k, _) in zip(hf_cache.layers, our_cache))
        crop_kv_error = max(max(max_abs(layer.keys, k), max_abs(layer.values, v))
                            for layer, (k, v) in zip(hf_cache.layers, our_cache))
        after_crop = gpt2_64(input_ids=second, past_key_values=hf_cache, use_cache=True).logits
        after_copy = gpt2_64(input_ids=second, past_key_values=snapshot, use_cache=True).logits
        without_crop = gpt2_64(input_ids=second, past_key_values=uncropped, use_cache=True).logits
        ours_after, _ = ours64(second, our_cache)

    crop_errors = {"cropped_kv": crop_kv_error, "logits_after_crop": max_abs(after_crop, ours_after),
                   "crop_vs_deep_copy": max_abs(after_crop, after_copy),
                   "logits_without_crop": max_abs(without_crop, ours_after)}
    say_table([[f"{e:.1e}" for e in crop_errors.values()]],
              en=["cropped K/V vs our sliced cache", "logits after `crop` vs ours", "after `crop` vs deep copy",
                  "no `crop` (negative control) vs ours"],
              zh=["截短后的 K/V 与我们切片后的缓存", "`crop` 之后的 logits 与我们的", "`crop` 之后与深拷贝",
                  "不做 `crop`（负对照）与我们的"])

    assert lengths == [CROP_PREFIX, CROP_PREFIX, CROP_PREFIX + CROP_TOKENS] and our_cache[0][0].shape[2] == CROP_PREFIX
    assert crop_errors["cropped_kv"] <= PEER_TOL and crop_errors["logits_after_crop"] <= PEER_TOL
    assert torch.equal(after_crop, after_copy)
    assert crop_errors["logits_without_crop"] > 1e-3
    say(en=f"After `crop(-{CROP_TOKENS})` the library's cache and ours agree within {PEER_TOL:.0e}, and the "
           "continuation equals, bit for bit, the one from a deep copy of the prefix cache. Without the crop, "
           "the same comparison fails.",
        zh=f"执行 `crop(-{CROP_TOKENS})` 之后，库的缓存与我们的在 {PEER_TOL:.0e} 的容差内一致，"
           "而且续写结果与从前缀缓存的深拷贝出发所得的结果逐比特相同。不做截短，同样的比较就会失败。")
