"""The kv-cache-serving notebook, whose code the tests exec through `notebook_code.run_notebook_code`
(prelude, this notebook's setup, the two sections it includes from `infra-benchmark/kv-cache`, then its
own sections, with parameter overrides after the parameters cell)."""

NOTEBOOK = "infra-benchmark/kv-cache-serving"
