#!/usr/bin/env bash
# Makes nginx available for the topology test (2 replicas behind a real nginx: HTTP and grpc_pass; Debian
# package "nginx-light" provides both, "nginx" too). Installs it only when missing, only as root and only
# where apt-get exists; otherwise it says so and exits 0, and the test skips with that reason. Never fails
# the test run by itself. The test starts its own nginx on free loopback ports; no daemon is needed.
set -uo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_nginx: nginx is missing and cannot be installed here (needs root and apt-get);" \
         "the topology test will skip" >&2
    exit 0
fi
echo "== installing nginx (Debian package) for the topology test"
export DEBIAN_FRONTEND=noninteractive
apt_install() {
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 nginx >/dev/null 2>&1
}
if ! apt_install; then
    apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null 2>&1 || true
    if ! apt_install; then
        echo "ensure_nginx: apt-get could not install nginx; the topology test will skip" >&2
        exit 0
    fi
fi
# the package starts a daemon on port 80 where an init system runs; the test needs none
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
if [ -f /run/nginx.pid ]; then /usr/sbin/nginx -s quit >/dev/null 2>&1 || true; fi
command -v nginx || ls /usr/sbin/nginx
