# %% [markdown] lang="en"
# The notebook *KV cache from scratch* ([open in Colab]({{colab:infra-benchmark/kv-cache}})) builds a
# small two-layer decoder with a KV cache and checks it against itself. Its last section copies the
# decoder's weights into Hugging Face's `GPT2LMHeadModel` and finds that both models compute the same
# logits and cache the same K and V. This notebook takes that comparison apart. It builds the same
# decoder from the same section files (sections 2 and 3), repeats the short comparison word for word
# (section 4; the companion notebook its introduction mentions is this one), and then asks what the
# comparison is worth and what it shows about the library:
#
# - section 5: the configuration and the weight layout, field by field;
# - section 6: three realistic mapping mistakes, the traps, that the comparison must catch;
# - section 7: why the tolerance is 1e-10, since one trap slips through an FP32 comparison;
# - section 8: the cache object of transformers, `DynamicCache`, and how to reuse it;
# - section 9: the two models racing on the same cached decoding job;
# - section 10: version notes and the saved results.
#
# The notebook needs the `transformers` library (Colab ships it). Without it, section 4 says so in one
# sentence, and the later sections do nothing except record the skip in `results.json`.

# %% [markdown] lang="zh"
# 笔记本《从零实现 KV 缓存》（[在 Colab 中打开]({{colab:infra-benchmark/kv-cache}})）实现了一个带 KV 缓存的两层小解码器，并让它和自己比对。它的最后一节把解码器的权重复制进 Hugging Face 的 `GPT2LMHeadModel`，发现两个模型算出的 logits 相同，缓存的 K 和 V 也相同。本笔记本把这个比较拆开来细看：先用相同的源文件构建同一个解码器（第 2、3 节），再原封不动地重复那个简短的比较（第 4 节；该节开头提到的配套笔记本就是本笔记本），然后追问：这个比较究竟有多大的说服力，它又揭示了这个库的哪些行为？
#
# - 第 5 节：逐项核对配置和权重布局；
# - 第 6 节：三个现实中很容易犯的映射错误，即比较必须抓住的三个陷阱；
# - 第 7 节：容差为什么取 1e-10：有一个陷阱能在 FP32 的比较中蒙混过关；
# - 第 8 节：transformers 的缓存对象 `DynamicCache`，以及如何重复使用它；
# - 第 9 节：两个模型在同一个带缓存的解码任务上比速度；
# - 第 10 节：版本说明与保存结果。
#
# 本笔记本需要 `transformers` 库（Colab 已预装）。如果没有安装，第 4 节会用一句话说明，后面各节只在 `results.json` 里记下跳过的原因，别的什么也不做。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The next cell holds the parameters. `QUICK = True` shortens only the timing race of section 9 (fewer
# warm-up and measured rounds); every correctness check is the same in both modes. Everything runs on
# the CPU with one thread; models are put in `eval()` mode and all computation happens under
# `torch.inference_mode()`. The notebook installs nothing and needs no input file.

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 下一个单元格存放参数。`QUICK = True` 只缩短第 9 节的计时比赛（预热轮数和测量轮数都减少）；两种模式下的正确性检查完全相同。全部计算都在 CPU 上单线程进行：模型处于 `eval()` 模式，所有计算都在 `torch.inference_mode()` 下执行。本笔记本不安装任何包，也不需要任何输入文件。

# %% tags=["parameters"]
# [en] QUICK: shorter timing (section 9); the correctness checks stay complete.
# [zh] QUICK：缩短计时（第 9 节）；正确性检查保持完整。
QUICK = False
# [en] Seed for the random weights and token streams; folder for results.json and figures.
# [zh] 随机权重和 token 序列的随机种子；results.json 和图片的输出目录。
SEED = 0
OUTPUT_DIR = "."

# %%
import json
import math
import os
import platform
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
