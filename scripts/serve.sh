#!/usr/bin/env bash
# Run the service: venv, migrations, HTTP on $THREADKEEPER_HOST:$THREADKEEPER_PORT (127.0.0.1:8000).
# Without DATABASE_URL an embedded PostgreSQL is started under var/pgdata; without
# THREADKEEPER_LLM_BASE_URL the offline extractive model and summarizer are used.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m app serve --migrate "$@"
