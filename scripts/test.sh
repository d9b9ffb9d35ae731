#!/usr/bin/env bash
# Runs the whole check suite on a fresh machine: creates .venv if needed, installs the project with its
# dev extras, then ruff, mypy (strict on gateway/) and pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev,spark,otel]'
echo "== ruff"
.venv/bin/ruff check gateway tests bench scripts
.venv/bin/ruff format --check gateway tests bench scripts
echo "== mypy"
.venv/bin/mypy
# Real peers for the observability tests (Prometheus, promtool): installed when missing and possible.
./scripts/ensure_prometheus.sh
echo "== pytest"
.venv/bin/python -m pytest -q "$@"
