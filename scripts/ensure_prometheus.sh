#!/usr/bin/env bash
# Makes prometheus and promtool available for the observability tests (Debian package "prometheus").
# Installs it only when missing, only as root and only where apt-get exists; otherwise it says so and
# exits 0, and the tests that need it skip with that reason. Never fails the test run by itself.
set -uo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_prometheus: prometheus is missing and cannot be installed here (needs root and apt-get);" \
         "its tests will skip" >&2
    exit 0
fi
echo "== installing prometheus (Debian package) for the observability tests"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    if ! apt-get install -y -q --no-install-recommends prometheus >/dev/null; then
        echo "ensure_prometheus: apt-get could not install prometheus; its tests will skip" >&2
        exit 0
    fi
fi
# The tests start their own prometheus on a free loopback port; they need no daemon.
command -v prometheus promtool
