# %% [markdown] lang="en"
# ## 5. The preallocated (static) cache
#
# `torch.cat` builds new tensors on every call: the whole cache is copied to append one position, and
# the cache moves to another address. A preallocated cache reserves, once, one buffer per layer for K and
# one for V, each of shape `[B, H, T_max, Dh]`, and keeps a length $L$. A call with $n$ new tokens writes
# them into slots $L \dots L + n - 1$ and attends over the valid prefix `buffer[:, :, :L + n]`, a view,
# not a copy. Nothing is allocated after the first call, so the buffers never move (their `data_ptr()`
# stays the same).
#
# **A forward pass with the storage left open.** The decoder of section 3 cannot take a different
# cache: its attention concatenates the new K/V onto the cache with `torch.cat` and returns the new cache
# by value. So, to compare ways of keeping K and V, `store_forward` writes out that decoder with the same
# operations in the same order, except that each attention layer hands its new K and V to a *store*. A store has two methods. `begin(new_mask)` takes the
# padding mask of the new tokens and returns the mask of every slot attention will read, `[B, T_total]`,
# so positions and masks come from the rules of section 4. `write(layer, k, v)` keeps one layer's new K/V
# and returns all the K/V to attend over. (`pointers()` lists the addresses of the store's tensors, so we
# can see which ones move.)
#
# The call order of one forward pass (the code follows):
# ```text
# store_forward(model, ids, new_mask, store)
# ├─ key_mask = store.begin(new_mask)            # once: the mask of every slot to read, [B, T_total]
# └─ in each layer: attend(...)
#    └─ k, v = store.write(layer, k_new, v_new)  # keep the new K/V, get back all K/V to read
# ```
#
# Which store it is decides where K and V live; `store_forward` itself never changes.

# %% [markdown] lang="zh"
# ## 5. 预分配缓存（静态缓存）
#
# `torch.cat` 每次调用都会生成新张量：为了追加一个位置，整个缓存都要复制一遍，缓存也随之换到新的地址。预分配缓存则一次性为每层的 K 和 V 各预留一个形状为 `[B, H, T_max, Dh]` 的缓冲区，并记录当前长度 $L$。一次调用带来 $n$ 个新 token 时，把它们写入第 $L \dots L + n - 1$ 个槽位，再在有效前缀 `buffer[:, :, :L + n]` 上计算注意力；这个前缀是视图，不是副本。第一次调用之后不再分配任何内存，所以缓冲区从不移动，它们的 `data_ptr()` 始终不变。
#
# **一个可以更换存储对象的前向计算**：第 3 节的解码器换不了缓存，因为它的注意力用 `torch.cat` 把新的 K/V 拼接到缓存后面，再把新的缓存作为返回值交出来。所以，为了比较存放 K 和 V 的不同做法，`store_forward` 把第 3 节的解码器用相同的运算、按相同的顺序重新写了一遍，只有一处不同：每个注意力层把新的 K 和 V 交给一个**存储对象**（store）。存储对象有两个方法。`begin(new_mask)` 接收新 token 的填充掩码，返回注意力要读取的全部槽位的掩码 `[B, T_total]`，所以位置和掩码都沿用第 4 节的规则。`write(layer, k, v)` 保存某一层新的 K/V，并返回参与注意力计算的全部 K/V。（`pointers()` 列出存储对象中各个张量的地址，用来观察哪些张量移动了。）
#
# 一次前向计算的调用顺序如下（代码在后面）：
# ```text
# store_forward(model, ids, new_mask, store)
# ├─ key_mask = store.begin(new_mask)            # 只调用一次：要读取的全部槽位的掩码，[B, T_total]
# └─ 每一层：attend(...)
#    └─ k, v = store.write(layer, k_new, v_new)  # 保存新的 K/V，取回要读取的全部 K/V
# ```
#
# 换哪种存储对象，决定 K 和 V 存放在哪里；`store_forward` 本身始终不变。

# %%
def attend(attn, x, allowed, write):
    # [en] The arithmetic of section 3's SelfAttention; `write` keeps the new K/V and returns all K/V to read.
    # [zh] 与第 3 节 SelfAttention 相同的运算；`write` 保存新的 K/V，并返回要读取的全部 K/V。
    batch, new_len, width = x.shape                                    # x: [B, T_new, width]
    q = attn.split_heads(attn.q(x))                                    # [B, H, T_new, Dh]
    k, v = write(attn.split_heads(attn.k(x)), attn.split_heads(attn.v(x)))   # [B, H, T_total, Dh]
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)        # [B, H, T_new, T_total]
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    context = (weights @ v).transpose(1, 2).reshape(batch, new_len, width)
    return attn.proj(context)


@torch.inference_mode()
def store_forward(model, ids, new_mask, store):
    # [en] ids and new_mask: [B, T_new]; returns logits [B, T_new, vocab]; the store keeps the cache.
    # [zh] ids 与 new_mask 的形状为 [B, T_new]；返回 logits [B, T_new, vocab]；缓存由存储对象保管。
    new_len = ids.shape[1]
    key_mask = store.begin(new_mask)                                   # [B, T_total]
    x = model.wte(ids) + model.wpe(padded_positions(key_mask, new_len))
    allowed = padded_causal_mask(key_mask, new_len)
    for layer, block in enumerate(model.blocks):
        x = x + attend(block.attn, block.ln_1(x), allowed, lambda k, v: store.write(layer, k, v))
        x = x + block.mlp(block.ln_2(x))
    return model.lm_head(model.ln_f(x))

# %% [markdown] lang="en"
# The first store, `CatStore`, is the first notebook's cache again, `torch.cat` behind this interface;
# `generate_with_store` is section 4's greedy loop over a store that also records the store's addresses
# after every call. With `CatStore`,
# `store_forward` must **be** the decoder of section 3: the same logits, bit for bit, on the padded batch
# (the equality rule of section 4: it hands attention the very tensors the decoder builds itself). And the
# addresses of its K and V must change after every call.

# %% [markdown] lang="zh"
# 第一个存储对象 `CatStore` 还是第一份笔记本的缓存，即套上这个接口的 `torch.cat`；`generate_with_store` 是改用存储对象的第 4 节贪心生成循环，它还在每次调用之后记录存储对象中各张量的地址。用 `CatStore` 时，`store_forward` 必须**就是**第 3 节的解码器：在填充后的 batch 上，logits 逐比特相同（第 4 节的相等规则：它交给注意力的正是解码器自己构造的那些张量）。此外，每次调用之后，它的 K 和 V 的地址都必须改变。

# %%
class CatStore:
    # [en] The first notebook's cache behind the store interface: torch.cat, new tensors every call.
    # [zh] 以存储对象的形式包装第一份笔记本的缓存：torch.cat，每次调用都生成新张量。
    def __init__(self, config, batch):
        # [en] One (K, V) per layer, and which slots hold real tokens.
        # [zh] 每层一对 (K, V)，以及哪些槽位是真实 token。
        self.layers = [None] * config.layers
        self.key_mask = torch.zeros(batch, 0, dtype=torch.bool)

    def begin(self, new_mask):
        self.key_mask = torch.cat((self.key_mask, new_mask), dim=1)
        return self.key_mask

    def write(self, layer, k, v):
        if self.layers[layer] is not None:
            past_k, past_v = self.layers[layer]
            k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
        self.layers[layer] = (k, v)
        return k, v

    def pointers(self):
        return [t.data_ptr() for pair in self.layers for t in pair]


@torch.inference_mode()
def generate_with_store(model, prompts, store, steps=DECODE_STEPS):
    # [en] Section 4's greedy loop, over a store; also records the store's addresses after every call.
    # [zh] 第 4 节的贪心生成循环，改用存储对象；每次调用后还记录存储对象中张量的地址。
    ids, new_mask = left_pad(prompts)
    logits = store_forward(model, ids, new_mask, store)
    rows = [[logits[r, new_mask[r]]] for r in range(len(prompts))]
    tokens, pointers = [[] for _ in prompts], [store.pointers()]
    for step in range(steps + 1):
        next_ids = logits[:, -1].argmax(dim=-1)
        for r in range(len(prompts)):
            tokens[r].append(int(next_ids[r]))
        if step == steps:
            break
        logits = store_forward(model, next_ids[:, None], torch.ones(len(prompts), 1, dtype=torch.bool), store)
        pointers.append(store.pointers())
        for r in range(len(prompts)):
            rows[r].append(logits[r])
    return {"logits": [torch.cat(r) for r in rows], "tokens": tokens, "pointers": pointers}

# %%
cat_run = generate_with_store(model, PROMPTS, CatStore(cfg, len(PROMPTS)))
STORE_FORWARD_BIT_EXACT = compare(cat_run["logits"], base["logits"])["bit_exact"] and cat_run["tokens"] == base["tokens"]
CAT_MOVES = all(a != b for before, after in zip(cat_run["pointers"], cat_run["pointers"][1:]) for a, b in zip(before, after))
say(en=f"`store_forward` with a `torch.cat` store equals the section 3 decoder bit for bit: `{STORE_FORWARD_BIT_EXACT}`; "
       f"its K and V at new addresses after each of the {len(cat_run['pointers'])} calls: `{CAT_MOVES}`.",
    zh=f"`store_forward` 配合 `torch.cat` 存储对象，与第 3 节的解码器逐比特相同：`{STORE_FORWARD_BIT_EXACT}`；"
       f"在全部 {len(cat_run['pointers'])} 次调用中，每次调用之后它的 K 和 V 都换了地址：`{CAT_MOVES}`。")
assert STORE_FORWARD_BIT_EXACT and CAT_MOVES

# %% [markdown] lang="en"
# **Why serving systems want a preallocated cache.** The main reason is not the copy. On a GPU, a **CUDA graph** records
# a decode step once and replays it at every step, saving the launch of each kernel; a replay is only
# valid if every tensor of the step keeps its shape and its address (`torch.compile(mode="reduce-overhead")`
# records such graphs for you). `torch.compile` on its own needs stable shapes: when a shape changes, the
# step is compiled again (and from then on for dynamic shapes, which can be slower). A `torch.cat` cache changes
# both shape and address at every step; a preallocated buffer itself changes neither (what attention reads from it is another matter, below). Hugging Face's
# `StaticCache`, written for `torch.compile`, goes one step further than ours: attention reads the whole `T_max` buffer at every step, and the mask hides the
# slots not written yet, so even the shapes inside attention stay fixed (section 10 checks this). Our
# store reads the valid prefix, a view whose length still grows: simpler to follow, with fixed buffers but
# not fixed shapes, so on its own it would not let a CUDA graph replay its step. This notebook runs eagerly on a CPU and
# compiles nothing, so it shows the fixed buffers, not the speed-up that compilation buys. The optional
# section 11 times the two stores' decode steps in eager mode.

# %% [markdown] lang="zh"
# **推理服务系统为什么需要预分配缓存**：主要原因并不是省掉复制。在 GPU 上，**CUDA 图**把一个解码步记录一次，之后每一步都直接重放，省去逐个启动内核的开销；只有当这一步里每个张量的形状和地址都保持不变时，重放才是正确的（`torch.compile(mode="reduce-overhead")` 会自动录制这样的图）。单用 `torch.compile` 时，要求的是形状稳定：形状一变，这一步就要重新编译（此后改按动态形状编译，生成的代码可能更慢）。`torch.cat` 缓存每一步都会同时改变形状和地址，预分配的缓冲区本身则两者都不变（注意力从中读到的张量是另一回事，见下文）。Hugging Face 的 `StaticCache` 正是为 `torch.compile` 设计的，它比我们更进一步：每一步的注意力都读取整个长为 `T_max` 的缓冲区，由掩码遮住尚未写入的槽位，这样连注意力内部的形状也固定不变（第 10 节会检查这一点）。我们的存储对象只读取有效前缀，这个视图的长度仍会增长：代码更容易读懂，缓冲区固定了，形状却没有固定，所以单靠它，CUDA 图无法重放这一步。本笔记本在 CPU 上以 eager 模式运行，不做任何编译，所以它能展示固定不动的缓冲区，却展示不了编译带来的加速。可选的第 11 节会在 eager 模式下为两种存储对象的解码步计时。

# %% [markdown] lang="en"
# The static store. Its buffers start filled with **NaN**, not zeros: a slot that has not been written
# holds a value that poisons any arithmetic it enters, so a single read of an unused slot would show up
# as NaN in the logits. `begin` checks the room first: new tokens that do not fit in `T_max` raise a
# `ValueError` that states the arithmetic (`length + new_len > T_max`), before anything is written,
# instead of an obscure shape error or a silent overwrite. Then it takes the slots `start … length - 1`
# for the new tokens, and `write` puts each layer's K/V there. `reset()` prepares the buffers for a new
# batch: length 0, slots refilled with NaN.

# %% [markdown] lang="zh"
# 下面是静态存储对象 `StaticStore`。它的缓冲区一开始填满 **NaN**，而不是 0。NaN 一旦参与运算，结果就全是 NaN，所以只要读到一次尚未写入的槽位，logits 里就会出现 NaN。`begin` 先检查剩余空间：新 token 放不进 `T_max` 时，在写入任何内容之前就抛出 `ValueError`，错误信息直接写出那条不等式（`length + new_len > T_max`），而不是报一个让人费解的形状错误，更不会悄悄覆盖数据。空间够用时，它把第 `start … length - 1` 个槽位分给新 token，再由 `write` 把每一层的 K/V 写到那里。`reset()` 为新的 batch 做准备：长度归零，槽位重新填满 NaN。

# %%
class StaticStore:
    def __init__(self, config, batch, max_len, dtype=torch.float32):
        shape = (batch, config.heads, max_len, config.head_dim)        # [B, H, T_max, Dh]
        self.k = [torch.full(shape, float("nan"), dtype=dtype) for _ in range(config.layers)]
        self.v = [torch.full(shape, float("nan"), dtype=dtype) for _ in range(config.layers)]
        self.key_mask = torch.zeros(batch, max_len, dtype=torch.bool)
        self.max_len, self.start, self.length = max_len, 0, 0

    def begin(self, new_mask):
        new_len = new_mask.shape[1]
        if self.length + new_len > self.max_len:
            raise ValueError(f"length + new_len > T_max: {self.length} + {new_len} > {self.max_len}")
        self.start = self.length
        self.length += new_len
        self.key_mask[:, self.start:self.length] = new_mask
        return self.key_mask[:, :self.length]

    def write(self, layer, k, v):
        # [en] Write in place into the slots begin() took; return views of the valid prefix.
        # [zh] 原地写入 begin() 分配的槽位；返回有效前缀的视图。
        self.k[layer][:, :, self.start:self.length] = k
        self.v[layer][:, :, self.start:self.length] = v
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]

    def reset(self):
        self.start = self.length = 0
        self.key_mask.zero_()
        for t in self.k + self.v:
            t.fill_(float("nan"))

    def pointers(self):
        return [t.data_ptr() for t in self.k + self.v]
