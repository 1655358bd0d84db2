# %% [markdown] lang="en"
# One agreement, one negative control: enough to trust the decoder, not yet to know what the agreement
# is worth. The companion notebook *Checking our decoder against Hugging Face GPT-2*
# ([open it]({{colab:infra-benchmark/kv-cache-hf-gpt2}})) takes this comparison apart: the configuration
# field by field, the weight layout in a figure, three realistic mapping mistakes and where each first
# shows up, why the tolerance must be $10^{-10}$ in FP64, how transformers keeps its cache
# (`DynamicCache`, and `crop` for speculative decoding), and a timing race between the two models with a
# profile of one decode step.

# %% [markdown] lang="zh"
# 一次一致的比较，加上一个负对照，足以让我们信任这个解码器，但还说明不了这种一致有多大分量。配套笔记本《用 Hugging Face GPT-2 检验我们的解码器》（[打开]({{colab:infra-benchmark/kv-cache-hf-gpt2}})）会把这个比较拆开来看：逐项核对配置；用一幅图展示权重的存储布局；三个现实中很容易犯的映射错误，以及每个错误最先在哪一层显现；为什么容差必须是 FP64 下的 $10^{-10}$；transformers 怎样保存缓存（`DynamicCache`，以及投机解码（speculative decoding）所用的 `crop`）；最后是两个模型之间的计时比赛，并对其中一个解码步做性能分析。
