#!/usr/bin/env bash
# Go and Java gRPC stubs of the gateway's API with protoc (docs/clients.md, "Go" and "Java"); buf users:
# examples/grpc/buf.gen.yaml. Usage, from anywhere:  examples/grpc/protoc.sh go|java OUT_DIR
# Needs protoc and the plugins on PATH: protoc-gen-go + protoc-gen-go-grpc (Go), protoc-gen-grpc-java or
# Debian's grpc_java_plugin (Java; GRPC_JAVA_PLUGIN names it elsewhere: see protoc-gen-grpc-java.sh).
set -euo pipefail
PROTO="$(cd "$(dirname "$0")/../../proto" && pwd)"
# google/rpc/status.proto, the API's one import beyond protobuf's own, is in proto/third_party/googleapis
INCLUDES=(-I "$PROTO" -I "$PROTO/third_party/googleapis")
OUT=${2:?usage: protoc.sh go|java OUT_DIR}
mkdir -p "$OUT"
case ${1:?usage: protoc.sh go|java OUT_DIR} in
go)
    # paths=source_relative: OUT/tubemq/gateway/v1/*.go, package gatewayv1, wherever OUT is in your module
    # (import it as <your module>/<OUT>/tubemq/gateway/v1); its imports resolve with go get:
    #   go get google.golang.org/grpc google.golang.org/protobuf google.golang.org/genproto/googleapis/rpc
    protoc "${INCLUDES[@]}" \
        --go_out="$OUT" --go_opt=paths=source_relative \
        --go-grpc_out="$OUT" --go-grpc_opt=paths=source_relative \
        tubemq/gateway/v1/gateway.proto
    ;;
java)
    # OUT/io/github/tubemqgateway/gateway/v1/*.java; compile with io.grpc:grpc-stub, grpc-protobuf and
    # com.google.api.grpc:proto-google-common-protos (com.google.rpc.Status) on the class path
    protoc "${INCLUDES[@]}" \
        --java_out="$OUT" \
        --plugin=protoc-gen-grpc-java="$(dirname "$0")/protoc-gen-grpc-java.sh" --grpc-java_out="$OUT" \
        tubemq/gateway/v1/gateway.proto
    ;;
*)
    echo "usage: protoc.sh go|java OUT_DIR" >&2
    exit 2
    ;;
esac
