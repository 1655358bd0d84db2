# %% [markdown] lang="en"
# A KV cache keeps the keys and values that every attention layer has already computed. When new
# tokens arrive, only they pass through the network: their queries read the stored keys and values,
# so earlier tokens still take part in attention without being recomputed.
#
# The question of this notebook is narrow: **can a multilayer Transformer that sees only the newest
# tokens give the same answer as one that recomputes the whole prefix?** Three conventions have to
# agree for that to hold: which layer owns which cache entry, the absolute positions of the new
# tokens, and which keys each query may read. We build a small, untrained two-layer decoder, check it
# against full recomputation with assertions, and then break it on purpose to show that the checks
# notice. Random weights are enough: we compare two ways of evaluating the same function, not the
# quality of the text it would write.
#
# Sections: 1 setup · 2 a six-token example · 3 masks from absolute positions · 4 one attention head
# · 5 the decoder · 6 equivalence, and greedy generation with and without the cache · 7 broken variants
# · 8 what caching removes and what remains: the count, three questions learners ask, the cache of
# published models · 9 timing on this CPU: the headline, why the cache wins by less than the work ratio,
# a whole generation, and an optional appendix (measurement notes, a profile of one decode step) · 10 saved results · 11 an outside referee, Hugging Face GPT-2
# (optional; the full comparison has its own companion notebook) · 12 takeaways and exercises.
#
# **Scope.** The decoder here is deliberately plain: one sequence length per batch, one K/V head per
# attention head, learned absolute positions, a cache that grows by concatenation, a straightforward
# generation loop. Left out, and treated in companion notebooks of this series: padding,
# preallocated and paged caches and continuous batching (`infra-benchmark/kv-cache-serving`,
# [open it]({{colab:infra-benchmark/kv-cache-serving}})); grouped-query attention, rotary
# position embeddings (RoPE), sliding windows, quantized caches and fused attention kernels
# (`infra-benchmark/kv-cache-architectures`,
# [open it]({{colab:infra-benchmark/kv-cache-architectures}})); multi-head latent attention (MLA), local and
# shared layers, attention sinks and eviction (`infra-benchmark/kv-cache-compression`,
# [open it]({{colab:infra-benchmark/kv-cache-compression}})). They reuse the masks and the decoder
# of sections 3 and 5.

# %% [markdown] lang="zh"
# KV 缓存保存的是每个注意力层已经算好的键（K）和值（V）。新 token 到来时，只有新 token 需要经过网络：它们的查询（Q）读取缓存里的 K/V，于是旧 token 照样参与注意力计算，却不必重新计算。
#
# 这份笔记本只回答一个很具体的问题：**一个多层 Transformer 如果每次只输入最新的 token，能否与重算整个前缀的模型给出相同的结果**？要做到这一点，有三件事必须对得上：每个缓存项属于哪一层；新 token 的绝对位置是多少；每个查询可以读取哪些键。我们会实现一个未经训练的两层小解码器，用断言检查它与完整重算的结果是否一致，再故意把它改坏，看这些检查能不能查出问题。随机权重就够了：我们比较的是同一个函数的两种计算方式，而不是它写出的文本好不好。
#
# 目录：1 环境设置 · 2 六个 token 的例子 · 3 由绝对位置推出掩码 · 4 单头注意力 · 5 解码器 · 6 等价性，以及用缓存与不用缓存的贪心生成 · 7 故意改坏的版本 · 8 缓存省掉了什么，又留下了什么：乘加计数、学习者常问的三个问题、公开模型的缓存大小 · 9 在这台 CPU 上计时：主要结论、缓存的优势为什么远小于工作量之比、一次完整的生成，以及可选的附录（测量说明、一个解码步的性能分析） · 10 保存结果 · 11 外部裁判 Hugging Face GPT-2（选读；完整的比较见配套笔记本） · 12 要点与练习。
#
# **不涉及的内容**：这里的解码器有意写得很朴素。同一 batch 内的序列长度相同，每个注意力头对应一个 K/V 头，位置用可学习的绝对位置嵌入，缓存靠拼接增长，生成循环也是最直接的写法。以下内容不在本笔记本的范围内，由本系列的配套笔记本讨论：填充、预分配缓存与分页缓存、连续批处理（`infra-benchmark/kv-cache-serving`，[打开]({{colab:infra-benchmark/kv-cache-serving}})）；分组查询注意力（GQA）、旋转位置编码（RoPE）、滑动窗口、量化缓存和融合注意力（`infra-benchmark/kv-cache-architectures`，[打开]({{colab:infra-benchmark/kv-cache-architectures}})）；多头潜在注意力（MLA）、局部层与共享层、注意力汇聚点和淘汰（`infra-benchmark/kv-cache-compression`，[打开]({{colab:infra-benchmark/kv-cache-compression}})）。这些笔记本都复用第 3 节的掩码和第 5 节的解码器。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The next cell holds the parameters. `QUICK = True` shortens only the timing experiments (fewer
# prompt lengths, warm-ups, rounds and generated tokens in section 9);
# the correctness checks are the same in both modes, for example all 12 equivalence configurations of
# section 6. Everything runs on the CPU with one thread,
# in 32-bit floats unless a check asks for FP64 (section 6 repeats its grid in FP64); models are put in
# `eval()` mode and all computation happens under `torch.inference_mode()`.
# The notebook installs nothing and needs no input file: on Colab, PyTorch, NumPy and Matplotlib are
# already there.

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 下一个代码单元格存放参数。`QUICK = True` 只会缩短计时实验：第 9 节少测几种提示（prompt）长度，预热轮数、测量轮数和生成的 token 数也更少。两种模式下的正确性检查完全相同，例如第 6 节的全部 12 种等价性配置都会运行。全部计算都在 CPU 上单线程进行，默认使用 32 位浮点数（FP32），只有需要 FP64 的检查例外（第 6 节会用 FP64 把整个网格再跑一遍）；模型处于 `eval()` 模式，所有计算都在 `torch.inference_mode()` 中进行。本笔记本不安装任何包，也不需要任何输入文件：Colab 已经自带 PyTorch、NumPy 和 Matplotlib。

# %% tags=["parameters"]
# [en] QUICK = True: shorter timing runs (section 9); every correctness check stays complete.
# [en] SEED: the random weights and the fixed token streams. OUTPUT_DIR: where the PNG figures go.
# [zh] QUICK = True：缩短计时（第 9 节），正确性检查一项不少。SEED：决定随机权重和固定的
# [zh] token 序列。OUTPUT_DIR：PNG 图片的保存位置。
QUICK = False
SEED = 0
OUTPUT_DIR = "."

# %%
# [en] NumPy, torch and the modules that describe the machine come with the next code cell, which every
# [en] notebook of this series shares.
# [zh] NumPy、torch 以及记录机器信息所用的模块由下一个代码单元格导入，本系列的每份笔记本都共用那个单元格。
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch.nn as nn
import torch.nn.functional as F
