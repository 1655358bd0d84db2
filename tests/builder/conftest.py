"""Fixtures for the builder tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixture_project import FIXTURE, Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    shutil.copytree(FIXTURE, tmp_path / "project")
    return Project(tmp_path / "project")


@pytest.fixture(scope="module")
def executed_project(tmp_path_factory) -> Project:
    """One executed build shared by read-only tests."""
    root = tmp_path_factory.mktemp("executed") / "project"
    shutil.copytree(FIXTURE, root)
    project = Project(root)
    run = project.build("--execute")
    assert run.code == 0, run.log
    return project
