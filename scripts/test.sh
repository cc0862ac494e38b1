#!/usr/bin/env bash
# Run the whole test suite. Database: TEST_DATABASE_URL if set, else testcontainers (Docker),
# else an embedded PostgreSQL. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check app tests benchmarks
.venv/bin/mypy app
exec .venv/bin/python -m pytest "$@"
