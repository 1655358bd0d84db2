"""Build bilingual teaching notebooks from Jupytext percent-format sources.

`__version__` is the package's one version (pyproject.toml reads it from here). What decides
whether a recorded run is still valid is `cache.BUILDER_FORMAT`, not this.
"""

__version__ = "0.2.0"
