#!/usr/bin/env bash
# Make sure Debian's faketime is on PATH for the sign-in tests (tests/support/oidc_provider.py
# runs the identity provider with its clock an hour ahead: tokens that are not yet valid).
set -euo pipefail
exec "$(dirname "$0")/ensure_apt_package.sh" faketime faketime
