"""Cached virtual environments for tests that must run something outside the project's .venv."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def venv_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def clean_env() -> dict[str, str]:
    """The environment for a child in another virtual environment: no leaks from this one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def cached_venv(env: Path, requirements: Path) -> Path:
    """A virtual environment at `env` holding `requirements`; rebuilt only when their content changes.

    The stamp is a hash of the requirements file and the Python version, not a modification time.
    A new environment is built next to `env` and renamed into place, so an interrupted build
    never leaves a half-filled environment that looks valid.
    """
    digest = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()
    stamp = env / "requirements.sha256"
    with held(env):  # test workers run side by side (pytest-xdist): one builds, the others wait, then reuse
        if stamp.is_file() and stamp.read_text().strip() == digest and venv_python(env).exists():
            return env
        build_venv(env, requirements, digest)
    return env


@contextlib.contextmanager
def held(env: Path):
    """An exclusive lock on `env` (the file `<env>.lock` beside it) for as long as the block runs."""
    with open(env.parent / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_venv(env: Path, requirements: Path, digest: str) -> None:
    """Build the environment beside `env`, then rename it into place (call it holding `held(env)`)."""
    staging = Path(tempfile.mkdtemp(prefix=env.name + ".building-", dir=env.parent))
    try:
        # symlinks=False would copy the interpreter; the default (symlinks on POSIX) is fine here.
        venv.EnvBuilder(with_pip=True).create(staging)
        subprocess.run(
            [str(venv_python(staging)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(requirements)],
            check=True, env=clean_env(),
        )
        (staging / "requirements.sha256").write_text(digest + "\n")
        if env.exists():
            shutil.rmtree(env)
        staging.rename(env)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    # A venv's scripts carry its path in their shebangs; we only ever call `python -m`, which is safe
    # after the rename.
