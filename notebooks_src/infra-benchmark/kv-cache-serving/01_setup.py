# %% [markdown] lang="en"
# The [first notebook]({{colab:infra-benchmark/kv-cache}}) of this series proved one configuration: one
# sequence, or a batch of sequences of equal length, with a cache that grows by `torch.cat`. A server
# meets neither. Its requests arrive with prompts of different lengths, finish at different times, and
# share a fixed amount of memory. This notebook builds the three mechanisms that serving systems use for
# that, and checks each one the way the first notebook checked its cache:
#
# * **padding**: sequences of different lengths in one batch, with per-row positions and a padding mask;
# * a **preallocated (static) cache**: one buffer per layer, written in place, never reallocated;
# * a **paged cache**: K/V in fixed-size blocks from a shared pool, with a block table per sequence,
#   blocks returned and reused, and prompts shared between sequences.
#
# Every variant is compared with full recomputation, or with a variant already proven equal to it, and
# has broken twins that the same check must catch. Then
# we measure what paging buys in memory on a simulated workload, and run a small continuous-batching
# loop on top of the paged cache.
#
# Sections: 1 setup · 2 masks from absolute positions · 3 the decoder (both taken unchanged from the
# first notebook) · 4 batches of different lengths · 5 the preallocated cache · 6 the paged cache ·
# 7 memory · 8 continuous batching · 9 and 10 (optional, with `transformers`): Hugging Face GPT-2 as an
# outside referee, first for the decoder (taken from the first notebook, folded), then for padding and
# the static cache · 11 (optional) timing the static and the `torch.cat` step · 12 takeaways and
# exercises.

# %% [markdown] lang="zh"
# 本系列的[第一份笔记本]({{colab:infra-benchmark/kv-cache}})只证明了一种情形：一条序列，或者一个各序列等长的 batch，缓存用 `torch.cat` 逐步增长。推理服务面对的情形与此不同。各个请求的提示（prompt）长短不一，结束得有早有晚，而且要共用总量固定的内存。推理服务系统靠三种机制应对这些问题。本笔记本逐一实现这三种机制，并像第一份笔记本检查缓存那样检查每一种：
#
# * **填充**：长度不同的序列放进同一个 batch，每行有自己的位置和填充掩码；
# * **预分配缓存**（也称静态缓存）：每层一个缓冲区，原地写入，从不重新分配；
# * **分页缓存**：K/V 存放在共享池中大小固定的物理块里，每条序列有一张块表；物理块用完后归还、再被复用，多条序列还能共享同一段提示的物理块。
#
# 每种做法都要与完整重算比较，或者与已经证明等于完整重算的做法比较，并且都配有几个故意改坏的版本，同一项检查必须把它们一一查出。之后，我们在一个模拟负载上衡量分页能省下多少内存，并在分页缓存之上运行一个小小的连续批处理循环。
#
# 目录：1 环境设置 · 2 由绝对位置推出掩码 · 3 解码器（这两节原样取自第一份笔记本） · 4 长度不同的 batch · 5 预分配缓存 · 6 分页缓存 · 7 内存 · 8 连续批处理 · 9 和 10（可选，需要 `transformers`）：请 Hugging Face GPT-2 当外部裁判，先检验解码器（取自第一份笔记本，默认折叠），再检验填充和静态缓存 · 11（可选）为静态缓存和 `torch.cat` 的解码步计时 · 12 要点与练习。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The parameters come first. `QUICK = True` shortens only the timing of section 11 (two prefix lengths
# and fewer rounds); every correctness check and negative control runs in full in both modes. Everything runs
# on the CPU with one thread, in FP32 unless a check asks for FP64, under `torch.inference_mode()`.
# The notebook installs nothing and needs no data file (it reads only the processor's name, from
# `/proc/cpuinfo` where there is one).

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 首先是参数单元格。`QUICK = True` 只缩短第 11 节的计时（只测两个前缀长度，轮数也更少），所有正确性检查和负对照在两种模式下都完整运行。全部计算都在 CPU 上单线程进行，并在 `torch.inference_mode()` 下运行；除非某项检查要求 FP64，一律使用 FP32。本笔记本不安装任何包，也不需要任何数据文件（它只在有 `/proc/cpuinfo` 的系统上从中读取处理器的名称）。

# %% tags=["parameters"]
# [en] True: shorter timing in section 11; every correctness check stays complete.
# [zh] True：缩短第 11 节的计时；所有正确性检查照常完整运行。
QUICK = False
# [en] Seed for the weights, the prompts and the simulated workloads.
# [zh] 权重、提示和模拟负载所用的随机种子。
SEED = 0
# [en] Folder that receives the PNG figures.
# [zh] 存放 PNG 图片的文件夹。
OUTPUT_DIR = "."

# %%
# [en] The notebook's imports. The shared sections taken from the first notebook repeat the ones they use,
# [en] so that each also runs on its own.
# [zh] 本笔记本用到的导入。取自第一份笔记本的共享节会重复导入自己用到的模块，这样每一节单独也能运行。
import copy
import json
import math
import os
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
