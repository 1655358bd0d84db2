"""Without transformers the notebook still runs: sections 10 and 11 say they are skipped, in both languages,
the referee's control is not recorded, and results.json records the skip."""

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
    assert nb["HAVE_TRANSFORMERS"] is False and nb["ASSISTED"] is None and nb["ASSISTED_CONTROL"] is None
    skips = [s for s in said if "en" in s and "skipped" in s["en"]]
    assert [s["en"].split(",")[0] for s in skips] == ["transformers is not installed", "The comparison with assisted generation is skipped"]
    assert all("跳过" in s["zh"] for s in skips)
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["assisted_generation"] == {"skipped": True, "runs": None}
    assert "referee_rejects_no_rollback" not in results["controls"] and all(c["caught"] for c in results["controls"].values())
    assert len(results["controls"]) == 9
