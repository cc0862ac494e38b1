#!/usr/bin/env bash
# Make sure Debian's faketime is on PATH for the sign-in tests (tests/support/oidc_provider.py
# runs the identity provider with its clock an hour ahead: tokens that are not yet valid).
# Needs root or sudo; apt's output is shown only if the install fails.
set -euo pipefail
if command -v faketime >/dev/null 2>&1; then
  exit 0
fi
run() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "installing faketime (apt, --no-install-recommends)..." >&2
if ! { run env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
  && run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Use-Pty=0 faketime; } >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
