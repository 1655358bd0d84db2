"""The fixture project for the builder tests: one factory, copies of a pristine or an executed tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixture_project import FIXTURE, Project


@pytest.fixture(scope="session")
def executed_tree(tmp_path_factory) -> Project:
    """The fixture project built once with --execute: read it, never write into it (copy it: `make`)."""
    project = Project(tmp_path_factory.mktemp("executed") / "project")
    shutil.copytree(FIXTURE, project.root)
    run = project.build("--execute")
    assert run.code == 0, run.log
    return project


@pytest.fixture
def make(tmp_path: Path, executed_tree: Project):
    """make(executed=False) -> a fresh copy of the fixture project (its sources only, or with the
    executed build, which is a valid cache of them), to edit and build."""
    count = 0

    def make(executed: bool = False) -> Project:
        nonlocal count
        count += 1
        root = tmp_path / f"project{count}"
        shutil.copytree(executed_tree.root if executed else FIXTURE, root)
        return Project(root)

    return make


@pytest.fixture
def project(make) -> Project:
    return make()


@pytest.fixture
def executed(make) -> Project:
    return make(executed=True)
