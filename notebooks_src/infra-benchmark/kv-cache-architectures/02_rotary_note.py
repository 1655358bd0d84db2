# %% [markdown] lang="en"
# *You can skip the RoPE code below until section 5, which explains why it works and proves it: the attention
# layer rotates only when the configuration sets `rope=True`, and no model before section 5 does.*

# %% [markdown] lang="zh"
# *下面的 RoPE 代码可以先略过，读到第 5 节再回来看；第 5 节会讲解它的原理并给出证明。只有配置中设了 `rope=True`，注意力层才会做旋转，而第 5 节之前的模型都没有这样设置。*
