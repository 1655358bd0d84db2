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
# · 5 the decoder · 6 equivalence · 7 broken variants · 8 timing · 9 saved results · 10 appendix: an
# outside referee, Hugging Face GPT-2.

# %% [markdown] lang="zh"
# KV 缓存保存的是每个注意力层已经算好的键（K）和值（V）。新 token 到来时，只有新 token 需要经过网络：它们的查询（Q）读取缓存里的 K/V，于是旧 token 照样参与注意力计算，却不必重新计算。
#
# 这份笔记本只回答一个很具体的问题：**多层 Transformer 每次只输入最新的 token，能否与重算整个前缀给出相同的结果**？要做到这一点，有三件事必须对得上：每个缓存项属于哪一层；新 token 的绝对位置是多少；每个查询可以读取哪些键。我们会实现一个未经训练的两层小解码器，用断言把它与完整重算逐一比对，再故意把它改坏，看这些检查能不能发现问题。随机权重就够了：我们比较的是同一个函数的两种计算方式，而不是它写出的文本好不好。
#
# 目录：1 环境设置 · 2 六个 token 的例子 · 3 由绝对位置推出掩码 · 4 单头注意力 · 5 解码器 · 6 等价性 · 7 故意改坏的版本 · 8 计时 · 9 保存结果 · 10 附录：请 Hugging Face GPT-2 当外部裁判。

# %% [markdown] lang="en"
# ## 1. Setup
#
# The next cell holds the parameters. `QUICK = True` shortens only the timing experiments (fewer
# prompt lengths, warm-ups and rounds in section 8, fewer rounds in the appendix's race, section 10.5);
# the correctness checks are the same in both modes, for example all 12 equivalence configurations of
# section 6. Everything runs on the CPU with one thread,
# in 32-bit floats unless a check asks for FP64 (section 6 repeats its grid in FP64); models are put in
# `eval()` mode and all computation happens under `torch.inference_mode()`.
# The notebook installs nothing and needs no input file: on Colab, PyTorch, NumPy and Matplotlib are
# already there.

# %% [markdown] lang="zh"
# ## 1. 环境设置
#
# 下一个代码单元格是参数单元格。`QUICK = True` 只会缩短计时实验（第 8 节减少提示长度、预热轮数和测量轮数，附录第 10.5 节的计时比赛减少轮数）；两种模式下的正确性检查完全相同，例如第 6 节的 12 种等价性配置都会全部运行。全部计算都在 CPU 上单线程进行，默认使用 32 位浮点数（FP32），只有需要 FP64 的检查例外（第 6 节会用 FP64 把整个网格再跑一遍）；模型处于 `eval()` 模式，前向计算一律放在 `torch.inference_mode()` 中。本笔记本不安装任何包，也不需要任何输入文件：Colab 已经自带 PyTorch、NumPy 和 Matplotlib。

# %% tags=["parameters"]
QUICK = False      # True: shorter timing runs (sections 8 and 10); every correctness check stays complete
SEED = 0           # seed for the random weights and the fixed token streams
OUTPUT_DIR = "."   # folder that receives results.json and the PNG figures

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

# %%
def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo on Linux, else whatever the platform module reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


torch.set_num_threads(1)
torch.set_default_dtype(torch.float32)
IN_COLAB = "google.colab" in sys.modules
OUT = Path(OUTPUT_DIR)
OUT.mkdir(parents=True, exist_ok=True)

ENVIRONMENT = {
    "python": platform.python_version(),
    "torch": torch.__version__,
    "numpy": np.__version__,
    "platform": platform.platform(),
    "cpu": cpu_name(),
    "threads": torch.get_num_threads(),
}
assert ENVIRONMENT["threads"] == 1
assert torch.get_default_dtype() == torch.float32
assert torch.get_default_device().type == "cpu"
for key, value in ENVIRONMENT.items():
    print(f"{key:>9}: {value}")
