#!/usr/bin/env bash
# Runs the gateway on a fresh machine: creates .venv if needed, installs the project, and starts it.
# With no master configured it runs on the embedded TubeMQ-compatible cluster. Extra arguments go to the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e .
if [ "$#" -eq 0 ]; then set -- serve; fi
exec .venv/bin/tubemq-gateway "$@"
