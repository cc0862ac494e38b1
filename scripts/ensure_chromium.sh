#!/usr/bin/env bash
# Make sure Debian's chromium is at /usr/bin/chromium for the console's browser tests
# (tests/e2e, Playwright drives it; `playwright install` is never used). Needs root or sudo.
# Installs quietly with --no-install-recommends (no fonts/extras beyond what chromium needs);
# apt's output is shown only if the install fails.
set -euo pipefail
"$(dirname "$0")/ensure_apt_package.sh" /usr/bin/chromium chromium
/usr/bin/chromium --version
