#!/usr/bin/env bash
# Run the whole test suite. Database: TEST_DATABASE_URL if set, else testcontainers (Docker),
# else an embedded PostgreSQL. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# The console's browser tests drive Debian's chromium (installed here when missing; needs root/sudo).
scripts/ensure_chromium.sh
.venv/bin/ruff check app tests benchmarks
.venv/bin/mypy app
# The architecture contract (layers, no cycles): [tool.importlinter] in pyproject.toml.
.venv/bin/lint-imports
exec .venv/bin/python -m pytest "$@"
