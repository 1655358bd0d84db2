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
# The plan:
#
# - section 2 runs a six-token example with and without the cache and compares the two;
# - section 3 shows why the new tokens must be numbered from the cache length, not from zero;
# - section 4 draws the mask of a chunk that follows a cache, and the two ways of aligning a causal
#   triangle on a score grid that is not square;
# - section 5 lets you change the cache and chunk lengths and look again;
# - section 6 repeats the comparison for one attention head, counting the rows each path projects;
# - section 7 sums up, and ends with exercises.
#
# Each claim is checked in the cell that makes it. In sections 2 to 6, each check that the cached path
# equals the full pass sits next to a *negative control*: a deliberately wrong variant that the same check
# must reject, which shows the check can fail.

# %% [markdown] lang="zh"
# ## 1. 核心思路
#
# 解码器每生成一个新 token，都要用到它之前所有位置的键（K）和值（V）。**KV 缓存**就是把这些算好的 K 和 V 存起来。这样，下一次调用只需对新 token 做投影，新 token 的查询（Q）直接读取缓存里的历史。旧 token 仍然参与注意力计算，只是不必再经过一遍网络。
#
# 要让用缓存算出的结果与不用缓存时相同，有三条约定必须对得上：每个缓存项属于哪一层；新 token 的绝对位置是多少；每个新查询可以读取哪些键。本笔记本只用 NumPy，在一个权重随机的玩具注意力层上讲清楚后两条。它足够轻量，可以直接在浏览器标签页里运行（JupyterLite），在 Jupyter 或 Colab 中同样能运行，而且不需要下载任何模型。
#
# 内容安排如下：
#
# - 第 2 节用一个六个 token 的例子，分别在用缓存和不用缓存时计算，并比较两者；
# - 第 3 节说明为什么新 token 的位置要从缓存长度接着数，而不是从零开始；
# - 第 4 节画出接在缓存之后的分块所用的掩码，并比较在非方阵的分数网格上对齐因果三角形的两种方式；
# - 第 5 节让你改变缓存长度和分块长度，再看一遍；
# - 第 6 节在单个注意力头上重复这个比较，并统计两条路径各投影了多少行；
# - 第 7 节总结要点，最后是练习。
#
# 每条结论都在给出它的那个单元格中检查。在第 2–6 节中，每项“缓存路径与完整调用一致”的检查旁边都配有一个**负对照**（negative control）：一个故意改错的版本，同样的检查必须把它查出来，这说明检查确实会失败。

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
say(en=f"Python {sys.version.split()[0]}, NumPy {np.__version__}.",
    zh=f"Python 版本：{sys.version.split()[0]}；NumPy 版本：{np.__version__}。")
if in_browser:
    say(en="Running in the browser (Pyodide).", zh="正在浏览器中运行（Pyodide）。")
else:
    say(en="Running in a regular Python kernel.", zh="正在普通的 Python 内核中运行。")
