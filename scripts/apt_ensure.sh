#!/usr/bin/env bash
# Usage: apt_ensure.sh "<whose tests>" "<commands>" <debian packages...>
# Makes the commands available for the tests that need them by installing the Debian packages when a command
# is missing, only as root and only where apt-get exists (waiting up to 300 s for another dpkg run);
# otherwise it says so and exits 0, and those tests skip with that reason. Never fails the test run by itself.
set -uo pipefail
WHO=$1
COMMANDS=$2
shift 2
missing=0
for cmd in $COMMANDS; do
    command -v "$cmd" >/dev/null 2>&1 || missing=1
done
[ "$missing" = 0 ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "apt_ensure: $* missing and cannot be installed here (needs root and apt-get); $WHO will skip" >&2
    exit 0
fi
echo "== installing $* (Debian packages) for $WHO"
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=300)
if ! "${APT[@]}" install -y -q --no-install-recommends "$@" >/dev/null 2>&1; then
    "${APT[@]}" update -q >/dev/null 2>&1 || true
    if ! "${APT[@]}" install -y -q --no-install-recommends "$@" >/dev/null; then
        echo "apt_ensure: apt-get could not install $*; $WHO will skip" >&2
        exit 0
    fi
fi
# shellcheck disable=SC2086
command -v $COMMANDS || true
