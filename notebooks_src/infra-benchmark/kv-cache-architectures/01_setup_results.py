# %% [markdown] lang="en"
# One more tool, for the build: `save_results` writes `results.json` into the output folder (the run's header,
# then the results, then the names of the figures). It is plumbing, so its code is folded.

# %% [markdown] lang="zh"
# 还有一个供构建使用的工具：`save_results` 把 `results.json` 写入输出文件夹（先是本次运行的基本信息，再是结果，最后是图片的文件名）。这只是辅助代码，所以折叠起来了。

# %% tags=["hide-input"]
def save_results(notebook: str, schema_version: int, results: dict, figures: list[str]) -> Path:
    header = {"schema_version": schema_version, "notebook": notebook,
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "quick": bool(QUICK), "environment": ENVIRONMENT}
    path = OUT / "results.json"
    path.write_text(json.dumps(header | results | {"figures": figures}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
