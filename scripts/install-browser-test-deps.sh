#!/usr/bin/env bash
# Install what tests/browser_edition needs beyond the Python environment: Debian's chromium
# (and its driver), used headless by tests/browser_edition/test_browser_site.py.
# Idempotent: does nothing when /usr/bin/chromium and /usr/bin/chromedriver are already there. Needs root (or sudo) and apt.
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y chromium chromium-driver
/usr/bin/chromium --version
