# %% [markdown] lang="en"
# The paged cache must equal a reference: a **contiguous cache** with the same interface, which keeps each
# sequence's K and V in one `[H, n, Dh]` tensor per layer, grown by `torch.cat` as in the first notebook.
# It implements the interface trivially: `reserve` only counts the new positions (it returns no
# addresses), `write` ignores the addresses and appends with `torch.cat`, `read` returns the tensors.

# %% [markdown] lang="zh"
# 检验分页缓存时，拿来比较的参照是一个接口相同的**连续缓存**：每条序列的 K 和 V 在每层各是一个 `[H, n, Dh]` 张量，像第一份笔记本那样用 `torch.cat` 增长。它对这个接口的实现很简单：`reserve` 只给新位置计数（不返回地址），`write` 不理会地址，直接用 `torch.cat` 追加，`read` 返回这些张量。

# %%
class ContiguousCache:
    def __init__(self, config):
        # [en] sequence -> [(K, V) per layer], and its length
        # [zh] 序列 → [每层的 (K, V)]，以及它的长度
        self.layers, self.tables, self.lengths = config.layers, {}, {}

    def add(self, seq):
        self.tables[seq], self.lengths[seq] = [None] * self.layers, 0

    def fork(self, parent, child):
        # [en] torch.cat never writes in place, so sharing the tensors is safe.
        # [zh] torch.cat 从不原地写入，所以共享这些张量是安全的。
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]

    def free(self, seq):
        del self.tables[seq], self.lengths[seq]

    def length(self, seq) -> int:
        # [en] Including reserved positions.
        # [zh] 包括已预留的位置。
        return self.lengths[seq]

    def reserve(self, seq, n):
        self.lengths[seq] += n

    def write(self, layer, seq, addresses, k, v):
        past = self.tables[seq][layer]
        self.tables[seq][layer] = (k, v) if past is None else (torch.cat((past[0], k), -2), torch.cat((past[1], v), -2))

    def read(self, layer, seq):
        return self.tables[seq][layer]

    def pointers(self):
        return [t.data_ptr() for layers in self.tables.values() for pair in layers if pair is not None for t in pair]

# %% [markdown] lang="en"
# `SeqBatchStore` turns a list of sequences, each with its own length, into a store for `store_forward`.
# One call of `store_forward` (a decode step, say) makes these calls:
#
# 1. `begin`, once: `cache.reserve(seq, n)` per sequence returns the addresses of its $n$ new positions;
# 2. `write`, once per layer: per sequence, `cache.write` stores the new K/V at those addresses, and the
#    whole K/V that `cache.read` returns is **gathered** into one fresh dense tensor, left-padded as in sections 4 and 5.
#
# So positions and masks follow the same rules and attention stays the first notebook's code. This gather is a
# correctness device, not how a real engine works: it copies every sequence's whole cache at every step,
# which is exactly the traffic paging exists to avoid. Real engines (vLLM's PagedAttention, FlashInfer,
# FlashAttention's paged mode) pass the block table to the attention kernel, which reads the K/V straight
# from the blocks.
#
# How the batch is laid out: the key axis is as long as the longest *cached* history plus the new tokens;
# each sequence's keys are placed at the right end of its row, and the slots to the left are padding.
# Say sequence `a` has 5 cached positions, `b` has 2, and each gets 1 new token: `a` will hold 6 positions,
# `b` 3, and the batch has $\max(5, 2) + 1 = 6$ key columns. Row `a` is real in columns 0–5; row `b` is
# padding in columns 0–2 and real in columns 3–5, its new token in column 5 like `a`'s. `store_forward`
# takes the positions from this mask with `padded_positions` (`cumsum - 1`), as in section 4: `a` gets
# positions 0–5, `b` positions 0–2 in columns 3–5, so each new token gets its own sequence's next position
# (5 and 2). The next cell builds this example. The padding slots are filled with zeros, not NaN: attention multiplies their values
# by the weight 0, and $0 \cdot \mathrm{NaN}$ would be NaN.

# %% [markdown] lang="zh"
# `SeqBatchStore` 把一组长度各不相同的序列包装成 `store_forward` 所需的存储对象。`store_forward` 的一次调用（比如一个解码步）依次调用：
#
# 1. `begin`，只调用一次：对每条序列，`cache.reserve(seq, n)` 返回它 $n$ 个新位置的地址；
# 2. `write`，每层调用一次：对每条序列，`cache.write` 把新的 K/V 存到这些地址，再把 `cache.read` 读出的全部 K/V **收集**到一个新建的稠密张量中，按第 4、5 节的方式左填充。
#
# 这样位置和掩码沿用同样的规则，注意力也仍是第一份笔记本的代码。这样收集只是为了检验正确性，真实的推理引擎并不这样做：它每一步都要复制每条序列的整个缓存，而分页恰恰是为了省掉这些访存。真实的推理引擎（vLLM 的分页注意力（PagedAttention）、FlashInfer、FlashAttention 的分页模式）把块表交给注意力内核，由内核直接从物理块中读取 K/V。
#
# batch 的布局是这样的：键轴长度等于最长的**已缓存**历史加上新 token 数；每条序列的键放在自己那一行的最右端，左边的槽位是填充位。设序列 `a` 已缓存 5 个位置，`b` 已缓存 2 个，各来 1 个新 token：`a` 将有 6 个位置，`b` 有 3 个，batch 有 $\max(5, 2) + 1 = 6$ 列键。`a` 这一行的第 0–5 列都是真实位置；`b` 这一行的第 0–2 列是填充位，第 3–5 列是真实位置，它的新 token 和 `a` 的一样在第 5 列。`store_forward` 像第 4 节那样用 `padded_positions`（`cumsum - 1`）从这个掩码推出位置：`a` 得到位置 0–5，`b` 在第 3–5 列得到位置 0–2，所以每个新 token 得到的都是它自己那条序列的下一个位置（5 和 2）。下一个单元格构造的就是这个例子。填充位填的是 0 而不是 NaN：注意力会用权重 0 去乘它们的值，而 $0 \cdot \mathrm{NaN}$ 仍是 NaN。

# %%
class SeqBatchStore:
    def __init__(self, cache, seqs):
        self.cache, self.seqs = cache, list(seqs)

    def begin(self, new_mask):                                         # new_mask: [B, T_new]
        self.new_counts = new_mask.sum(dim=-1).tolist()
        # [en] Reserve the new positions once per call, before any layer runs: every layer then writes its
        # [en] K/V to these same addresses, and the lengths below already count the new tokens.
        # [zh] 每次调用只预留一次新位置，而且在任何一层运行之前：之后每一层都把自己的 K/V
        # [zh] 写到这些相同的地址，下面的长度也已经算上了新 token。
        self.addresses = [self.cache.reserve(s, n) for s, n in zip(self.seqs, self.new_counts)]
        # [en] Cached plus new positions (example below: a 5 + 1 = 6, b 2 + 1 = 3).
        # [zh] 已缓存的加上新的位置（下面的例子中：a 为 5 + 1 = 6，b 为 2 + 1 = 3）。
        lengths = [self.cache.length(s) for s in self.seqs]
        # [en] Key columns: the longest cached history (length - new) plus the chunk's T_new columns: max(5, 2) + 1 = 6.
        # [zh] 键的列数：最长的已缓存历史（length - new）加上这个分块的 T_new 列：max(5, 2) + 1 = 6。
        self.total = max(n - new for n, new in zip(lengths, self.new_counts)) + new_mask.shape[1]
        columns = torch.arange(self.total)
        # [en] A row's keys are its last `length` columns: a from column 6 - 6 = 0, b from column 6 - 3 = 3.
        # [zh] 一行的键是它最后 `length` 列：a 从第 6 - 6 = 0 列起，b 从第 6 - 3 = 3 列起。
        return columns[None, :] >= (self.total - torch.tensor(lengths))[:, None]   # [B, T_total]

    def write(self, layer, k, v):                                      # k, v: [B, H, T_new, Dh]
        batch, heads, _, head_dim = k.shape
        keys = torch.zeros(batch, heads, self.total, head_dim, dtype=k.dtype)
        values = torch.zeros_like(keys)
        for row, (seq, n) in enumerate(zip(self.seqs, self.new_counts)):
            if n:
                # [en] The batch is left-padded, so a row's n new tokens are its last n columns.
                # [zh] batch 是左填充的，所以一行的 n 个新 token 就是它的最后 n 列。
                self.cache.write(layer, seq, self.addresses[row], k[row, :, -n:], v[row, :, -n:])
            seq_k, seq_v = self.cache.read(layer, seq)                 # [H, length, Dh]
            keys[row, :, self.total - seq_k.shape[1]:] = seq_k
            values[row, :, self.total - seq_v.shape[1]:] = seq_v
        return keys, values

    def pointers(self):
        return self.cache.pointers()

# %%
# [en] The worked example: `a` has 5 cached positions, `b` has 2, and one new token each.
# [zh] 上面的例子：`a` 已缓存 5 个位置，`b` 已缓存 2 个，各来 1 个新 token。
example_cache = ContiguousCache(cfg)
for seq, cached in (("a", 5), ("b", 2)):
    example_cache.add(seq)
    example_cache.reserve(seq, cached)
example_store = SeqBatchStore(example_cache, ["a", "b"])
example_mask = example_store.begin(torch.ones(2, 1, dtype=torch.bool))   # [B, T_total]
# [en] What store_forward makes of this mask: the positions of the real columns (cumsum - 1).
# [zh] store_forward 由这个掩码得出的结果：真实列上的位置（cumsum - 1）。
example_positions = padded_positions(example_mask, example_store.total)   # [B, T_total]
say_table([[seq, str(example_cache.length(seq)), " ".join("x" if real else "." for real in row.tolist()),
            " ".join(str(p) for p in pos[row].tolist())] for seq, row, pos in zip("ab", example_mask, example_positions)],
          en=["sequence", "positions after the call", "key columns 0–5 (x real, . padding)", "positions of the real columns"],
          zh=["序列", "本次调用后的位置数", "键的第 0–5 列（x 为真实位置，. 为填充位）", "真实列上的位置"])
assert example_store.total == 6 and example_mask.tolist() == [[True] * 6, [False] * 3 + [True] * 3]
# [en] Each new token (the last column) gets its own sequence's next position.
# [zh] 每个新 token（最后一列）得到的都是它自己那条序列的下一个位置。
assert example_positions[:, -1].tolist() == [5, 2]

# %% [markdown] lang="en"
# **First criterion: paging is indexing.** In one line: the paged cache gives the same logits and K/V,
# bit for bit, as a contiguous cache under the same calls. What this tests is the addressing (`reserve`,
# `write`, `read`: every position lands in its slot and comes back from it), not attention, which is the
# same code over the same gathered tensor for both caches. The padded batch of section 4 (prompts of 3, 7 and 12
# tokens), each prompt its own sequence in the pool, prefill and 20 decode steps, blocks of 4 positions
# so that every sequence spans several blocks, in FP32 and FP64. Bit for bit, by the equality rule of
# section 4: a gather only copies values, into the same fresh tensor for both caches. Against the `torch.cat` store of section 5, whose K/V have another layout, the logits must
# agree within the tolerance of their dtype. Each sequence of $n$ positions must hold $\lceil n / 4 \rceil$ blocks, and like the
# static buffers, the pool never moves: it is allocated once, and only the block tables change (the
# contiguous cache is the counterexample: its tensors move at every call). `check_paged` runs the batch
# through a given paged cache, the contiguous cache and the `torch.cat` store; its code is folded, its
# tables follow.

# %% [markdown] lang="zh"
# **第一条判据：分页只是索引**。一句话概括：在同样的调用下，分页缓存给出的 logits 和 K/V 与连续缓存逐比特相同。它检验的是寻址（`reserve`、`write`、`read`：每个位置都写进自己的槽位，也从那里读回），而不是注意力：对两种缓存，注意力都是同一段代码，作用在收集出的同样的张量上。取第 4 节填充后的 batch（提示长 3、7、12 个 token），每个提示在池中是一条独立的序列，做预填充和 20 个解码步；物理块大小取 4 个位置，让每条序列都跨越多个物理块；FP32 和 FP64 各一遍。按第 4 节的相等规则要求逐比特相同：收集只是复制数值，两种缓存都复制进同一种新建的张量。与第 5 节的 `torch.cat` 存储对象相比，它的 K/V 内存布局不同，logits 要求在该精度的容差内一致。有 $n$ 个位置的序列必须占用 $\lceil n / 4 \rceil$ 个物理块。池也和静态缓冲区一样从不移动：它只分配一次，变的只是块表（连续缓存是反例：它的张量每次调用都会移动）。`check_paged` 让这个 batch 分别经过给定的分页缓存、连续缓存和 `torch.cat` 存储对象；代码默认折叠，下面紧接着是它打印的表格。

# %% tags=["hide-input"]
# [en] Small, so that sequences span many blocks.
# [zh] 取小一点，让序列跨越多个物理块。
BLOCK_SIZE = 4


@torch.inference_mode()
def generate_seqs(model, cache, prompts, steps=DECODE_STEPS, seqs=None):
    # [en] The padded batch of section 4, with each prompt stored as its own sequence in `cache`.
    # [zh] 第 4 节填充后的 batch，每个提示在 `cache` 中是一条独立的序列。
    seqs = list(range(len(prompts))) if seqs is None else seqs
    for seq in seqs:
        cache.add(seq)
    return generate_with_store(model, prompts, SeqBatchStore(cache, seqs), steps)


def same_kv(cache_a, cache_b, seqs) -> bool:
    # [en] Every layer's K and V of every sequence, read back from both caches, equal bit for bit.
    # [zh] 从两个缓存读回的每条序列、每一层的 K 和 V 都逐比特相同。
    return all(torch.equal(a, b) for layer in range(cfg.layers) for seq in seqs
               for a, b in zip(cache_a.read(layer, seq), cache_b.read(layer, seq)))


def check_paged(paged) -> dict:
    # [en] The padded batch through `paged`, through a contiguous cache and through a torch.cat store.
    # [zh] 让填充后的 batch 分别经过 `paged`、连续缓存和 torch.cat 存储对象。
    dtype = paged.pool.k[0].dtype
    net = in_dtype(model, dtype)
    contiguous_cache = ContiguousCache(cfg)
    out = generate_seqs(net, paged, PROMPTS)
    contiguous = generate_seqs(net, contiguous_cache, PROMPTS)
    cat_reference = generate_with_store(net, PROMPTS, CatStore(cfg, len(PROMPTS)))
    versus_cat = compare(out["logits"], cat_reference["logits"])
    lengths = [paged.length(s) for s in range(len(PROMPTS))]
    return {
        "max_abs_logit_err": versus_cat["max_abs_logit_err"],
        "close_vs_cat": versus_cat["close"],
        "bit_exact_vs_cat": versus_cat["bit_exact"],
        "finite": versus_cat["finite"],
        "bit_exact_vs_contiguous": compare(out["logits"], contiguous["logits"])["bit_exact"],
        "kv_bit_exact_vs_contiguous": same_kv(paged, contiguous_cache, range(len(PROMPTS))),
        "tokens_identical": out["tokens"] == cat_reference["tokens"],
        "pool_fixed": all(p == out["pointers"][0] for p in out["pointers"]),
        "contiguous_fixed": all(p == contiguous["pointers"][0] for p in contiguous["pointers"]),
        "lengths": lengths,
        "tables": [list(paged.tables[s]) for s in range(len(PROMPTS))],
    }


def show_paged(runs):
    say_table([[str(seq), str(runs["fp32"]["lengths"][seq]), str(table)] for seq, table in enumerate(runs["fp32"]["tables"])],
              en=["sequence", "positions", "block table"], zh=["序列", "位置数", "块表"])
    say_table([[name.upper(), f"`{r['bit_exact_vs_contiguous'] and r['kv_bit_exact_vs_contiguous']}`", f"{r['max_abs_logit_err']:.1e}",
                f"`{r['close_vs_cat'] and r['tokens_identical']}`", f"`{r['bit_exact_vs_cat']}`", f"`{r['pool_fixed']}`",
                f"`{r['contiguous_fixed']}`"] for name, r in runs.items()],
              en=["dtype", "bit-exact vs contiguous (logits, K/V)", "max abs logit error vs `torch.cat`",
                  "within tolerance of `torch.cat`, same tokens", "bit-exact vs `torch.cat` on this run", "pool `data_ptr()` fixed",
                  "contiguous cache's `data_ptr()` fixed"],
              zh=["精度", "与连续缓存逐比特相同（logits、K/V）", "与 `torch.cat` 相比 logits 的最大绝对误差",
                  "在 `torch.cat` 结果的容差之内且 token 相同", "本次运行与 `torch.cat` 逐比特相同", "池的 `data_ptr()` 不变",
                  "连续缓存的 `data_ptr()` 不变"])

# %%
PAGED = {DTYPE_NAME[d]: check_paged(PagedCache(BlockPool(cfg, 32, BLOCK_SIZE, d))) for d in TOLERANCE}
show_paged(PAGED)
# [en] The criterion, one line per clause, for every dtype: logits and K/V bit-exact vs the contiguous cache;
# [en] within tolerance of `torch.cat` with the same tokens; the pool never moved (the contiguous cache did);
# [en] ceil(n / 4) blocks per sequence.
# [zh] 判据，每行一条，对每种精度都成立：logits 和 K/V 与连续缓存逐比特相同；与 `torch.cat` 在容差内一致且 token 相同；
# [zh] 池从未移动（连续缓存移动了）；每条序列占 ceil(n / 4) 个物理块。
for r in PAGED.values():
    assert r["bit_exact_vs_contiguous"] and r["kv_bit_exact_vs_contiguous"]
    assert r["close_vs_cat"] and r["tokens_identical"]
    assert r["pool_fixed"] and not r["contiguous_fixed"]
    assert [len(t) for t in r["tables"]] == [math.ceil(n / BLOCK_SIZE) for n in r["lengths"]]

# %% [markdown] lang="en"
# **The block boundaries.** A chunk may end inside a block, fill one to its last slot, or run over
# several. One sequence of 24 tokens is fed in chunks of 3, 4, 1, 4, 9, 2 and 1 tokens; the table lists
# the positions of each chunk and the logical blocks it writes into. There is a chunk shorter than a
# block, a chunk exactly one block long that crosses a block boundary (positions 3–6) and one that is
# aligned with the blocks (positions 8–11), and a chunk longer than two blocks (positions 12–20). The
# logits must equal, bit for bit, those of the contiguous cache under the same calls, and, within the FP32
# tolerance, those of one full call; the six blocks must each hold exactly 4 positions, in order.

# %% [markdown] lang="zh"
# **物理块的边界**：一个分块可能在物理块中间结束，可能恰好填满一个物理块，也可能跨越好几个物理块。把一条 24 个 token 的序列按分块长度 3、4、1、4、9、2、1 依次送入；表中列出每个分块覆盖的位置，以及它写入的逻辑块。其中有比一个物理块短的分块；有恰好一个物理块长、但跨越物理块边界的分块（位置 3–6）；也有同样长、但与物理块边界对齐的分块（位置 8–11）；以及比两个物理块还长的分块（位置 12–20）。它的 logits 必须与同样调用下连续缓存的结果逐比特相同，并在 FP32 容差内等于一次完整调用的结果；六个物理块必须各自恰好存放 4 个位置，而且按顺序排列。

# %%
BOUNDARY_CHUNKS = [3, 4, 1, 4, 9, 2, 1]
BOUNDARY_IDS = torch.randint(0, cfg.vocab, (1, sum(BOUNDARY_CHUNKS)), generator=torch.Generator().manual_seed(SEED + 8))
chunk_starts = np.cumsum([0] + BOUNDARY_CHUNKS[:-1]).tolist()
say_table([[str(n), f"{start}\N{EN DASH}{start + n - 1}" if n > 1 else str(start), ", ".join(str(b) for b in range(start // BLOCK_SIZE, (start + n - 1) // BLOCK_SIZE + 1))]
           for n, start in zip(BOUNDARY_CHUNKS, chunk_starts)],
          en=["chunk length", "positions", "logical blocks written"], zh=["分块长度", "位置", "写入的逻辑块"])


@torch.inference_mode()
def feed_in_chunks(cache, ids, chunks, seq="s"):
    # [en] One sequence, one store_forward call per chunk; the logits of every position.
    # [zh] 一条序列，每个分块调用一次 store_forward；返回每个位置的 logits。
    cache.add(seq)
    pieces, start = [], 0
    for n in chunks:
        pieces.append(store_forward(model, ids[:, start:start + n], torch.ones(1, n, dtype=torch.bool), SeqBatchStore(cache, [seq]))[0])
        start += n
    return torch.cat(pieces)                                           # [T, vocab]


boundary_pool = BlockPool(cfg, 8, BLOCK_SIZE)
boundary_paged, boundary_contiguous = PagedCache(boundary_pool), ContiguousCache(cfg)
boundary_logits = feed_in_chunks(boundary_paged, BOUNDARY_IDS, BOUNDARY_CHUNKS)
with torch.inference_mode():
    boundary_full = model(BOUNDARY_IDS)[0][0]
BOUNDARY = {
    "chunks": BOUNDARY_CHUNKS,
    "bit_exact_vs_contiguous": torch.equal(boundary_logits, feed_in_chunks(boundary_contiguous, BOUNDARY_IDS, BOUNDARY_CHUNKS)),
    "kv_bit_exact_vs_contiguous": same_kv(boundary_paged, boundary_contiguous, ["s"]),
    "max_abs_logit_err_vs_full": max_abs_err(boundary_logits, boundary_full),
    "close_to_full": close(boundary_logits, boundary_full),
    "fills": [boundary_pool.fill[b] for b in boundary_paged.tables["s"]],
    "addresses_in_order": boundary_paged.addresses("s").tolist() == [b * BLOCK_SIZE + slot for b in boundary_paged.tables["s"] for slot in range(BLOCK_SIZE)],
}
say(en=f"Block fill counts {BOUNDARY['fills']}; bit-exact vs the contiguous cache (logits and K/V): "
       f"`{BOUNDARY['bit_exact_vs_contiguous'] and BOUNDARY['kv_bit_exact_vs_contiguous']}`; "
       f"max abs logit error vs one full call {BOUNDARY['max_abs_logit_err_vs_full']:.1e}.",
    zh=f"各物理块的已填计数为 {BOUNDARY['fills']}；与连续缓存逐比特相同（logits 和 K/V）："
       f"`{BOUNDARY['bit_exact_vs_contiguous'] and BOUNDARY['kv_bit_exact_vs_contiguous']}`；"
       f"与一次完整调用相比，logits 的最大绝对误差为 {BOUNDARY['max_abs_logit_err_vs_full']:.1e}。")
full_blocks_in_order = BOUNDARY["fills"] == [BLOCK_SIZE] * (sum(BOUNDARY_CHUNKS) // BLOCK_SIZE) and BOUNDARY["addresses_in_order"]
assert BOUNDARY["bit_exact_vs_contiguous"] and BOUNDARY["kv_bit_exact_vs_contiguous"] and BOUNDARY["close_to_full"] and full_blocks_in_order
