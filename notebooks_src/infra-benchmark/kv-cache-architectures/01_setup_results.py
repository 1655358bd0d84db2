# %% tags=["record"]
import json
from datetime import datetime, timezone


def save_results(notebook: str, schema_version: int, results: dict, figures: list[str]) -> Path:
    header = {"schema_version": schema_version, "notebook": notebook,
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "quick": bool(QUICK), "environment": ENVIRONMENT}
    path = OUT / "results.json"
    path.write_text(json.dumps(header | results | {"figures": figures}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
