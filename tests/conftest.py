import os

from notebook_fixtures import notebook_fixtures

os.environ.setdefault("MPLBACKEND", "Agg")

# Sections 1-9 of the KV-cache notebook (every manifest entry through 09_saved_results.py), exec'ed once
# per session with QUICK=True; shared by tests/kv_cache and tests/kv_cache_referee (section 10).
kv_cache_quick, _, _ = notebook_fixtures("infra-benchmark/kv-cache", until="09_saved_results.py")
