"""The session fixtures every notebook's tests share: the notebook's code run once, in quick mode.

    quick_run, nb, out_dir = notebook_fixtures("infra-benchmark/kv-cache-serving")

in a test folder's conftest.py gives `quick_run` ((namespace, output folder)), `nb` (the namespace after
the last code cell run) and `out_dir` (the folder the run wrote into; tests that write must copy it).
`until` stops after that section file's last code cell; `said` (a list) replaces `say`/`say_table` by
the strict stand-ins of `notebook_code.bilingual_stand_ins`, which check that every sentence and table
comes in both languages, and record them there.
"""

from __future__ import annotations

import pytest

from notebook_code import bilingual_stand_ins, run_notebook_code


def notebook_fixtures(notebook: str, *, until: str | None = None, said: list | None = None):
    stand_ins = bilingual_stand_ins(said) if said is not None else {}

    @pytest.fixture(scope="session")
    def quick_run(tmp_path_factory):
        folder = tmp_path_factory.mktemp(notebook.split("/")[-1].replace("-", "_") + "_quick")
        namespace = run_notebook_code(notebook, until=until, **stand_ins, QUICK=True, OUTPUT_DIR=str(folder))
        return namespace, folder

    @pytest.fixture(scope="session")
    def nb(quick_run) -> dict:
        return quick_run[0]

    @pytest.fixture(scope="session")
    def out_dir(quick_run):
        return quick_run[1]

    return quick_run, nb, out_dir
