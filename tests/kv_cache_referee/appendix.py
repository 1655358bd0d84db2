"""Where section 11 (the lean Hugging Face referee) lives and how to exec its code cells."""

from __future__ import annotations

from notebook_code import code_cells, exec_sections

NOTEBOOK = "infra-benchmark/kv-cache"
REFEREE = "10_hf_gpt2_referee.py"


def referee_cells() -> list:
    cells = [cell for name, cell in code_cells(NOTEBOOK) if name == REFEREE]
    assert cells, f"{REFEREE} has no code cells"
    return cells


def run_referee(namespace: dict) -> dict:
    """Exec the referee's code cells, in order, into `namespace` (which must hold the prelude and sections 1-10)."""
    return exec_sections(namespace, NOTEBOOK, REFEREE)
