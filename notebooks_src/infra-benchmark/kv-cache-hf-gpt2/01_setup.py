# %% [markdown] lang="en"
# The notebook *KV cache from scratch* ([open it]({{colab:infra-benchmark/kv-cache}})) builds a
# small two-layer decoder with a KV cache and checks it against itself. This notebook copies that
# decoder's weights into a referee nobody here wrote, Hugging Face's `GPT2LMHeadModel` (section 4 says
# why that matters), and asks whether the two agree, what that agreement is worth, and what it teaches
# about the library.
#
# You need PyTorch (`nn.Linear`, `state_dict`, `load_state_dict`), not transformers. Each section
# answers one question:
#
# - **2–4. What are we comparing, and do the two models agree?** The masks, the decoder and the short
#   comparison with GPT-2 of *KV cache from scratch*, copied unchanged from that notebook.
#   Sections 2 and 3 are folded: if you have read that notebook, skip them. Section 4 is shown open,
#   because the rest of this notebook takes apart its four functions, `gpt2_config`,
#   `gpt2_state_dict`, `build_gpt2` and `compare_with_gpt2`, and examines its result: logits and
#   cached K and V agree within $10^{-10}$ in FP64.
# - **5. Which configuration describes our decoder?** `GPT2Config`'s defaults describe the released
#   GPT-2; we say which fields change and why.
# - **6. How do the weights map?** `nn.Linear` stores its matrix as `[out, in]`, GPT-2's `Conv1D` as
#   `[in, out]`, and GPT-2 computes Q, K and V with one matrix. A figure shows the mapping.
# - **7. Would the comparison notice a mistake?** Three realistic mapping mistakes, and where each
#   first shows up, layer by layer.
# - **8. Why $10^{-10}$ in FP64, not $10^{-5}$ in FP32?** One of the mistakes hides in FP32 rounding.
# - **9. How does the library keep its cache?** `DynamicCache` is an object the model updates in
#   place; how to reuse it, and why it can cut itself back (`crop`).
# - **10. Where does a decode step's time go?** The same decoding job on both, timed, then one step
#   taken apart with the profiler: the same arithmetic, different overhead.
# - **11. What did we learn?** The takeaways, the version notes and saved results, and three exercises.
#
# Two terms recur. The *prompt* is the text a generation starts from; the *prefill* is the first call,
# which runs the whole prompt and fills the cache. Every later call is a *decode step* that feeds one
# new token.
#
# The notebook needs the `transformers` library (Colab ships it). Without it, section 4 says so in one
# sentence, and the later sections skip their cells.

# %% [markdown] lang="zh"
# 笔记本《从零实现 KV 缓存》（[打开]({{colab:infra-benchmark/kv-cache}})）实现了一个带 KV 缓存的两层小解码器，并拿它与自身对照。本笔记本把这个解码器的权重复制进一位不是我们编写的裁判：Hugging Face 的 `GPT2LMHeadModel`（第 4 节说明为什么需要它），然后追问两者是否一致、这种一致有多大的说服力，以及它揭示了这个库的哪些行为。
#
# 阅读本笔记本需要熟悉 PyTorch（`nn.Linear`、`state_dict`、`load_state_dict`），不需要了解 transformers。每一节回答一个问题：
#
# - **第 2–4 节：比较的是什么？两个模型一致吗？** 《从零实现 KV 缓存》中的掩码、解码器以及与 GPT-2 的简短比较，原样照搬自那个笔记本。第 2、3 节的代码已折叠：读过那个笔记本的话，可以跳过。第 4 节展开显示，因为本笔记本后面各节要逐一剖析它的四个函数 `gpt2_config`、`gpt2_state_dict`、`build_gpt2` 和 `compare_with_gpt2`，并检验它的结论：在 FP64 下，logits 以及缓存的 K 和 V 都在 $10^{-10}$ 以内一致。
# - **第 5 节：什么样的配置描述我们的解码器？** `GPT2Config` 的默认值描述的是公开发布的 GPT-2；我们说明改了哪些配置项，以及为什么要改。
# - **第 6 节：权重怎样对应？** `nn.Linear` 把矩阵存成 `[out, in]`，GPT-2 的 `Conv1D` 存成 `[in, out]`，而且 GPT-2 用一个矩阵同时算出 Q、K、V。一张图展示这种对应关系。
# - **第 7 节：映射出错时，比较能查出来吗？** 三个现实中很容易犯的映射错误，以及每个错误最先在哪一层显现。
# - **第 8 节：为什么在 FP64 下取 $10^{-10}$，而不是在 FP32 下取 $10^{-5}$？** 其中一个错误会藏在 FP32 的舍入误差里。
# - **第 9 节：库是怎样保存缓存的？** `DynamicCache` 是一个由模型原地更新的对象；怎样重复使用它，它又为什么能把自己截短（`crop`）。
# - **第 10 节：解码一步的时间花在哪里？** 在两个模型上对同一个解码任务计时，再用性能分析器拆开其中一步来看：运算相同，开销不同。
# - **第 11 节：学到了什么？** 各节要点、版本说明与保存的结果，以及三道练习。
#
# 有两个术语会反复出现。**提示**（prompt）是生成所依据的那段开头文本；**预填充**（prefill）是第一次调用，它把整个提示送进模型，并填满缓存。之后的每次调用都是一个**解码步**，只送入一个新 token。
#
# 本笔记本需要 `transformers` 库（Colab 已预装）。如果没有安装，第 4 节会用一句话说明，后面各节的单元格都直接跳过。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The next cell holds the parameters. `QUICK = True` shortens only the timing race of section 10 (fewer
# warm-up and measured rounds); every correctness check is the same in both modes. Everything runs on
# the CPU with one thread; models are put in `eval()` mode and every model call runs under
# `torch.inference_mode()`. The notebook installs nothing and needs no input file.
# Below, the setup defines `close`; section 4 adds `agrees`, an absolute test on a whole comparison;
# the table right after section 4 sets the notebook's three tests side by side.

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 下一个单元格存放参数。`QUICK = True` 只缩短第 10 节的计时比赛（预热轮数和测量轮数都减少）；两种模式下的正确性检查完全相同。全部计算都在 CPU 上单线程进行：模型处于 `eval()` 模式，每次调用模型都在 `torch.inference_mode()` 下进行。本笔记本不安装任何包，也不需要任何输入文件。下面的环境设置定义了 `close`；第 4 节再加上 `agrees`，它对一整次比较做绝对误差检验；紧接第 4 节之后的表格把本笔记本用到的三种检验并排列出。

# %% tags=["parameters"]
# [en] QUICK: shorter timing (section 10); the correctness checks stay complete.
# [zh] QUICK：缩短计时（第 10 节）；正确性检查保持完整。
QUICK = False
# [en] Seed for the random weights and token streams; folder for the figures.
# [zh] 随机权重和 token 序列的随机种子；图片的输出目录。
SEED = 0
OUTPUT_DIR = "."

# %%
# [en] NumPy and the modules that describe the machine come with the next cell, which every notebook of
# [en] this series shares.
# [zh] NumPy 以及记录机器信息所用的模块由下一个单元格导入，本系列的每份笔记本都共用那个单元格。
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
