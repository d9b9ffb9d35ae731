#!/usr/bin/env bash
# Runs the gateway: creates .venv if needed, installs the project when it or its dependencies changed since the
# last install (scripts/venv.sh), and starts it at once (no pip, no index needed, on a complete .venv).
# With no master configured it runs on the embedded TubeMQ-compatible cluster. Extra arguments go to the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
ensure_venv ""
if [ "$#" -eq 0 ]; then set -- serve; fi
exec .venv/bin/tubemq-gateway "$@"
