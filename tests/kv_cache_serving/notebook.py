"""The kv-cache-serving notebook's code, exec'ed in this process through the builder's loader.

`run` execs the cells the builder would execute (prelude, this notebook's setup, the two sections
it includes from `infra-benchmark/kv-cache`, then its own sections), with parameter overrides after
the parameters cell. `sections` keeps only the first N entries of the manifest.
"""

from __future__ import annotations

from notebook_code import run_notebook_code

NOTEBOOK = "infra-benchmark/kv-cache-serving"


def run(sections: int | None = None, **overrides) -> dict:
    return run_notebook_code(NOTEBOOK, sections=sections, **overrides)

