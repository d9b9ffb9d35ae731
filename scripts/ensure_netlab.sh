#!/usr/bin/env bash
# Makes the network-fault lab's tools available (tests/tubemq/test_network_faults.py): iproute2 (ip netns, veth, tc)
# and nftables (nft: packet loss and partitions inside the lab's own network namespace, on kernels without
# sch_netem). Installs what is missing only as root and only where apt-get exists; otherwise it says so and
# exits 0, and the tests skip with the reason. Never fails the test run by itself.
set -uo pipefail
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_netlab: ${missing[*]} missing and cannot be installed here (needs root and apt-get);" \
         "the network-fault tests will skip" >&2
    exit 0
fi
echo "== installing ${missing[*]} (Debian) for the network-fault tests"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    if ! apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >/dev/null; then
        echo "ensure_netlab: apt-get could not install ${missing[*]}; the network-fault tests will skip" >&2
    fi
fi
exit 0
