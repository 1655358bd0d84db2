import os

from notebook_fixtures import notebook_fixtures

os.environ.setdefault("MPLBACKEND", "Agg")

# Sections 1-10 of the KV-cache notebook (every manifest entry through 10_saved_results.py), exec'ed once
# per session with QUICK=True; shared by tests/kv_cache and tests/kv_cache_referee (section 11).
kv_cache_quick, _, _ = notebook_fixtures("infra-benchmark/kv-cache", until="10_saved_results.py")
