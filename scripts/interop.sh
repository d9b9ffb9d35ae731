#!/usr/bin/env bash
# Runs the interop suite (tests/interop) against a real TubeMQ cluster and prints a per-test summary.
#
#   ./scripts/interop.sh [pytest args...]
#
# TUBEMQ_REAL_MASTER   master host:port (default 127.0.0.1:8715)
# TUBEMQ_REAL_HOME     the real cluster's harness directory (default /tmp/tubemq-real): Java client classpath,
#                      status.sh, broker stop/start; see tests/interop/interop_support.py
# TUBEMQ_REAL_WEB      master web API (default http://127.0.0.1:18080)
# The harness's mode picks the cases (tests/interop/interop_tls.py): in its default mode the plain cases run and
# the TLS + authentication ones skip; a harness started with TLS_AUTH=1 (marker file $TUBEMQ_REAL_HOME/TLS_AUTH;
# two-way TLS on master 8716 / broker 8124, authentication on) runs those and skips the plain ones, which need
# the real Java client (it cannot produce or consume there).
# The suite stops and starts the real broker: when other people share the cluster, run this under the lock
# you agreed on with them. CI does not run it (it has no real cluster; there every interop test is skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
export TUBEMQ_REAL_MASTER=${TUBEMQ_REAL_MASTER:-127.0.0.1:8715}
export TUBEMQ_REAL_HOME=${TUBEMQ_REAL_HOME:-/tmp/tubemq-real}
export TUBEMQ_REAL_WEB=${TUBEMQ_REAL_WEB:-http://127.0.0.1:18080}
if [ ! -x .venv/bin/python ]; then
    echo "interop.sh: no .venv; run ./scripts/test.sh once first (it creates and fills it)" >&2
    exit 2
fi

echo "== real cluster"
host=${TUBEMQ_REAL_MASTER%:*} port=${TUBEMQ_REAL_MASTER##*:}
if ! .venv/bin/python -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()' \
    "$host" "$port" 2>/dev/null; then
    echo "interop.sh: no TubeMQ master answers at $TUBEMQ_REAL_MASTER: start the real cluster" \
        "(e.g. $TUBEMQ_REAL_HOME/start.sh) or set TUBEMQ_REAL_MASTER" >&2
    exit 1
fi
echo "master $TUBEMQ_REAL_MASTER: listening"
if [ -x "$TUBEMQ_REAL_HOME/status.sh" ]; then
    if ! "$TUBEMQ_REAL_HOME/status.sh"; then
        echo "interop.sh: $TUBEMQ_REAL_HOME/status.sh reports the cluster not fully up: fix it first" >&2
        exit 1
    fi
else
    echo "no harness at $TUBEMQ_REAL_HOME: the cases needing the Java client or broker restarts will skip"
fi

mode=default
if [ -f "$TUBEMQ_REAL_HOME/TLS_AUTH" ]; then
    read -r mode < "$TUBEMQ_REAL_HOME/TLS_AUTH" || true
    mode="TLS_AUTH=${mode:-1}"
fi
case $mode in
    default) echo "harness mode: default (plain TCP, no authentication): plain cases run, TLS_AUTH=1 cases skip" ;;
    TLS_AUTH=1) echo "harness mode: $mode (two-way TLS + authentication): TLS_AUTH=1 cases run, plain cases skip" ;;
    *) echo "harness mode: $mode: plain cases run, TLS_AUTH=1 cases skip" ;;
esac

echo "== interop suite"
report=$(mktemp -d)
trap 'rm -rf "$report"' EXIT
rc=0
.venv/bin/python -m pytest tests/interop -q -p no:cacheprovider --junitxml="$report/junit.xml" "$@" || rc=$?

echo "== summary"
.venv/bin/python - "$report/junit.xml" "$mode" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as exc:
    print(f"no test report ({exc})")
    sys.exit(0)
totals: dict[str, int] = {}
total_time = 0.0
for case in root.iter("testcase"):
    outcome = "passed"
    reason = ""
    for child in case:
        if child.tag in ("failure", "error", "skipped"):
            outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[child.tag]
            reason = (child.get("message") or "").splitlines()[0][:100] if child.get("message") else ""
    seconds = float(case.get("time", 0))
    total_time += seconds
    totals[outcome] = totals.get(outcome, 0) + 1
    name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
    print(f"{outcome:8} {seconds:7.1f}s  {name}" + (f"  ({reason})" if reason else ""))
print("totals: " + ", ".join(f"{n} {k}" for k, n in sorted(totals.items())) + f" in {total_time:.0f}s")
ran = sum(n for k, n in totals.items() if k != "skipped")
print(f"harness mode {sys.argv[2]}: {ran} cases ran, {totals.get('skipped', 0)} skipped")
PY
exit $rc
