#!/usr/bin/env bash
# Makes Node.js + npm, a JDK (javac, java), protoc and the Go and Java gRPC plugins (protoc-gen-go,
# protoc-gen-go-grpc, grpc_java_plugin) available for the client-example tests (tests/docs/test_clients.py,
# docs/clients.md). Installs the Debian packages only when a tool is missing, only as root and only where
# apt-get exists; otherwise it says so and exits 0, and the tests that need the tool skip with that reason.
# Never fails the test run by itself.
set -uo pipefail
missing=()
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v javac >/dev/null 2>&1 && command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v protoc-gen-go >/dev/null 2>&1 || missing+=(protoc-gen-go)
command -v protoc-gen-go-grpc >/dev/null 2>&1 || missing+=(protoc-gen-go-grpc)
command -v grpc_java_plugin >/dev/null 2>&1 || command -v protoc-gen-grpc-java >/dev/null 2>&1 \
    || missing+=(protobuf-compiler-grpc-java-plugin)
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_client_tools: ${missing[*]} missing and cannot be installed here (needs root and apt-get);" \
         "the client-example tests that need them will skip" >&2
    exit 0
fi
echo "== installing ${missing[*]} (Debian packages) for the client-example tests"
export DEBIAN_FRONTEND=noninteractive
apt_install() {
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@" >/dev/null 2>&1
}
if ! apt_install "${missing[@]}"; then
    apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 || true
    if ! apt_install "${missing[@]}"; then
        echo "ensure_client_tools: apt-get could not install ${missing[*]}; the tests that need them will skip" >&2
        exit 0
    fi
fi
command -v node npm javac java protoc protoc-gen-go protoc-gen-go-grpc
