#!/usr/bin/env bash
# The Java gRPC plugin under whichever name this machine has it: GRPC_JAVA_PLUGIN when set, else
# protoc-gen-grpc-java (the grpc-java release's name) or grpc_java_plugin (Debian's package
# protobuf-compiler-grpc-java-plugin) from PATH. protoc.sh and buf.gen.yaml run it as the plugin.
set -euo pipefail
plugin=${GRPC_JAVA_PLUGIN:-$(command -v protoc-gen-grpc-java || command -v grpc_java_plugin || true)}
if [ -z "$plugin" ]; then
    echo "protoc-gen-grpc-java.sh: no Java gRPC plugin: install protoc-gen-grpc-java (grpc-java releases) or" \
        "Debian's protobuf-compiler-grpc-java-plugin, or name it with GRPC_JAVA_PLUGIN" >&2
    exit 1
fi
exec "$plugin" "$@"
