# %% [markdown] lang="en"
# The [first notebook]({{colab:infra-benchmark/kv-cache}}) built a KV cache for a GPT-2-like decoder:
# every attention head keeps its own keys and values, and positions are learned vectors added to the
# token embeddings. The models a reader meets next (Llama, Mistral, Qwen, Gemma) change exactly the
# parts a cache depends on. They encode positions by rotating Q and K; most recent ones (from Llama 2 70B,
# Llama 3, Mistral 7B, Qwen2 and Gemma 2 on) keep fewer K/V heads than query heads, while Llama 1, Llama 2
# 7B/13B and Gemma 7B still give every query head its own; some let a query read only a window of recent
# keys; and serving systems store K/V in fewer bits and compute attention with fused kernels.
#
# This notebook takes these changes one at a time and proves each the way the first notebook proved
# its cache: the cached path must equal full recomputation (or, once exactness is given up on purpose,
# stay within a stated bound), a deliberately broken variant must be caught, by the same check or, where that
# check is blind to it, by one that says why, and where an outside implementation exists, Hugging Face models built from the same random weights must agree
# with ours in FP64.
#
# Sections: 1 setup · 2 masks from absolute positions · 3 the decoder (both from the first notebook)
# · 4 grouped-query and multi-query attention · 5 rotary position embeddings · 6 sliding windows · 7
# quantized caches · 8 fused attention · 9 memory and cost of the variants · an optional appendix on two
# rounding findings (before section 10, because its measurements are saved too) · 10 summary and saved results
# · 11 takeaways and exercises.

# %% [markdown] lang="zh"
# [第一份笔记本]({{colab:infra-benchmark/kv-cache}})为一个类似 GPT-2 的解码器实现了 KV 缓存：每个注意力头都保留自己的 K 和 V，位置则是加到 token 嵌入上的可学习向量。读者接下来会遇到的模型（Llama、Mistral、Qwen、Gemma）恰恰改动了缓存所依赖的那几处。第一，位置信息通过旋转 Q 和 K 来编码。第二，近来的多数模型（从 Llama 2 70B、Llama 3、Mistral 7B、Qwen2 和 Gemma 2 起）K/V 头比查询头少，而 Llama 1、Llama 2 7B/13B 和 Gemma 7B 仍让每个查询头各有自己的 K/V 头。第三，有的模型只让查询读取最近一段窗口内的键。此外，推理服务系统会用更少的比特存放 K/V，并用融合内核（fused kernel）计算注意力。
#
# 本笔记本逐一考察这些改动，并沿用第一份笔记本证明缓存的方法来证明每一项。缓存路径必须与完整重算一致；如果有意放弃了精确性，误差就必须落在明确写出的界内。故意改坏的版本必须被查出：或者由同一项检查查出，或者在那项检查察觉不到它时，由另一项说明了原因的检查查出。凡是有外部实现可供对照的地方，用同一份随机权重构建的 Hugging Face 模型都必须在 FP64 下与我们的实现一致。
#
# 目录：1 环境设置 · 2 由绝对位置推出掩码 · 3 解码器（这两节取自第一份笔记本）· 4 分组查询注意力与多查询注意力 · 5 旋转位置编码 · 6 滑动窗口 · 7 量化缓存 · 8 融合注意力 · 9 各变体的内存与开销 · 附录（可选）：两处舍入现象（放在第 10 节之前，因为它的测量结果也要保存）· 10 汇总与保存的结果 · 11 要点与练习。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The parameters come first. `QUICK = True` shortens only the timing of section 8 (fewer rounds); every
# correctness check and every negative control runs in full in both modes. Everything runs on the CPU
# with one thread, in FP32 unless a check asks for FP64; models are in `eval()` mode and all computation
# happens under `torch.inference_mode()`. The notebook needs only PyTorch, NumPy and Matplotlib. The
# cross-checks against Hugging Face models also need `transformers`; without it they are skipped with
# one sentence each, and everything else runs. Numbers quoted in the prose come from the run that built the
# notebook; the output under each cell is your own run's.

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 首先是参数。`QUICK = True` 只缩短第 8 节的计时（测量轮数更少），两种模式下的所有正确性检查和负对照都完整运行。全部计算都在 CPU 上单线程进行；除非某项检查要求 FP64，否则一律使用 FP32。模型处于 `eval()` 模式，所有计算都在 `torch.inference_mode()` 下进行。本笔记本只需要 PyTorch、NumPy 和 Matplotlib。与 Hugging Face 模型的交叉核对还需要 `transformers`；没有安装时，每项交叉核对只用一句话说明已跳过，其余内容照常运行。正文中引用的数字来自构建本笔记本时的那次运行；每个单元格下方的输出则是你自己这次运行的结果。

# %% tags=["parameters"]
# [en] QUICK = True: fewer timing rounds in section 8; every correctness check stays complete.
# [zh] QUICK = True：第 8 节的计时轮数更少；所有正确性检查保持完整。
QUICK = False
# [en] Seed of the random weights and of the fixed token streams.
# [zh] 随机权重和固定 token 序列所用的随机种子。
SEED = 0
# [en] Folder for the PNG figures (the build also writes results.json there).
# [zh] 存放 PNG 图片的文件夹（构建时 results.json 也写在这里）。
OUTPUT_DIR = "."

# %%
import copy
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
