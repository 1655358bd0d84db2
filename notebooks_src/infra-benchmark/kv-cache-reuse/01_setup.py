# %% [markdown] lang="en"
# The [first notebook]({{colab:infra-benchmark/kv-cache}}) of this series proved that a KV cache gives the
# same logits as full recomputation, and the [serving notebook]({{colab:infra-benchmark/kv-cache-serving}})
# stored that cache in fixed-size blocks shared by many sequences. This notebook asks what a serving system
# does with the cache next, and why it bothers:
#
# * **reuse it across requests** (prefix caching): requests that start with the same system prompt find
#   its K/V already computed, looked up by the content of each block, as vLLM's automatic prefix caching
#   does;
# * **roll it back** (speculative decoding): a small draft model guesses several tokens, the model we want
#   checks them all in one call, and the cache entries of the wrong guesses are cut off again;
# * **read it in parallel** (split-K decoding, the idea of Flash-Decoding): one query's attention over a
#   long cache, computed piece by piece and merged exactly;
# * **and why all this matters**: a decode step reads every weight and the whole cache to do very little
#   arithmetic, so its speed is set by memory bandwidth, not by how fast the processor multiplies.
#
# Each mechanism is checked the way the earlier notebooks checked theirs: against the plain computation,
# with a deliberately broken variant that the same check must catch.
#
# Sections: 1 setup · 2 masks and 3 the decoder (from the first notebook) · 4 a block pool with a content
# index · 5 serving requests with a prefix cache · 6 speculative decoding · 7 split-K decoding · 8 what a
# decode step reads and computes · 9 the roofline of one core of this machine · 10 and 11 (optional, with
# `transformers`): Hugging Face GPT-2 as referee for the decoder and for speculative decoding · 12 takeaways
# and exercises. On a first read, follow 4 to 8, section 9 up to its figure, and 12; sections 2,
# 3 and 10 repeat the first notebook, and the parts marked optional can wait. Sections 6 and 7 use section 8's
# result, that a decode step is memory-bound, before section 8 derives it.

# %% [markdown] lang="zh"
# 本系列的[第一份笔记本]({{colab:infra-benchmark/kv-cache}})证明了 KV 缓存给出的 logits 与完整重算相同；[服务笔记本]({{colab:infra-benchmark/kv-cache-serving}})则把缓存存进大小固定、由许多序列共用的物理块。本笔记本回答两个问题：推理服务系统接下来还会拿缓存做什么？为什么要这样做？
#
# * **跨请求复用缓存**，即前缀缓存（prefix caching）：以同一段系统提示（system prompt）开头的请求，会发现这段提示的 K/V 已经算好了；查找时按每个物理块的内容来找，vLLM 的自动前缀缓存就是这样做的；
# * **回滚缓存**，即投机解码（speculative decoding）：一个小的草稿模型先猜出几个 token，我们真正要用的模型在一次调用里把它们全部验证一遍，再把猜错的 token 留下的缓存项截掉；
# * **并行读取缓存**（split-K 解码，也就是 Flash-Decoding 的思路）：一个查询对一段很长的缓存做注意力，可以分段计算，再精确地合并起来；
# * **以及这些为什么重要**：一个解码步要读取全部权重和整个缓存，却只做很少的运算，所以它的速度取决于内存带宽，而不是处理器做乘法有多快。
#
# 每种机制都像前面几份笔记本那样接受检查：与最直接的计算方式比较，并配上一个故意改坏的版本，同一项检查必须把它查出来。
#
# 目录：1 环境设置 · 2 掩码与 3 解码器（取自第一份笔记本） · 4 带内容索引的物理块池 · 5 用前缀缓存服务请求 · 6 投机解码 · 7 split-K 解码 · 8 一个解码步读了什么、算了什么 · 9 本机单个核心的 Roofline 模型 · 10 和 11（可选，需要 `transformers`）：请 Hugging Face GPT-2 当裁判，分别检验解码器和投机解码 · 12 要点与练习。初读时，读第 4 到第 8 节、第 9 节中图以前的部分，以及第 12 节即可；第 2、3、10 节重复第一份笔记本的内容，标为可选的部分可以以后再看。第 6、7 节会先用到第 8 节的结论（解码步受限于内存带宽），第 8 节再推导它。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The parameters come first. `QUICK = True` runs a shorter request stream in section 5, fewer prompts and
# values of $k$ in sections 6 and 11, and smaller benchmarks in section 9; every check and every negative control runs in both
# modes. Everything runs on the CPU with one thread, in FP32 unless a check asks for FP64, under
# `torch.inference_mode()`. The notebook installs nothing and needs no data file (it reads only the processor's
# name, from `/proc/cpuinfo` where there is one).

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 首先是参数。`QUICK = True` 会让第 5 节的请求流更短，第 6 节和第 11 节的提示更少、$k$ 的取值更少，第 9 节的基准测试更小；两种模式下，每项检查和每个负对照都照常运行。全部计算都在 CPU 上单线程进行，除非某项检查要求 FP64，否则一律使用 FP32，并在 `torch.inference_mode()` 下运行。本笔记本不安装任何包，也不需要任何数据文件（它只读取处理器的名称：有 `/proc/cpuinfo` 时从那里读）。

# %% tags=["parameters"]
# [en] True: a shorter request stream, fewer prompts, smaller benchmarks; every check stays.
# [zh] True：请求流更短、提示更少、基准测试更小；所有检查照常进行。
QUICK = False
# [en] Seed for the weights, the prompts and the request stream.
# [zh] 权重、提示和请求流所用的随机种子。
SEED = 0
# [en] Folder that receives the PNG figures.
# [zh] 存放 PNG 图片的文件夹。
OUTPUT_DIR = "."

# %%
import copy
import hashlib
import math
import random
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
