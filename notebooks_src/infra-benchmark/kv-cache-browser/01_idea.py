# %% [markdown] lang="en"
# ## 1. The idea
#
# A decoder that generates text needs, for every new token, the keys and values of all the
# positions before it. A **KV cache** stores those keys and values once they have been computed.
# The next call then projects only the new tokens, and their queries read the stored history.
# The old tokens still take part in attention; they simply do not travel through the network again.
#
# For the cached answer to equal the uncached one, three conventions have to agree: which layer
# each cache belongs to, the absolute positions of the new tokens, and which keys each new query
# is allowed to read. This notebook works through the last two with NumPy alone, on one toy
# attention layer with random weights. It is small enough to run in a browser tab (JupyterLite),
# and it runs just as well in Jupyter or Colab. No model is downloaded.
#
# Every statement that depends on a number is checked by an `assert` in the code, so if you change
# something and a claim stops being true, the cell says so.

# %% [markdown] lang="zh"
# ## 1. 核心思路
#
# 解码器每生成一个新 token，都要用到它之前所有位置的键（K）和值（V）。**KV 缓存**就是把这些算好的 K 和 V 存起来。这样，下一次调用只需对新 token 做投影，新 token 的查询（Q）直接读取缓存里的历史。旧 token 仍然参与注意力计算，只是不必再经过一遍网络。
#
# 要让用缓存算出的结果与不用缓存时相同，有三条约定必须对得上：每份缓存属于哪一层；新 token 的绝对位置是多少；每个新查询可以读取哪些键。本笔记本只用 NumPy，在一个权重随机的玩具注意力层上把后两条约定逐一讲清楚。它足够轻量，可以直接在浏览器标签页里运行（JupyterLite），在 Jupyter 或 Colab 中同样能运行，而且不需要下载任何模型。
#
# 凡是依赖具体数值的说法，代码里都有对应的 `assert` 检查：如果你改了某处，导致某个结论不再成立，相应的单元格就会报错。

# %% tags=["parameters"]
# [en] Seed for the random toy weights and inputs.
# [zh] 玩具模型的随机权重和输入所用的随机种子。
SEED = 0

# %%
import math
import sys

import numpy as np



rng = np.random.default_rng(SEED)
# [en] Pyodide, the Python inside JupyterLite, reports the platform "emscripten".
# [zh] JupyterLite 里的 Python（Pyodide）报告的平台是 "emscripten"。
in_browser = sys.platform == "emscripten"
print(f"Python {sys.version.split()[0]}, NumPy {np.__version__}")
if in_browser:
    say(en="Running in the browser (Pyodide).", zh="正在浏览器中运行（Pyodide）。")
else:
    say(en="Running in a regular Python kernel.", zh="正在普通的 Python 内核中运行。")
