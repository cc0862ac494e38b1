#!/usr/bin/env bash
# Make sure Debian's pgbouncer is at /usr/sbin/pgbouncer: the tests run the service behind a real
# PgBouncer in transaction mode (tests/support/pgbouncer.py starts its own process per test
# module; the system service the package installs is not used). Needs root or sudo.
set -euo pipefail
"$(dirname "$0")/ensure_apt_package.sh" /usr/sbin/pgbouncer pgbouncer
/usr/sbin/pgbouncer --version | head -1
