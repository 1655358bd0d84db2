"""Build bilingual teaching notebooks from Jupytext percent-format sources.

Part of the execution-cache key: bump it when a change to the builder changes what
an executed notebook contains.
"""

__version__ = "0.2.0"
