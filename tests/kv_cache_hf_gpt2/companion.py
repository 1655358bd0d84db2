"""Where the companion notebook infra-benchmark/kv-cache-hf-gpt2 lives.

Its code runs through `notebook_code.run_notebook_code`: the prelude, then the manifest's sections,
including the section files of infra-benchmark/kv-cache it lists (../kv-cache/03_masks.py, ...).
"""

from __future__ import annotations

from pathlib import Path

from notebook_code import SOURCES, manifest_sections

NOTEBOOK = "infra-benchmark/kv-cache-hf-gpt2"
FOLDER = SOURCES / NOTEBOOK
MAIN = SOURCES / "infra-benchmark" / "kv-cache"


def section_paths() -> list[Path]:
    return [(FOLDER / name).resolve() for name in manifest_sections(NOTEBOOK)]
