# %% [markdown] lang="en"
# *The RoPE section of the [architectures notebook]({{colab:infra-benchmark/kv-cache-architectures}}) explains
# why rotating queries and keys gives attention their positions, and proves it; here is only its code.*

# %% [markdown] lang="zh"
# *[架构笔记本]({{colab:infra-benchmark/kv-cache-architectures}})的 RoPE 一节讲解了为什么旋转查询和键就能把位置交给注意力，并给出了证明；这里只收录它的代码。*
