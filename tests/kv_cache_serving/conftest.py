"""The kv-cache-serving notebook's code, exec'ed once per session in quick mode (all sections)."""

from notebook_fixtures import notebook_fixtures

from .notebook import NOTEBOOK

quick_run, nb, out_dir = notebook_fixtures(NOTEBOOK)
