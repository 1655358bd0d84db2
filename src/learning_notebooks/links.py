"""Where the "Open in Colab" badges and `{{colab:...}}` links point: one decision per build.

The GitHub repository and branch come from, in this order:

1. `repository` (and `branch`) in notebooks_src/config.toml, unless it is a placeholder such as
   `learning-notebooks/learning-notebooks`;
2. `git remote get-url origin` of the project folder, when it is a GitHub remote (https or ssh
   form), with `branch` from config.toml or `main`;
3. none: the header carries no badge and no Colab links, `{{colab:SERIES/NOTEBOOK}}` becomes the
   relative path of that built notebook, and the build prints one warning line.

`--check` does not ask git: when config.toml names no repository, it compares against the links
each built notebook records (`colab` in its metadata), so its verdict does not depend on the
remote of the clone it runs in.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .layout import BUILD_DIR, built_name
from .sources import CONFIG_FILE, ProjectConfig

# A placeholder repository in config.toml: the Colab badges would point nowhere useful.
PLACEHOLDER_REPOSITORIES = re.compile(r"^(learning-notebooks/learning-notebooks|example/.*|owner/repo(sitory)?|your-[\w-]+/.*)$", re.I)
GITHUB_REMOTE = re.compile(r"^(?:https://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
                           r"(?P<name>[\w.-]+/[\w.-]+?)(?:\.git)?/?$")
DEFAULT_BRANCH = "main"
COLAB = "https://colab.research.google.com/github"


@dataclass(frozen=True)
class Links:
    """The GitHub repository ("owner/name") and branch the Colab links use; repository None: none."""

    repository: str | None
    branch: str = DEFAULT_BRANCH
    decided_by: str = ""  # "config.toml", "git remote origin", "recorded" or "" (none)

    def colab(self, series: str, name: str, lang: str) -> str | None:
        """The Colab URL of a built notebook (None without a repository)."""
        if self.repository is None:
            return None
        return f"{COLAB}/{self.repository}/blob/{self.branch}/{BUILD_DIR}/{series}/{built_name(name, lang)}"

    def prose_link(self, series: str, name: str, lang: str, from_series: str) -> str:
        """What `{{colab:SERIES/NOTEBOOK}}` becomes in a notebook of `from_series`: the Colab URL,
        or without a repository the built notebook's path relative to the one that links it."""
        url = self.colab(series, name, lang)
        if url is not None:
            return url
        return built_name(name, lang) if series == from_series else f"../{series}/{built_name(name, lang)}"

    @property
    def record(self) -> str | None:
        """How an edition records them (`colab` in its metadata)."""
        return f"{self.repository}@{self.branch}" if self.repository else None

    @classmethod
    def recorded(cls, value: object) -> "Links":
        if isinstance(value, str) and "@" in value:
            repository, branch = value.rsplit("@", 1)
            return cls(repository, branch, "recorded")
        return cls(None, DEFAULT_BRANCH, "recorded")


def github_repository(url: str | None) -> str | None:
    """"owner/name" of a GitHub remote URL (https or ssh form); None for any other."""
    match = GITHUB_REMOTE.match((url or "").strip())
    return match["name"] if match else None


def origin_url(root: Path) -> str | None:
    """`git remote get-url origin` in `root` (None: no git, no repository, no origin)."""
    try:
        done = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def configured(config: ProjectConfig) -> str | None:
    """config.toml's repository, unless missing or a placeholder."""
    name = config.repository
    return name if name and not PLACEHOLDER_REPOSITORIES.match(name) else None


def from_config(config: ProjectConfig) -> Links:
    """The links config.toml alone decides (no repository when it names none or a placeholder)."""
    return Links(configured(config), config.branch or DEFAULT_BRANCH, "config.toml" if configured(config) else "")


def resolve(config: ProjectConfig, root: Path, remote: Callable[[Path], str | None] = origin_url) -> Links:
    """The links of a build (see the module's docstring); `remote(root)` gives origin's URL."""
    branch = config.branch or DEFAULT_BRANCH
    if configured(config):
        return from_config(config)
    from_origin = github_repository(remote(root))
    if from_origin:
        return Links(from_origin, branch, "git remote origin")
    return Links(None, branch, "")


def warning(links: Links, src_root: Path) -> str | None:
    """One line when no repository is known (the badges are left out)."""
    if links.repository is not None:
        return None
    return (f"warning: no GitHub repository for the Colab links ({src_root / CONFIG_FILE} names none or a "
            "placeholder, and git's origin is not on GitHub): the notebooks carry no Colab badge; set "
            "repository = \"owner/name\" there")
