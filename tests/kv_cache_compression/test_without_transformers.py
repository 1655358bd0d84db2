"""The notebook needs only torch, numpy and matplotlib: without transformers, each referee is skipped with one
sentence through `say`, the control only a referee can see is not recorded, and everything else (results.json
included) still runs."""

from __future__ import annotations

import json
import sys

from . import conftest


def test_runs_without_transformers(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "transformers", None)                  # `import transformers` fails
    start = len(conftest.SAID)
    nb = conftest.run_quick(tmp_path)
    said = conftest.SAID[start:]
    assert nb["HAVE_HF"] is False and nb["DEEPSEEK_REFEREE"] is None and nb["MINISTRAL_REFEREE"] is None
    skips = [s for s in said if "en" in s and "referee" in s["en"] and "skipped: `transformers` is not available" in s["en"]]
    assert len(skips) == 3 and all("裁判已跳过" in s["zh"] for s in skips)
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["referees"]["transformers"] is None and results["referees"]["skipped"]
    assert "pattern_shifted_by_one_layer" not in results["controls"]
    assert all(c["caught"] for c in results["controls"].values()) and len(results["controls"]) == 7
