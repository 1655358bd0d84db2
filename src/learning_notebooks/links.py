"""Where the "Open in Colab" badges and `{{colab:...}}` links point."""

from __future__ import annotations

import re
from pathlib import Path

from .layout import BUILD_DIR, built_name
from .sources import CONFIG_FILE, ProjectConfig

# A placeholder repository in config.toml: the Colab badges would point nowhere useful.
PLACEHOLDER_REPOSITORIES = re.compile(r"^(learning-notebooks/learning-notebooks|example/.*|owner/repo(sitory)?|your-[\w-]+/.*)$", re.I)


def colab_url(config: ProjectConfig, series: str, name: str, lang: str) -> str:
    path = f"{BUILD_DIR}/{series}/{built_name(name, lang)}"
    return f"https://colab.research.google.com/github/{config.repository}/blob/{config.branch}/{path}"


def placeholder_warning(config: ProjectConfig, src_root: Path) -> str | None:
    """One line when config.toml still names a placeholder repository (the Colab badges would be dead)."""
    if PLACEHOLDER_REPOSITORIES.match(config.repository):
        return (
            f"warning: {src_root / CONFIG_FILE}: repository = \"{config.repository}\" is a placeholder; "
            "the Colab badges point at it (set it to the GitHub repository that publishes this project)"
        )
    return None
