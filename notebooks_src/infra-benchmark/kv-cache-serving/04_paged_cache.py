# %% [markdown] lang="en"
# ## 6. The paged cache
#
# A static cache reserves `T_max` slots for every row, whatever the row will use. A **paged cache**
# borrows the idea of virtual memory. An operating system gives each process a contiguous address space,
# cut into pages, and a page table that maps each page to a frame anywhere in physical memory. Here a
# sequence's positions are cut into **logical blocks** of `block_size` positions (positions 0–3 are
# logical block 0, 4–7 logical block 1, and so on with blocks of 4), and the sequence's **block table**
# maps each logical block to a **physical block**, taken from one pool shared by all sequences. A
# sequence of $n$ positions holds $\lceil n / \text{block\_size} \rceil$ physical blocks, so what it wastes is
# the unfilled part of its last block (fewer than `block_size` slots), and a block can be taken from anywhere in the pool. For
# attention, a sequence's K and V are **gathered** from its blocks: indexing, which copies values and
# computes nothing.
#
# Four layers of objects, each calling only the one below it (the methods are defined in this section):
#
# | object | owns | called by, with |
# |---|---|---|
# | `store_forward` (section 5) | nothing: one forward pass | the generation loops; `serve` (section 8) |
# | `SeqBatchStore` | the list of sequences in this call | `store_forward`: `begin` once, then `write` in each layer |
# | `PagedCache` | one block table per sequence | `SeqBatchStore`: `reserve`, `write`, `read`; loops: `add`, `fork`, `free` |
# | `BlockPool` | the K/V tensors, free list, fill counts, holders | `PagedCache`: `allocate`, `hold`, `release` (→ `reclaim` → `clear`: each calls the next); it also indexes the tensors |
#
# The paging itself lives in `PagedCache` and `BlockPool`. `SeqBatchStore` is only the adapter that lets
# the unchanged dense attention of section 5 run on a paged cache; its internals can be skipped.
# The section builds the pool and the block tables, draws a small example, checks the paged cache
# against a contiguous one (one batch; a shared prompt), and ends with negative controls. Requests that
# come and go belong to the serving loop of section 8.

# %% [markdown] lang="zh"
# ## 6. 分页缓存
#
# 静态缓存给每一行都预留 `T_max` 个槽位，不管这一行最终用多少。**分页缓存**借用了虚拟内存的思路。操作系统给每个进程一段连续的地址空间，把它切成若干页，再用一张页表把每一页映射到物理内存中任意位置的一个页框。这里也一样：一条序列的位置被切成若干个**逻辑块**，每个逻辑块 `block_size` 个位置（物理块大小为 4 时，位置 0–3 是逻辑块 0，位置 4–7 是逻辑块 1，依此类推）；序列的**块表**把每个逻辑块映射到一个**物理块**，物理块取自所有序列共用的同一个池。有 $n$ 个位置的序列占用 $\lceil n / \text{block\_size} \rceil$ 个物理块，所以每条序列浪费的只是最后一个物理块中未填满的部分（少于 `block_size` 个槽位），而且物理块可以取自池中的任何地方。计算注意力时，从序列的各个物理块中**收集**（gather）出它的 K 和 V：这只是索引操作，只复制数值，不做任何计算。
#
# 共有四层对象，每层只调用它下面的一层（这些方法都在本节定义）：
#
# | 对象 | 持有的状态 | 由谁调用，调用什么 |
# |---|---|---|
# | `store_forward`（第 5 节） | 无：一次前向计算 | 各个生成循环；`serve`（第 8 节） |
# | `SeqBatchStore` | 本次调用涉及的序列列表 | `store_forward`：先调用一次 `begin`，再在每一层调用 `write` |
# | `PagedCache` | 每条序列一张块表 | `SeqBatchStore`：`reserve`、`write`、`read`；各循环：`add`、`fork`、`free` |
# | `BlockPool` | K/V 张量、空闲列表、已填计数、持有者 | `PagedCache`：`allocate`、`hold`、`release`（`release` 调用 `reclaim`，`reclaim` 再调用 `clear`）；它也直接索引这些张量 |
#
# 分页本身由 `PagedCache` 和 `BlockPool` 实现。`SeqBatchStore` 只是一个适配层，让第 5 节原封不动的稠密注意力能在分页缓存上运行；它的内部细节可以跳过。本节先构造池和块表，画出一个小例子，再把分页缓存与连续缓存相比较（一个 batch；共用的提示），最后是负对照。陆续到达又陆续离开的请求属于第 8 节的服务循环。
