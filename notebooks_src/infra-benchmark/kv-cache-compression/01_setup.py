# %% [markdown] lang="en"
# The [architectures notebook]({{colab:infra-benchmark/kv-cache-architectures}}) shrank the KV cache in
# three ways: fewer K/V heads (GQA, MQA), a sliding window, and fewer bits per number. Recent models and
# serving systems go further. This notebook builds four of their ideas, each small enough to read in one
# sitting:
#
# * **Multi-head latent attention (MLA)**, from DeepSeek-V2 and DeepSeek-V3: every layer caches one short
#   *latent* vector per token plus a small key that carries the position, instead of a key and a value per
#   head. The up-projections that turn the latent back into keys and values can be *absorbed* into the query
#   and the output, so that decoding never builds the full keys and values.
# * **Local and global layers**, as in Gemma 3: most layers read only a window of recent tokens and keep a
#   small ring buffer; a few layers read everything and keep everything.
# * **Layers that share one cache** (cross-layer attention): a layer reads the keys and values the layer
#   below it wrote, and caches nothing itself.
# * **Caches that keep only some tokens**: StreamingLLM's *attention sinks* (the first tokens plus a window)
#   and two eviction policies, H2O (heavy hitters) and SnapKV (an observation window).
#
# The first three change the model but keep the cache **exact**: each model's cached path must compute exactly
# what its own full recomputation computes, and we prove it as the earlier notebooks did (every logit and
# every cached tensor, batch 1 and 2, chunks of 1, 2 and 5 tokens, FP32 and FP64), with a negative control
# for every check and, where transformers has the architecture, a Hugging Face model as referee. The last
# family is **approximate**: evicting tokens changes the answer, so we measure by how much, against dense
# attention, as the architectures notebook judged its quantized caches.
#
# Sections: 1 setup · 2 a Llama-shaped decoder with one cache object per layer (what this notebook takes from the
# earlier ones) · 3 multi-head latent attention · 4 the cost of MLA · 5 local, global and shared layers · 6 attention
# sinks · 7 eviction policies · 8 what this run checked · 9 takeaways and exercises.
#
# **Scope.** Everything runs on a CPU with tiny random models, so we prove that each cache computes what it
# claims and count what it stores and computes; we do not measure speed on a GPU, and random weights cannot
# tell whether an approximate cache keeps a trained model's answers (section 7 says what the papers measured
# instead).

# %% [markdown] lang="zh"
# [架构笔记本]({{colab:infra-benchmark/kv-cache-architectures}})用三种办法缩小了 KV 缓存：减少 K/V 头（GQA、MQA）、使用滑动窗口，以及用更少的比特存放每个数。近来的模型和推理服务系统走得更远。本笔记本实现其中的四种思路，每一种都小到可以一口气读完：
#
# * **多头潜在注意力（MLA）**，出自 DeepSeek-V2 和 DeepSeek-V3：每一层为每个 token 只缓存一个较短的**潜向量**，外加一个携带位置信息的小键，而不是每个头各存一个键和一个值。把潜向量还原成键和值的上投影可以被**吸收**进查询和输出，因此解码时根本不必构造完整的键和值。
# * **局部层与全局层**，如 Gemma 3：大多数层只读取最近一段窗口内的 token，只保留一个小小的环形缓冲区；少数几层读取全部 token，也保留全部 token。
# * **共享同一份缓存的层**（跨层注意力）：某一层读取它下面那一层写入的键和值，自己什么也不缓存。
# * **只保留部分 token 的缓存**：StreamingLLM 的**注意力汇聚点**（attention sink）做法：保留最前面的几个 token，再加一段窗口；以及两种淘汰策略：保留重要 token（heavy hitter）的 H2O 和使用观察窗口的 SnapKV。
#
# 前三种改变了模型，但缓存仍是**精确的**：每个模型的缓存路径都必须与它自己的完整重算给出完全相同的结果。我们像前几份笔记本那样证明这一点：比较每个 logit 和每个缓存的张量，batch 为 1 和 2，分块长度为 1、2、5 个 token，FP32 和 FP64；每项检查都配一个负对照；只要 transformers 实现了相应的架构，就再请一个 Hugging Face 模型当裁判。最后一类是**近似的**：淘汰 token 会改变结果，所以我们像架构笔记本评判量化缓存那样，以稠密注意力为基准，测量结果改变了多少。
#
# 目录：1 环境设置 · 2 每层一个缓存对象的 Llama 结构解码器（本笔记本从前几份笔记本中沿用的内容）· 3 多头潜在注意力 · 4 MLA 的开销 · 5 局部层、全局层与共享层 · 6 注意力汇聚点 · 7 淘汰策略 · 8 本次运行检查了什么 · 9 要点与练习。
#
# **不涉及的内容**：全部计算都在 CPU 上用很小的随机权重模型完成。因此，我们证明的是每种缓存确实计算了它声称的内容，并统计它存了多少、算了多少；我们不在 GPU 上测速度。随机权重也无法说明一个近似缓存能否保住训练好的模型的答案（第 7 节会说明论文实际测量的是什么）。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The parameters come first. `QUICK = True` shortens only the eviction sweep of section 7 (fewer budgets,
# fewer prompts, fewer steps); every exactness check and every negative control runs in full in both modes.
# Everything runs on the CPU with one thread, in FP32 unless a check asks for FP64; models are in `eval()`
# mode and all computation happens under `torch.inference_mode()`. The notebook needs only PyTorch, NumPy and
# Matplotlib. The Hugging Face referees also need `transformers`; without it they are skipped, each with one
# sentence, and everything else runs.

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 首先是参数。`QUICK = True` 只会缩短第 7 节的淘汰扫描（预算更少、提示（prompt）更少、步数更少）；两种模式下，所有精确性检查和负对照都完整运行。全部计算都在 CPU 上单线程进行，除非某项检查要求 FP64，否则一律使用 FP32；模型处于 `eval()` 模式，所有计算都在 `torch.inference_mode()` 下进行。本笔记本只需要 PyTorch、NumPy 和 Matplotlib。Hugging Face 裁判还需要 `transformers`；没有安装它时，每个裁判只用一句话说明跳过，其余内容照常运行。

# %% tags=["parameters"]
# [en] QUICK = True: a shorter eviction sweep in section 7; every exactness check stays complete.
# [zh] QUICK = True：第 7 节的淘汰扫描更短；所有精确性检查保持完整。
QUICK = False
# [en] Seed of the random weights and of the fixed token streams.
# [zh] 随机权重和固定 token 序列所用的随机种子。
SEED = 0
# [en] Folder that receives the PNG figures.
# [zh] 存放 PNG 图片的文件夹。
OUTPUT_DIR = "."

# %%
import copy
import json
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode
