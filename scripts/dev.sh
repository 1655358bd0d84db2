#!/usr/bin/env bash
# Set up the project's environment (.venv), then build the notebooks or run the tests; or build the website.
#
#   bash scripts/dev.sh build [ARGS...]   build-learning-notebooks --execute ARGS...
#   bash scripts/dev.sh test  [ARGS...]   python -m pytest ARGS...
#   bash scripts/dev.sh site  [ARGS...]   scripts/build-site.py ARGS...: _site/ from the built notebooks
#   bash scripts/dev.sh setup             only set up .venv
#
# .venv is (re)installed when requirements.txt or pyproject.toml change (by content, not by date).
# The site uses its own environment, .venv-site (requirements-site.txt), not .venv.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="$root/.venv"

setup() {
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
    exit 2
  fi
  local stamp
  stamp="$(cat requirements.txt pyproject.toml | "$python" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
  if [[ -x "$venv/bin/python" && "$(cat "$venv/.installed" 2>/dev/null)" == "$stamp" ]]; then
    return
  fi
  echo "setting up $venv (first run or changed requirements; a few minutes)" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$stamp" > "$venv/.installed"
}

command="${1:-}"
shift || true
case "$command" in
  setup)
    setup
    ;;
  build)
    setup
    exec "$venv/bin/build-learning-notebooks" --execute "$@"
    ;;
  test)
    setup
    # Headless Chromium for the website's browser tests (apt-get, needs root or sudo).
    bash scripts/install-browser-test-deps.sh \
      || echo "warning: could not install chromium; the browser tests skip here (and fail under CI=true)" >&2
    exec "$venv/bin/python" -m pytest "$@"
    ;;
  site)
    exec "$python" scripts/build-site.py "$@"
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
