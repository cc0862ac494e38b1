#!/usr/bin/env bash
# Usage: scripts/ensure_apt_package.sh <command> <debian package>
# Installs the Debian package (apt, --no-install-recommends, quietly) when <command> is not on
# PATH (or not executable, for an absolute path). Needs root or sudo; apt's output is shown only
# if the install fails.
set -euo pipefail
command=$1
package=$2
if command -v "$command" >/dev/null 2>&1; then
  exit 0
fi
run() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "installing $package (apt, --no-install-recommends)..." >&2
if ! { run env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
  && run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Use-Pty=0 "$package"; } >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
