"""The companion notebook infra-benchmark/kv-cache-hf-gpt2, exec'ed once per session in quick mode."""

from __future__ import annotations

import json

import pytest

from notebook_fixtures import notebook_fixtures

from .companion import NOTEBOOK

quick_run, nb, out_dir = notebook_fixtures(NOTEBOOK)


@pytest.fixture(scope="session")
def results(nb, out_dir) -> dict:
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
