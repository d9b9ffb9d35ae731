#!/usr/bin/env bash
# Runs the whole check suite: creates .venv if needed, installs the project with its dev extras when it or its
# dependencies changed since the last install (scripts/venv.sh; a clean clone, as in CI, always installs),
# then ruff, mypy (strict on gateway/) and pytest. Extra arguments go to pytest as they are (one process);
# without any, pytest runs the whole suite in parallel processes (pytest-xdist) and then
# runs the tests marked compiled_twins a second time on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1), so
# the pure-Python twins of the C loops are tested where the extensions are built, as CI builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
ensure_venv dev,spark,otel
echo "== ruff"
.venv/bin/ruff check gateway tests bench scripts
.venv/bin/ruff format --check gateway tests bench scripts
echo "== mypy"
.venv/bin/mypy
# Real peers for the observability tests (Prometheus, promtool): installed when missing and possible.
./scripts/ensure_prometheus.sh
# Node.js + npm and a JDK for the client examples (tests/docs/test_clients.py): installed when missing and possible.
./scripts/ensure_client_tools.sh
# iproute2 + nftables for the network-fault lab (tests/tubemq/test_network_faults.py): installed when missing and possible.
./scripts/ensure_netlab.sh
# Debian's chromium for the web console's browser tests (driven by Playwright): installed when missing and possible.
./scripts/ensure_chromium.sh
# nginx (HTTP and grpc_pass) for the topology test: 2 replicas x 2 workers behind a real proxy.
./scripts/ensure_nginx.sh
# redis-server for idempotent publish with a store every replica shares.
./scripts/ensure_redis.sh
echo "== pytest"
if [ $# -gt 0 ]; then
    .venv/bin/python -m pytest -q "$@"
else
    # The whole suite mostly waits (clusters, gateways, servers and browsers starting; sockets; subprocesses),
    # so it runs in parallel pytest processes (pytest-xdist, each test sent to the next free one): 4 on a
    # two-core machine unless PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise.
    export PYTEST_XDIST_AUTO_NUM_WORKERS=${PYTEST_XDIST_AUTO_NUM_WORKERS:-4}
    .venv/bin/python -m pytest -q -n auto --dist load
    echo "== pytest on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1): the tests marked compiled_twins"
    # only the files that carry the mark are collected: collecting the whole suite again costs half a minute
    mapfile -t twins < <(grep -rl --include='test_*.py' '^pytestmark = pytest.mark.compiled_twins' tests | LC_ALL=C sort)
    TUBEMQ_GATEWAY_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q -m compiled_twins "${twins[@]}"
fi
