# %% [markdown] lang="en"
# ## 5. Local, global and shared layers
#
# A sliding window bounds a layer's cache: a query reads itself and the $W - 1$ positions before it, so the layer
# never needs more than the newest $W - 1$ keys (the architectures notebook proved this with one window for the
# whole model). Windowing every layer limits how far the model can look back, so recent models mix **local**
# (windowed) layers with a few **global** ones that read everything. Gemma 2 alternates them one to one (window
# 4,096); Gemma 3 uses five local layers (window 1,024) per global layer, which is also the default `layer_types`
# pattern of transformers' `Gemma3TextConfig` (every sixth layer global). The cache of such a model is a mix too:
# a ring buffer of $W - 1$ positions for each local layer, a full cache for each global one.
#
# The ring buffer and the windowed attention layer come from the architectures notebook, included next. The cell
# after them shows the band mask for a small window, $W = 3$: the queries at positions 4 and 5 each read themselves
# and the two positions before them.

# %% [markdown] lang="zh"
# ## 5. 局部层、全局层与共享层
#
# 滑动窗口给一层的缓存设了上限：每个查询只读取自己和前面 $W - 1$ 个位置，所以这一层最多只需要最新的 $W - 1$ 个键（架构笔记本在整个模型共用一个窗口的情形下证明了这一点）。可是如果每一层都带窗口，就会限制模型能回看多远，因此近来的模型把**局部**（带窗口的）层和少数几个读取全部内容的**全局**层混合起来用。Gemma 2 让两者一比一交替（窗口 4,096）；Gemma 3 每个全局层配五个局部层（窗口 1,024），这也是 transformers 中 `Gemma3TextConfig` 默认的 `layer_types` 模式（每六层中有一层是全局层）。这样的模型，缓存也是混合的：每个局部层一个 $W - 1$ 个位置的环形缓冲区，每个全局层一个完整缓存。
#
# 环形缓冲区和带窗口的注意力层取自架构笔记本，下面一并收录。其后的单元格给出小窗口 $W = 3$ 时的带状掩码：位置 4 和 5 上的查询各自读取自己和它前面的两个位置。
