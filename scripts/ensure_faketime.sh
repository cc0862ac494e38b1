#!/usr/bin/env bash
# Make sure Debian's faketime is installed for the sign-in tests (tests/support/oidc_provider.py
# preloads its libfaketime into the identity provider to run its clock an hour ahead: tokens
# that are not yet valid).
set -euo pipefail
exec "$(dirname "$0")/ensure_apt_package.sh" faketime faketime
