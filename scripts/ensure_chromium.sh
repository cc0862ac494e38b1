#!/usr/bin/env bash
# Make sure Debian's chromium is at /usr/bin/chromium for the console's browser tests
# (tests/e2e, Playwright drives it; `playwright install` is never used). Needs root or sudo.
# Installs quietly with --no-install-recommends (no fonts/extras beyond what chromium needs);
# apt's output is shown only if the install fails.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
run() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "installing chromium (apt, --no-install-recommends)..." >&2
if ! { run env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
  && run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Use-Pty=0 chromium; } >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
/usr/bin/chromium --version
