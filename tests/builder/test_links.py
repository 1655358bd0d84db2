"""Where the Colab links point: config.toml's repository, else a GitHub origin, else none."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixture_project import Project
from learning_notebooks.links import Links, github_repository, origin_url, resolve
from learning_notebooks.sources import ProjectConfig

PLACEHOLDER = ProjectConfig(("en", "zh"), "learning-notebooks/learning-notebooks", None)


@pytest.mark.parametrize("url, name", [
    ("https://github.com/me/notebooks.git", "me/notebooks"),
    ("https://github.com/me/notebooks", "me/notebooks"),
    ("https://token@github.com/me/notebooks.git", "me/notebooks"),
    ("git@github.com:me/notebooks.git", "me/notebooks"),
    ("ssh://git@github.com/me/my.notebooks.git", "me/my.notebooks"),
    ("https://gitlab.com/me/notebooks.git", None),
    ("/srv/git/notebooks.git", None),
    ("git@example.com:me/notebooks.git", None),
    ("", None),
    (None, None),
])
def test_github_remotes_in_https_and_ssh_form(url, name):
    assert github_repository(url) == name


def test_an_explicit_repository_in_config_wins():
    config = ProjectConfig(("en", "zh"), "someone/notebooks", "gh-pages")
    links = resolve(config, Path("."), remote=lambda root: "git@github.com:other/fork.git")
    assert (links.repository, links.branch, links.decided_by) == ("someone/notebooks", "gh-pages", "config.toml")


def test_a_github_origin_is_used_when_config_names_a_placeholder():
    links = resolve(PLACEHOLDER, Path("."), remote=lambda root: "https://github.com/me/notebooks.git")
    assert (links.repository, links.branch, links.decided_by) == ("me/notebooks", "main", "git remote origin")
    assert links.colab("s", "n", "zh") == "https://colab.research.google.com/github/me/notebooks/blob/main/build/s/n.zh.ipynb"


@pytest.mark.parametrize("remote", ["/srv/git/notebooks.git", None])
def test_without_config_or_github_origin_there_are_no_colab_links(remote):
    links = resolve(PLACEHOLDER, Path("."), remote=lambda root: remote)
    assert links.repository is None and links.colab("s", "n", "en") is None
    assert links.prose_link("s", "n", "en", from_series="s") == "n.en.ipynb"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_real_git_origin_decides_and_check_does_not_depend_on_it(executed: Project):
    """Built in a clone whose origin is on GitHub; checked in one whose origin is a path (as CI's)."""
    assert origin_url(executed.root) is None  # no repository yet
    git(executed.root, "init", "-q")
    git(executed.root, "remote", "add", "origin", "git@github.com:me/notebooks.git")
    run = executed.build()
    assert run.code == 0 and "warning" not in run.log
    assert "https://colab.research.google.com/github/me/notebooks/blob/main/build/demo/hello.en.ipynb" in \
        executed.read("en").cells[0].source
    git(executed.root, "remote", "set-url", "origin", "/srv/git/notebooks.git")
    assert executed.build("--check").code == 0  # compared with the links the build recorded
    config = executed.root / "notebooks_src" / "config.toml"
    config.write_text(config.read_text().replace("example/fixture", "someone/notebooks"))
    stale = executed.build("--check")  # config.toml names one now: it decides, strictly
    assert stale.code == 1 and "prose or header differ" in stale.log


def test_no_repository_means_no_badge_and_one_warning_line_per_build(make):
    project = make()
    (project.notebook.parent / "hello2").mkdir()
    for path in project.notebook.iterdir():
        (project.notebook.parent / "hello2" / path.name).write_bytes(path.read_bytes())
    run = project.build()
    assert run.code == 0
    warnings = [line for line in run.log.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "no GitHub repository for the Colab links" in warnings[0]
    header = project.read("zh").cells[0].source
    assert "colab" not in header.lower() and "[English](hello.en.ipynb)" in header
    assert "warning" not in project.build("--check").log
