"""Fixtures for the KV-cache notebook: sections 1-10 exec'ed once, in quick mode (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def quick_dir(kv_cache_quick) -> Path:
    return kv_cache_quick[1]


@pytest.fixture(scope="session")
def nb(kv_cache_quick) -> dict:
    """Namespace of sections 1-10 run with QUICK=True, writing into a temporary folder."""
    return kv_cache_quick[0]
