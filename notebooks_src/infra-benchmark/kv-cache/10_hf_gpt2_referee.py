# %% [markdown] lang="en"
# ## {{section}}. An outside referee: Hugging Face GPT-2
#
# Checking the cached path against full recomputation compares our decoder with itself: both sides were
# written here, so a misunderstanding shared by both would go unnoticed. This section asks a referee
# nobody here wrote, `transformers.GPT2LMHeadModel`. Our decoder has GPT-2's architecture at toy size,
# with two settings that GPT-2's configuration can express: the exact GELU in the MLP (GPT-2 uses a tanh
# approximation) and a vocabulary head (`lm_head`) with its own matrix (GPT-2 ties it to the token
# embedding table). So our weights can be copied into it, and if the copy is faithful, three things must agree:
# the logits of one full call, the logits of the cached path chunk by chunk, and every layer's cached K
# and V. We compare in FP64 within $10^{-10}$: two correct implementations of the same arithmetic differ
# in FP64 only by rounding, far below that, while a mistake in the copy is far above it.
#
# The section needs the `transformers` library (Colab ships it). The next cell, folded, imports it and
# checks that this version has the cache interface the section uses (`DynamicCache(config=...)` and each
# layer's K/V as `cache.layers[i].keys`); it prints the version it found. Without the library, or with a
# version that lacks that interface, the cell says so in one sentence and the rest of the section does
# nothing.

# %% [markdown] lang="zh"
# ## {{section}}. 外部裁判：Hugging Face GPT-2
#
# 拿缓存路径对照完整重算，是拿我们的解码器和它自己比：比较的双方都出自我们之手，如果两边有同一个理解上的错误，这样的比较是发现不了的。本节请来一位外部裁判：一份不是我们编写的实现，`transformers.GPT2LMHeadModel`。我们的解码器就是玩具尺寸的 GPT-2 结构，只有两处设置不同，而这两处都能用 GPT-2 的配置项表达：MLP 使用精确 GELU（GPT-2 用的是 tanh 近似）；词表投影（`lm_head`）有自己独立的矩阵（GPT-2 让它与 token 嵌入表共享权重）。因此可以把我们的权重复制进去；只要复制无误，下面三样东西都必须一致：一次完整调用得到的 logits、缓存路径逐个分块算出的 logits，以及每一层缓存里的 K 和 V。比较在 FP64 下进行，容差取 $10^{-10}$：同一套运算的两种正确实现，在 FP64 下只差舍入误差，远小于这个容差；复制中的错误则远大于它。
#
# 本节需要 `transformers` 库（Colab 已预装）。下一个单元格（已折叠）导入这个库，并检查当前版本是否具备本节用到的缓存接口（`DynamicCache(config=...)`，以及以 `cache.layers[i].keys` 的形式给出每层的 K/V），然后打印找到的版本。如果没有安装这个库，或者版本缺少这些接口，这个单元格会用一句话说明，本节其余部分不做任何事。

# %% tags=["hide-input"]
import copy
import warnings

# [en] transformers imports tqdm, whose notice about missing Jupyter widgets is noise here.
# [zh] transformers 会导入 tqdm，它关于缺少 Jupyter 小部件的提示在这里只是干扰。
warnings.filterwarnings("ignore", message="IProgress not found")

PINNED_TRANSFORMERS = "5.23.0"
CHECKED_TRANSFORMERS = ("4.57.1", "5.0.0", PINNED_TRANSFORMERS)


# [en] None if a cached GPT-2 call works the way this section uses it, else the library's error.
# [en] Older releases lack `DynamicCache(config=...)` or per-layer K/V as `cache.layers[i].keys`.
# [zh] 如果带缓存的 GPT-2 调用符合本节的用法，返回 None，否则返回库报出的错误。
# [zh] 较早的版本没有 `DynamicCache(config=...)`，或者不把每层的 K/V 存为 `cache.layers[i].keys`。
def cache_api_problem():
    tiny = GPT2LMHeadModel(GPT2Config(vocab_size=5, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                                      bos_token_id=None, eos_token_id=None, attn_implementation="eager")).eval()
    try:
        cache = DynamicCache(config=tiny.config)
        with torch.inference_mode():
            out = tiny(input_ids=torch.zeros(1, 3, dtype=torch.long), past_key_values=cache, use_cache=True)
        assert out.past_key_values is cache and tuple(cache.layers[0].keys.shape) == (1, 2, 3, 4)
    except Exception as error:
        return f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return None


# [en] SKIP_NOTE: None when the comparison runs, else why not (the library's own error, for result files).
# [zh] SKIP_NOTE：比较能运行时为 None，否则记录原因（库自己报出的错误，写入结果文件）。
try:
    import transformers
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    API_PROBLEM = cache_api_problem()
    SKIP_NOTE = None if API_PROBLEM is None else f"transformers {transformers.__version__}: {API_PROBLEM}"
except ImportError as error:
    API_PROBLEM = None
    SKIP_NOTE = f"{type(error).__name__}: {error}"
HAVE_TRANSFORMERS = SKIP_NOTE is None

if not HAVE_TRANSFORMERS and API_PROBLEM is None:
    say(en="transformers is not installed, so the comparison with Hugging Face GPT-2 is skipped.",
        zh="没有安装 transformers，因此跳过与 Hugging Face GPT-2 的比较。")
elif not HAVE_TRANSFORMERS:
    say(en=f"transformers {transformers.__version__} lacks the cache API used here (`{API_PROBLEM}`); it was "
           f"checked with {', '.join(CHECKED_TRANSFORMERS)}, so the comparison with Hugging Face GPT-2 is skipped.",
        zh=f"transformers {transformers.__version__} 缺少这里用到的缓存接口（`{API_PROBLEM}`）；"
           f"本比较在 {'、'.join(CHECKED_TRANSFORMERS)} 上检查过，因此跳过与 Hugging Face GPT-2 的比较。")
elif transformers.__version__ in CHECKED_TRANSFORMERS:
    say(en=f"transformers version: {transformers.__version__}.", zh=f"transformers 版本：{transformers.__version__}。")
else:
    say(en=f"transformers {transformers.__version__}: not one of the versions this comparison was checked with "
           f"({', '.join(CHECKED_TRANSFORMERS)}); if an assertion below fails, this version computes something differently.",
        zh=f"transformers {transformers.__version__} 不在本比较检查过的版本之列（{'、'.join(CHECKED_TRANSFORMERS)}）；"
           f"如果下面某条断言失败，说明这个版本的某处计算方式不同。")

# %% [markdown] lang="en"
# **The copy.** `gpt2_config` describes our decoder as a `GPT2Config`: our sizes, no dropout, the exact
# GELU (`activation_function="gelu"`), `tie_word_embeddings=False`, no special token IDs, and eager
# attention, the plain matmul → softmax → matmul. `gpt2_state_dict` renames our weights to GPT-2's names,
# with two conversions: GPT-2's projections are `Conv1D` modules that store their matrix as `[in, out]`,
# so each of our `nn.Linear` matrices (`[out, in]`) goes in transposed; and GPT-2 computes Q, K and V
# with a single `c_attn`, whose weight is our `q`, `k` and `v` matrices stacked and transposed.
# `build_gpt2` loads the result strictly: a missing or unexpected weight name is an error.

# %% [markdown] lang="zh"
# **复制权重**：`gpt2_config` 把我们的解码器描述成一个 `GPT2Config`：各项尺寸取我们的值，不用 dropout，使用精确 GELU（`activation_function="gelu"`），`tie_word_embeddings=False`，不设特殊 token 的 ID，并使用 eager 注意力，也就是最直接的“矩阵乘 → softmax → 矩阵乘”。`gpt2_state_dict` 把我们的权重改成 GPT-2 的参数名，其间要做两种转换：GPT-2 的投影层是 `Conv1D` 模块，把矩阵存成 `[in, out]`，所以我们每个 `nn.Linear` 的矩阵（`[out, in]`）都要转置后再放进去；GPT-2 只用一个 `c_attn` 同时算出 Q、K、V，它的权重是我们的 `q`、`k`、`v` 三个矩阵堆叠后再转置。`build_gpt2` 以严格模式加载转换结果：缺少权重名或多出权重名都会报错。

# %%
# [en] A GPT2Config that describes our decoder; `changes` overrides fields.
# [zh] 描述我们这个解码器的 GPT2Config；`changes` 用来改写个别配置项。
def gpt2_config(cfg, **changes):
    fields = dict(
        vocab_size=cfg.vocab, n_positions=cfg.max_positions, n_embd=cfg.width, n_layer=cfg.layers,
        n_head=cfg.heads, n_inner=cfg.mlp, activation_function="gelu",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
        scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager",
    )
    fields.update(changes)
    return GPT2Config(**fields)


# [en] Our weights under GPT-2's names and in GPT-2's layout.
# [zh] 把我们的权重换成 GPT-2 的参数名和存储布局。
def gpt2_state_dict(ours):
    sd = {
        "transformer.wte.weight": ours.wte.weight,
        "transformer.wpe.weight": ours.wpe.weight,
        "transformer.ln_f.weight": ours.ln_f.weight,
        "transformer.ln_f.bias": ours.ln_f.bias,
        # [en] GPT-2's vocabulary head (lm_head) is an nn.Linear like ours: no transpose.
        # [zh] GPT-2 的词表投影（lm_head）和我们的一样是 nn.Linear：不转置。
        "lm_head.weight": ours.lm_head.weight,
    }
    for i, block in enumerate(ours.blocks):
        h, attn, mlp = f"transformer.h.{i}.", block.attn, block.mlp
        sd[h + "ln_1.weight"], sd[h + "ln_1.bias"] = block.ln_1.weight, block.ln_1.bias
        sd[h + "ln_2.weight"], sd[h + "ln_2.bias"] = block.ln_2.weight, block.ln_2.bias
        sd[h + "attn.c_attn.weight"] = torch.cat([attn.q.weight, attn.k.weight, attn.v.weight], dim=0).T
        sd[h + "attn.c_attn.bias"] = torch.cat([attn.q.bias, attn.k.bias, attn.v.bias])
        sd[h + "attn.c_proj.weight"], sd[h + "attn.c_proj.bias"] = attn.proj.weight.T, attn.proj.bias
        sd[h + "mlp.c_fc.weight"], sd[h + "mlp.c_fc.bias"] = mlp.fc.weight.T, mlp.fc.bias
        sd[h + "mlp.c_proj.weight"], sd[h + "mlp.c_proj.bias"] = mlp.proj.weight.T, mlp.proj.bias
    return {name: tensor.detach().clone() for name, tensor in sd.items()}


# [en] A GPT2LMHeadModel in the dtype of `ours`, loaded strictly (default: the correct mapping).
# [zh] 与 `ours` 同一精度的 GPT2LMHeadModel，以严格模式加载（默认用正确的映射）。
def build_gpt2(ours, state_dict=None, **config_changes):
    gpt2 = GPT2LMHeadModel(gpt2_config(ours.config, **config_changes)).to(ours.lm_head.weight.dtype).eval()
    gpt2.load_state_dict(gpt2_state_dict(ours) if state_dict is None else state_dict, strict=True)
    return gpt2


if HAVE_TRANSFORMERS:
    # [en] Our decoder as a GPT2Config, and GPT-2's own defaults: the Hugging Face GPT-2 notebook (section 5)
    # [en] compares the two field by field; the other notebooks that include this cell leave them unused.
    # [zh] 描述我们解码器的 GPT2Config，以及 GPT-2 的默认配置：Hugging Face GPT-2 那份笔记本（第 5 节）逐项对照这两者；
    # [zh] 包含这个单元格的其他笔记本不会用到它们。
    hf_config, default_config = gpt2_config(cfg), GPT2Config()
    # [en] The same weights in FP64, on both sides.
    # [zh] 两边都用同一组权重的 FP64 版本。
    ours64 = copy.deepcopy(model).to(torch.float64).eval()
    gpt2_64 = build_gpt2(ours64)

# %% [markdown] lang="en"
# **The comparison.** `compare_with_gpt2` feeds the same token IDs to both models: first the whole
# sequence in one call without a cache, then the cached path, with the sequence cut into chunks of
# different lengths (a long prefill, single-token steps, multi-token chunks), comparing after every chunk
# its logits and each layer's K and V. On the library's side the cache is a `DynamicCache` object passed
# as `past_key_values`; layer $i$'s tensors are `cache.layers[i].keys` and `.values`, laid out
# `[batch, heads, tokens so far, head_dim]` like ours. Two sequences of all 512 positions use every row of
# the position table. The result is a dict of largest absolute errors (`full_logits`, `cached_logits`,
# and one `k` and one `v` per layer); `agrees` is true when every one is at most $10^{-10}$, a purely
# absolute test, unlike `close`, which also allows a relative error. As a negative control, the same
# comparison then runs against a GPT-2 built with GPT-2's default `tie_word_embeddings=True`, and must
# report a disagreement. The first cell defines the three functions, the second runs both comparisons.

# %% [markdown] lang="zh"
# **比较本身**：`compare_with_gpt2` 把同样的 token ID 送进两个模型：先不带缓存，一次调用输入整个序列；再走缓存路径，把序列切成长短不一的分块（一段很长的预填充、几次只送一个 token 的调用、几个多 token 的分块），每处理完一个分块，就比较这个分块的 logits 以及每一层的 K 和 V。库这一侧的缓存是一个 `DynamicCache` 对象，以 `past_key_values` 传入；第 $i$ 层的张量是 `cache.layers[i].keys` 和 `.values`，布局为 `[batch, heads, T, head_dim]`（$T$ 为已缓存的 token 数），与我们的缓存相同。两条序列都占满全部 512 个位置，用到了位置嵌入表的每一行。比较的结果是一个由最大绝对误差组成的字典（`full_logits`、`cached_logits`，以及每层各一个 `k` 和 `v`）；其中每一项都不超过 $10^{-10}$ 时，`agrees` 为真。这是纯粹的绝对误差判定，不同于还允许相对误差的 `close`。作为负对照，随后再拿同样的比较去检查一个沿用 GPT-2 默认值 `tie_word_embeddings=True` 构建的 GPT-2，它必须报告两边不一致。下面第一个单元格定义这三个函数，第二个单元格运行两次比较。

# %%
PEER_CHUNKS = [128, 1, 1, 61, 1, 64, 255, 1]


# [en] Largest |GPT-2 - ours| over full logits, cached logits (chunk by chunk) and each layer's K and V.
# [zh] 完整 logits、逐个分块的缓存 logits 以及每层 K、V 上的最大 |GPT-2 - 我们的实现|。
def compare_with_gpt2(ours, gpt2, ids, chunks):
    layers = len(ours.blocks)
    errors = {"full_logits": 0.0, "cached_logits": 0.0, "k": [0.0] * layers, "v": [0.0] * layers}
    with torch.inference_mode():
        errors["full_logits"] = max_abs_err(gpt2(input_ids=ids).logits, ours(ids)[0])
        cache, ours_cache, start = DynamicCache(config=gpt2.config), None, 0
        for length in chunks:
            chunk = ids[:, start:start + length]
            ours_logits, ours_cache = ours(chunk, ours_cache)
            out = gpt2(input_ids=chunk, past_key_values=cache, use_cache=True)
            start += length
            # [en] The library's cache grew in place, to the same length as ours, layer by layer.
            # [zh] 库的缓存原地增长，每一层的长度都与我们的缓存相同。
            assert out.past_key_values is cache and [layer.keys.shape for layer in cache.layers] == [
                k.shape for k, _ in ours_cache]
            errors["cached_logits"] = max(errors["cached_logits"], max_abs_err(out.logits, ours_logits))
            for i, (k, v) in enumerate(ours_cache):
                errors["k"][i] = max(errors["k"][i], max_abs_err(cache.layers[i].keys, k))
                errors["v"][i] = max(errors["v"][i], max_abs_err(cache.layers[i].values, v))
    return errors


def worst_error(errors):
    return max(errors["full_logits"], errors["cached_logits"], *errors["k"], *errors["v"])


def agrees(errors, tol=TOLERANCE[torch.float64]):
    return worst_error(errors) <= tol


# %%
if HAVE_TRANSFORMERS:
    peer_ids = torch.randint(0, cfg.vocab, (2, cfg.max_positions), generator=torch.Generator().manual_seed(SEED + 10))
    peer_errors = compare_with_gpt2(ours64, gpt2_64, peer_ids, PEER_CHUNKS)
    values = [peer_errors["full_logits"], peer_errors["cached_logits"]]
    values += [e for pair in zip(peer_errors["k"], peer_errors["v"]) for e in pair]
    say(en="Max abs error of GPT-2 against our decoder, per quantity:",
        zh="下表各列是 GPT-2 与我们的解码器之间的最大绝对误差：")
    say_table([[f"{e:.1e}" for e in values]],
              en=["full call logits", "cached path logits"] + [f"layer {i} {t}" for i in range(cfg.layers) for t in "KV"],
              zh=["完整调用的 logits", "缓存路径的 logits"] + [f"第 {i} 层 {t}" for i in range(cfg.layers) for t in "KV"])
    tied_errors = compare_with_gpt2(ours64, build_gpt2(ours64, tie_word_embeddings=True), peer_ids, PEER_CHUNKS)
    say(en=f"GPT-2 and our decoder agree within $10^{{-10}}$, with and without the cache, layer by layer "
           f"(max abs error {worst_error(peer_errors):.1e}). With tied embeddings, the negative control, "
           f"the max abs error is {worst_error(tied_errors):.1e}: the comparison can fail.",
        zh=f"GPT-2 与我们的解码器在 $10^{{-10}}$ 的容差内一致：无论用不用缓存，逐层都一致"
           f"（最大绝对误差 {worst_error(peer_errors):.1e}）。换成共享嵌入权重的负对照，最大绝对误差为 "
           f"{worst_error(tied_errors):.1e}：这个比较确实会失败。")
    assert agrees(peer_errors) and not agrees(tied_errors)
