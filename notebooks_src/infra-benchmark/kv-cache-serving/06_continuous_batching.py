# %% [markdown] lang="en"
# ## 8. Continuous batching
#
# A server receives requests one after another, each with its own prompt and output length. The
# simplest way to batch them is **static batching**: take the requests that are waiting, run them as one
# batch until the *longest* of them has finished, and only then take the next batch. A request that
# finishes early keeps its row in the batch and does nothing until the others are done, and requests
# that arrive meanwhile wait for the whole batch. **Continuous batching** decides at every iteration
# instead: requests that have finished leave, waiting requests join, and one decode step runs for every
# request present.
#
# **Three units.** An **iteration** is one round of the serving loop (admit, decode, retire); a **decode
# step** is one batched model call that gives each running request one token, at most one per iteration
# (an iteration with nothing to decode has none); a **row-step** is one request's row in one decode step,
# so a decode step over 3 requests is 3 row-steps.
#
# The section goes in that order. First the requests and a static-batching baseline, counted on a
# seeded stream of requests; then the loop `serve`, which batches continuously over the paged cache;
# then its proofs: the blocks that finished requests give back are reused without changing a single
# token, every request of the stream generates exactly what it generates alone, and the stream needs
# fewer decode steps than the static baseline.

# %% [markdown] lang="zh"
# ## 8. 连续批处理
#
# 推理服务陆续收到请求，每个请求的提示长度和输出长度各不相同。最简单的批处理方式是**静态批处理**：取出正在等待的请求组成一个 batch，一直运行到其中*最长*的请求结束，然后才取下一个 batch。提前结束的请求仍占着 batch 中的一行，什么也不做，直到其他请求都结束；其间到达的请求则要等整个 batch 结束。**连续批处理**则在每次迭代都重新决定：已完成的请求离开，等待的请求加入，然后为当前所有请求执行一个解码步。
#
# **三个计数单位**：**迭代**是服务循环执行一遍（接纳、解码、退出）；**解码步**是对整个 batch 的一次模型调用，让每个运行中的请求各生成一个 token，每次迭代至多一个（没有请求可解码的迭代不含解码步）；**行步**是一个请求在一个解码步中占的一行，所以 3 个请求的一个解码步就是 3 个行步。
#
# 本节按这个顺序展开：先是请求本身，以及在一个由固定种子生成的请求流上统计出的静态批处理基线；然后是在分页缓存上做连续批处理的循环 `serve`；最后是它的证明：完成的请求归还的物理块被复用时，不改变任何一个 token；请求流中每个请求生成的 token 都与它单独运行时完全相同；处理这个请求流所需的解码步比静态基线少。
