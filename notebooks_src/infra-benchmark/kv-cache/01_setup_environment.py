# %% [markdown] lang="en"
# The next cell pins the run to one CPU thread and 32-bit floats, creates the output folder, and
# records the environment (Python, PyTorch, NumPy, the platform and the CPU). The build's
# `results.json` stores this record next to the results, because timings only compare on the same
# machine.

# %% [markdown] lang="zh"
# 下一个单元格把运行固定为单个 CPU 线程和 32 位浮点数，创建输出文件夹，并记录运行环境（Python、PyTorch、NumPy、平台和 CPU）。构建时写出的 `results.json` 会把这份记录和结果保存在一起，因为计时结果只有在同一台机器上才能相互比较。

# %%
import platform
from pathlib import Path

import numpy as np
import torch


# [en] The CPU model from /proc/cpuinfo on Linux, else whatever the platform module reports.
# [zh] Linux 上从 /proc/cpuinfo 读取 CPU 型号，否则用 platform 模块给出的信息。
def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


torch.set_num_threads(1)
torch.set_default_dtype(torch.float32)
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
say_table([[f"`{key}`", f"`{value}`"] for key, value in ENVIRONMENT.items()], en=["field", "value"], zh=["项目", "值"])
