#!/usr/bin/env bash
# Make sure Debian's chromium is at /usr/bin/chromium for the console's browser tests
# (tests/e2e, Playwright drives it; `playwright install` is never used). Needs root or sudo.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
run() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
run env DEBIAN_FRONTEND=noninteractive apt-get update -qq
run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
/usr/bin/chromium --version
