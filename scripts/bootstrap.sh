#!/usr/bin/env bash
# Create/refresh .venv from requirements.lock (pinned) and install the app in editable mode.
# Re-runs only when the lock file or pyproject changed since the last successful bootstrap.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.bootstrap-stamp
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip uv
.venv/bin/uv pip install --quiet --python .venv/bin/python -r requirements.lock
.venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
echo "$want" > "$stamp"
