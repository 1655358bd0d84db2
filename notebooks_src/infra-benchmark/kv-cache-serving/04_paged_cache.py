# %% [markdown] lang="en"
# ## 6. The paged cache
#
# A static cache reserves `T_max` slots for every row, whatever the row will use. A **paged cache**
# borrows the idea of virtual memory. An operating system gives each process a contiguous address space,
# cut into pages, and a page table that maps each page to a frame anywhere in physical memory. Here a
# sequence's positions are cut into **logical blocks** of `block_size` positions (positions 0–3 are
# logical block 0, 4–7 logical block 1, and so on with blocks of 4), and the sequence's **block table**
# maps each logical block to a **physical block**, taken from one pool shared by all sequences. A
# sequence of $n$ positions holds $\lceil n / \text{block\_size} \rceil$ physical blocks, so at most one
# partly filled block per sequence is wasted, and a block can be taken from anywhere in the pool. For
# attention, a sequence's K and V are **gathered** from its blocks: indexing, which copies values and
# computes nothing.
#
# The section has four parts: the cache itself (the pool and the block tables), a small example drawn as
# a figure, two criteria that compare the paged cache with a contiguous one (one batch; a shared
# prompt), and negative controls. Requests that come and go, and the blocks they give back, belong to
# the serving loop of section 8.

# %% [markdown] lang="zh"
# ## 6. 分页缓存
#
# 静态缓存给每一行都预留 `T_max` 个槽位，不管这一行最终用多少。**分页缓存**借用了虚拟内存的思路。操作系统给每个进程一段连续的地址空间，把它切成若干页，再用一张页表把每一页映射到物理内存中任意位置的一个页框。这里也一样：一条序列的位置被切成若干个**逻辑块**，每个逻辑块 `block_size` 个位置（物理块大小为 4 时，位置 0–3 是逻辑块 0，位置 4–7 是逻辑块 1，依此类推）；序列的**块表**把每个逻辑块映射到一个**物理块**，物理块取自所有序列共用的同一个池。有 $n$ 个位置的序列占用 $\lceil n / \text{block\_size} \rceil$ 个物理块，所以每条序列最多浪费一个未填满的物理块，而且物理块可以取自池中的任何地方。计算注意力时，从序列的各个物理块中**收集**（gather）出它的 K 和 V：这只是索引操作，只复制数值，不做任何计算。
#
# 本节分为四部分：缓存本身（池和块表）；一个画成图的小例子；把分页缓存与连续缓存相比较的两条判据（一个 batch；共用的提示）；最后是负对照。陆续到达又陆续离开的请求，以及它们归还的物理块，属于第 8 节的服务循环。
