"""The kv-cache-reuse notebook, whose code the tests exec in-process through `notebook_code` (prelude, the
notebook's setup, the sections it includes from `infra-benchmark/kv-cache`, then its own sections, with
parameter overrides after the parameters cell)."""

NOTEBOOK = "infra-benchmark/kv-cache-reuse"
