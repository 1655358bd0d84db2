# %% [markdown] lang="en"
# The Hugging Face cross-checks (sections 5 and 6) are optional. The next cell looks for `transformers`
# and the classes they use; it was written against version 5.23.0, the version pinned for this
# repository.

# %% [markdown] lang="zh"
# 与 Hugging Face 的交叉核对（第 5、6 节）是可选内容。下一个单元格检查 `transformers` 以及要用到的几个类是否存在；这部分代码是按本仓库锁定的 5.23.0 版编写的。

# %%
import warnings

# [en] transformers imports tqdm, whose notice about missing Jupyter widgets is noise here (no progress bars).
# [zh] transformers 会导入 tqdm；tqdm 提示缺少 Jupyter 小部件，这在这里只是干扰（我们不用进度条）。
warnings.filterwarnings("ignore", message="IProgress not found")
PINNED_TRANSFORMERS = "5.23.0"
try:
    import transformers
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
    HF_SKIP = None
    ENVIRONMENT["transformers"] = transformers.__version__
    print(f"transformers {transformers.__version__}")
except ImportError as error:
    HF_SKIP = f"{type(error).__name__}: {error}"
    ENVIRONMENT["transformers"] = None
HAVE_HF = HF_SKIP is None


if HAVE_HF and transformers.__version__ != PINNED_TRANSFORMERS:
    say(en=f"Note: the cross-checks were written against transformers {PINNED_TRANSFORMERS}; this is "
           f"{transformers.__version__}. If one of them fails, this version computes something differently.",
        zh=f"注意：交叉核对是按 transformers {PINNED_TRANSFORMERS} 编写的，当前版本是 "
           f"{transformers.__version__}。如果某项核对失败，说明这个版本有某处计算方式不同。")
