# %% [markdown] lang="en"
# ## 5. Serving requests with a prefix cache
#
# The serving loop repeats three steps, as in the serving notebook: several requests run at the same time
# and each iteration advances every one of them. Unlike the serving notebook, each model call here serves a
# single request (batch 1): the running requests take turns, one call each per iteration, instead of being
# stacked into one batched call. That keeps each call's arithmetic exactly that of a request served alone,
# so the only new thing here is the cache:
#
# * **admit** waiting requests in arrival order: look the prompt up, start its block table with the hit
#   blocks, and prefill **only the tokens after the hit**, over the K/V read from the hit blocks; `reserve`
#   puts the new positions into fresh blocks. Then publish the prompt's full blocks. A request is admitted
#   only if every block it may need is sure to be there (the rule below); otherwise it waits;
# * **decode** one token for every running request, over its K/V read from its block table;
# * **retire** finished requests: `free` releases their blocks, the last one first.

# %% [markdown] lang="zh"
# ## 5. 用前缀缓存服务请求
#
# 服务循环与服务笔记本一样重复三步：多个请求同时运行，每次迭代让每个请求都前进一步。与服务笔记本不同的是，这里每次调用模型只服务一个请求（batch 为 1）：运行中的请求轮流调用，每次迭代各调用一次，而不是拼成一个 batch 一起调用。这样每次调用的运算与单独服务这个请求时完全相同，唯一的新东西就是缓存：
#
# * **接纳**：按到达顺序处理等待中的请求：查找提示，以命中的物理块开始它的块表，并且只对**命中部分之后的 token** 做预填充（prefill），计算时读取命中物理块中的 K/V；新的位置由 `reserve` 放进新的物理块。然后登记提示中填满的物理块。只有当请求可能需要的每个物理块都一定有着落时，才接纳它（规则见下）；否则请求继续等待；
# * **解码**：每个运行中的请求生成一个 token，计算时读取它的块表中的 K/V；
# * **退出**：完成的请求由 `free` 释放它的物理块，从最后一个开始。

# %% [markdown] lang="en"
# **The admission rule.** The idea: of the blocks free or evictable now, count as usable only those nobody
# else will claim. Two kinds are claimed already: the hit blocks this request is about to hold itself, and the
# blocks *promised* to the running requests. Each running request was admitted on the promise that every block
# it may still need will be there when it needs it: if a newcomer took those blocks, a running request could
# later find no free block and stall halfway through its answer. What is left
# must cover the new blocks the request needs (if nothing runs and it still does not fit, it never will: `serve`
# raises `PoolFull`). As a formula, a waiting request is admitted when
#
# $$\text{fresh} \le \text{available} - \text{hits in LRU} - \text{promised},$$
#
# where *fresh* is the number of new blocks it needs (`blocks_needed` minus its hit blocks), *available* the
# number of free and evictable blocks, *hits in LRU* the hit blocks it is about to take out of the LRU queue
# (they are evictable now, but not once it holds them; hit blocks other running requests hold are not
# subtracted, since held blocks never counted in *available*), and *promised* the blocks the running requests may still
# take (each one's `blocks_needed` minus the blocks it holds; the function `promised` below computes it). An example with blocks of 4 tokens, where 2 of the
# evictable blocks hold the new request's first 8 prompt tokens, and one running request that may need 7
# blocks holds 3:
#
# | new request needs (blocks) | fresh | available | hits in LRU | promised | right-hand side of the rule | admitted |
# |---|---|---|---|---|---|---|
# | 8 | 6 | 9 | 2 | 4 | 3 | no, it waits |
# | 5 | 3 | 9 | 2 | 4 | 3 | yes |

# %% [markdown] lang="zh"
# **接纳规则**：思路是，在眼下空闲或可淘汰的物理块中，只把没有别人要的算作能用的。有两类已经有主了：这个请求自己即将持有的命中物理块，以及许诺给运行中请求的物理块。每个运行中的请求被接纳时都得到了许诺：它之后可能还需要的每个物理块，到时都一定有。否则新请求占走这些物理块后，运行中的请求可能找不到空闲的物理块，中途停住。剩下的物理块必须够这个请求需要的新物理块（如果没有请求在运行，它仍然放不下，那就永远放不下：`serve` 抛出 `PoolFull`）。写成公式，等待中的请求满足
#
# $$\text{新物理块数} \le \text{可用物理块数} - \text{LRU 中命中的物理块数} - \text{已许诺、尚未取走的物理块数}$$
#
# 时才被接纳。其中“新物理块数”是它需要的新物理块数（`blocks_needed` 减去命中的物理块数）；“可用物理块数”是空闲的和可淘汰的物理块数；“LRU 中命中的物理块数”是它即将移出 LRU 队列的命中物理块数（这些物理块现在可以淘汰，一旦被它持有就不能了；其他运行中请求持有的命中物理块不必减去，因为被持有的物理块本来就不计入可用物理块数）；“已许诺、尚未取走的物理块数”是运行中的请求还可能取走的物理块数（每个请求的 `blocks_needed` 减去它已持有的物理块数，由下面的函数 `promised` 算出）。举个例子：物理块大小为 4 个 token，其中 2 个可淘汰的物理块存着新请求提示的前 8 个 token；一个运行中的请求最多可能需要 7 个物理块，已持有 3 个：
#
# | 新请求共需的物理块数 | 新物理块数 | 可用物理块数 | LRU 中命中的物理块数 | 已许诺、尚未取走的物理块数 | 不等式右边的值 | 是否接纳 |
# |---|---|---|---|---|---|---|
# | 8 | 6 | 9 | 2 | 4 | 3 | 否，继续等待 |
# | 5 | 3 | 9 | 2 | 4 | 3 | 是 |

# %% [markdown] lang="en"
# As in the serving notebook, `serve` pauses (`yield`) at each iteration's peak, after the decode step and
# before finished requests leave, and says which requests are running, so that the caller can look at the
# pool.
#
# The reference is each request served **cold**: alone, with the first notebook's cache, the whole prompt
# in one call. A request without a hit makes exactly the same calls on the same values (reading from the
# blocks copies values and computes nothing), so its logits must be bit-identical to the cold ones. A
# request with a hit computes its prompt in two pieces, the cached prefix earlier (in another request's
# prefill) and the rest now: the sums are grouped differently, so its logits must agree within the FP32
# tolerance, and its tokens exactly.
#
# The requests and `blocks_needed` are the serving notebook's, included here.

# %% [markdown] lang="zh"
# 与服务笔记本一样，`serve` 在每次迭代的峰值时刻暂停（`yield`），即解码步之后、完成的请求离开之前，并告诉调用者哪些请求正在运行，好让调用者查看池的状态。
#
# 参照是以**冷启动**方式服务的同一个请求：单独运行，使用第一份笔记本的缓存，整个提示在一次调用中算完。没有命中的请求所做的调用、用到的数值都与冷启动完全相同（从物理块中读取只复制数值，不做计算），所以它的 logits 必须与冷启动逐比特相同。有命中的请求则分两部分计算提示：缓存的前缀早先已经算好（在另一个请求的预填充里），其余部分现在才算；求和的分组方式不同，所以它的 logits 只需在 FP32 容差内一致，生成的 token 则必须完全相同。
#
# 请求和 `blocks_needed` 沿用服务笔记本的代码，这里原样引入。
