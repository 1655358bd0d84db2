# %% [markdown] lang="en"
# The Hugging Face referees (DeepSeek-V3 in section 5, Ministral in section 6) are optional. The next cell
# looks for `transformers` and the classes they use; it was written against version 5.23.0, the version
# pinned for this repository.

# %% [markdown] lang="zh"
# Hugging Face 裁判（第 5 节的 DeepSeek-V3 和第 6 节的 Ministral）是可选内容。下一个单元格检查 `transformers` 以及要用到的几个类是否存在；这部分代码是按本仓库锁定的 5.23.0 版编写的。

# %%
import warnings

# [en] transformers imports tqdm, whose notice about missing Jupyter widgets is noise here (no progress bars).
# [zh] transformers 会导入 tqdm；tqdm 提示缺少 Jupyter 小部件，这在这里只是干扰（我们不用进度条）。
warnings.filterwarnings("ignore", message="IProgress not found")
PINNED_TRANSFORMERS = "5.23.0"
try:
    import transformers
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DynamicCache, MinistralConfig, MinistralForCausalLM
    HF_SKIP = None
    ENVIRONMENT["transformers"] = transformers.__version__
    print(f"transformers {transformers.__version__}")
except ImportError as error:
    HF_SKIP = f"{type(error).__name__}: {error}"
    ENVIRONMENT["transformers"] = None
HAVE_HF = HF_SKIP is None

if HAVE_HF and transformers.__version__ != PINNED_TRANSFORMERS:
    say(en=f"Note: the referees were written against transformers {PINNED_TRANSFORMERS}; this is "
           f"{transformers.__version__}. If one of them disagrees, this version computes something differently.",
        zh=f"注意：裁判部分是按 transformers {PINNED_TRANSFORMERS} 编写的，当前版本是 "
           f"{transformers.__version__}。如果某个裁判判为不一致，说明这个版本有某处计算方式不同。")
