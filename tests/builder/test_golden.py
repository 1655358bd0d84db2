"""The fixture project's build, byte for byte, against the golden copy in tests/fixtures/golden/.

Any change to what the builder writes shows here as a diff to review. When the change is meant:
LEARNING_NOTEBOOKS_UPDATE_GOLDEN=1 python -m pytest tests/builder/test_golden.py, then commit the
new golden files with the change (as jupytext keeps its golden notebooks).
"""

from __future__ import annotations

import os
import shutil

from fixture_project import GOLDEN, Project


def files_of(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for top in ("build", "outputs") for p in sorted((root / top).rglob("*")) if p.is_file()}


def test_the_fixtures_build_is_the_golden_one(executed_tree: Project):
    built = files_of(executed_tree.root)
    if os.environ.get("LEARNING_NOTEBOOKS_UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for name, data in built.items():
            (GOLDEN / name).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / name).write_bytes(data)
    golden = files_of(GOLDEN)
    assert sorted(built) == sorted(golden) == [
        "build/demo/hello.en.ipynb", "build/demo/hello.zh.ipynb", "outputs/demo/hello/result.json"]
    for name in golden:
        assert built[name].decode("utf-8").splitlines() == golden[name].decode("utf-8").splitlines(), name
        assert built[name] == golden[name], name
