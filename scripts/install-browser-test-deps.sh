#!/usr/bin/env bash
# Install what the browser tests (tests/site/) need beyond the Python environment: Debian's chromium,
# driven headless by playwright (pip, in .venv) through its executable path, and a small CJK font so
# that screenshots of the Chinese pages are legible. Without recommended packages: only what the
# tests need (no cups, avahi, systemd upgrades...).
# Idempotent: does nothing when both are installed. Needs root (or sudo) and apt.
set -euo pipefail

missing=()
for package in chromium fonts-wqy-microhei; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo missing)"
