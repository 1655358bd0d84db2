"""The notebook needs only torch, numpy and matplotlib: without transformers, each cross-check is
skipped with one sentence through `say`, and everything else (results.json included) still runs."""

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
    assert nb["HAVE_HF"] is False and nb["LLAMA_CROSS"] is None and nb["MISTRAL_CROSS"] is None
    skips = [s for s in said if "en" in s and "skipped: `transformers` is not available" in s["en"]]
    # [Llama 5.1, Mistral 6.1, appendix B, the referees row of section 10]
    assert len(skips) == 4 and all("已跳过" in s["zh"] for s in skips)
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["cross_checks"]["transformers"] is None and results["cross_checks"]["skipped"]
