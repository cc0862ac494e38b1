#!/usr/bin/env bash
# Run the whole test suite. Database: TEST_DATABASE_URL if set, else testcontainers (Docker),
# else an embedded PostgreSQL. Extra arguments go to pytest (e.g. -m "not slow" for the inner loop).
# In parallel: PYTEST_WORKERS pytest-xdist workers (default 2), each with its own database;
# worksteal, because a handful of process tests take most of the time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# The console's browser tests drive Debian's chromium (installed here when missing; needs root/sudo).
scripts/ensure_chromium.sh
# The sign-in tests run the identity provider with a skewed clock (Debian's faketime).
scripts/ensure_faketime.sh
# The pooler tests run the service behind Debian's pgbouncer in transaction mode.
scripts/ensure_pgbouncer.sh
.venv/bin/ruff check app tests benchmarks threadkeeper examples
.venv/bin/mypy app threadkeeper
# The architecture contract (layers, no cycles): [tool.importlinter] in pyproject.toml.
.venv/bin/lint-imports
# The reference (docs/, mkdocs.yml): --strict fails on a broken link or anchor, a missing page or a
# page left out of the nav. Not --quiet: it hides the warnings that --strict counts.
site=$(mktemp -d)
if ! docs_log=$(NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site" 2>&1); then
  echo "$docs_log" >&2
  exit 1
fi
rm -rf "$site"
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist worksteal --durations=15 "$@"
