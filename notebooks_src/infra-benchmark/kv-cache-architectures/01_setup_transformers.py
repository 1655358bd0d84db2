# %% [markdown] lang="en"
# The Hugging Face referees (models from `transformers` that check ours weight for weight) are optional.
# The next cell looks for `transformers`; this code was written against version 5.23.0, the version pinned
# for this repository. Each referee imports the classes it needs where it runs. The
# cell (folded) only sets `HAVE_HF`, and says so if the installed version differs.

# %% [markdown] lang="zh"
# Hugging Face 裁判是可选内容：它们是 `transformers` 中的模型，载入与我们相同的权重，用来核对我们的模型。下一个单元格检查能否导入 `transformers`；这部分代码是按本仓库锁定的 5.23.0 版编写的。每个裁判在用到的地方再导入自己需要的类。这个单元格（已折叠）只设置 `HAVE_HF`；如果安装的版本与此不同，它会给出提示。

# %% tags=["hide-input"]
import warnings

# [en] transformers imports tqdm, whose notice about missing Jupyter widgets is noise here (no progress bars).
# [zh] transformers 会导入 tqdm，而 tqdm 会警告缺少 Jupyter 小部件；我们不用进度条，这条警告在这里只是干扰。
warnings.filterwarnings("ignore", message="IProgress not found")
PINNED_TRANSFORMERS = "5.23.0"
try:
    import transformers
    HF_SKIP = None
except ImportError as error:
    HF_SKIP = f"{type(error).__name__}: {error}"
HAVE_HF = HF_SKIP is None
ENVIRONMENT["transformers"] = transformers.__version__ if HAVE_HF else None
if HAVE_HF:
    print(f"transformers {transformers.__version__}")
if HAVE_HF and transformers.__version__ != PINNED_TRANSFORMERS:
    say(en=f"Note: the referees were written against transformers {PINNED_TRANSFORMERS}; this is "
           f"{transformers.__version__}. If one of them disagrees, this version computes something differently.",
        zh=f"注意：裁判部分是按 transformers {PINNED_TRANSFORMERS} 编写的，当前版本是 "
           f"{transformers.__version__}。如果某个裁判判为不一致，说明这个版本有某处计算方式不同。")
