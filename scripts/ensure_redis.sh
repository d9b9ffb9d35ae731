#!/usr/bin/env bash
# Makes redis-server available for the idempotency tests with a shared store (tests/service/test_idempotency_redis.py:
# a real Redis the tests start on a free loopback port). Installs the Debian package only when missing, only
# as root and only where apt-get exists; otherwise it says so and exits 0, and those tests skip with that
# reason. Never fails the test run by itself; no daemon is needed.
set -uo pipefail
if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_redis: redis-server is missing and cannot be installed here (needs root and apt-get);" \
         "the Redis idempotency tests will skip" >&2
    exit 0
fi
echo "== installing redis-server (Debian package) for the idempotency tests"
export DEBIAN_FRONTEND=noninteractive
apt_install() {
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 redis-server >/dev/null 2>&1
}
if ! apt_install; then
    apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null 2>&1 || true
    if ! apt_install; then
        echo "ensure_redis: apt-get could not install redis-server; the Redis idempotency tests will skip" >&2
        exit 0
    fi
fi
# the package starts a daemon where an init system runs; the tests need none
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
command -v redis-server || ls /usr/bin/redis-server
