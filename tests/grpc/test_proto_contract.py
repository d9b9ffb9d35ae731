"""The public gRPC contract holds up outside Python: ``buf lint`` (STANDARD rules, buf.yaml at the root)
passes, protoc-gen-go accepts the file, and the conventions buf checks hold in the registered descriptor."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.rpc import status_pb2
from grpc_tools import protoc

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.proto_tools import ROOT, protoc_gen_go, run_buf

API = "tubemq/gateway/v1/gateway.proto"


def test_buf_lint_is_clean() -> None:
    done = run_buf("lint")
    assert done.returncode == 0 and not done.stdout.strip(), f"buf lint:\n{done.stdout}\n{done.stderr}"


def test_buf_lint_covers_the_api(tmp_path: Path) -> None:
    # The same workspace with the service named as before (Gateway, returning a bare message): buf must
    # refuse it, so the test above cannot pass because buf looked at nothing.
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    source = tmp_path / "proto" / API
    text = source.read_text(encoding="utf-8")
    old = text.replace("service GatewayService {", "service Gateway {").replace(
        "returns (GetTopicResponse);", "returns (Partition);"
    )
    assert old != text
    source.write_text(old, encoding="utf-8")
    done = run_buf("lint", cwd=tmp_path)
    assert done.returncode != 0
    assert "SERVICE_SUFFIX" in done.stdout or 'Service name "Gateway"' in done.stdout, done.stdout
    assert "GetTopicResponse" in done.stdout, done.stdout
    assert "proto/wire" not in done.stdout, "TubeMQ's wire protos are not part of the linted API"


def test_protoc_gen_go_accepts_the_api(tmp_path: Path) -> None:
    plugin = protoc_gen_go()
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{include}",
        f"-I{ROOT / 'proto'}",
        f"-I{ROOT / 'proto' / 'third_party' / 'googleapis'}",
        f"--plugin=protoc-gen-go={plugin}",
        f"--go_out={tmp_path}",
        API,
    ]
    # protoc.main prints the plugin's complaint on stderr; run it in a child to capture that.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from grpc_tools import protoc; sys.exit(protoc.main(sys.argv[1:]))",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    generated = list(tmp_path.rglob("gateway.pb.go"))
    assert len(generated) == 1 and "package gatewayv1" in generated[0].read_text(encoding="utf-8")


def test_descriptor_follows_the_conventions() -> None:
    file = pb.DESCRIPTOR
    assert file.name == API and file.package == "tubemq.gateway.v1"
    options = file.GetOptions()
    assert options.go_package.endswith("/tubemq/gateway/v1;gatewayv1")
    assert options.java_package == "io.github.tubemqgateway.gateway.v1" and options.java_multiple_files
    assert list(file.services_by_name) == ["GatewayService"]
    for method in file.services_by_name["GatewayService"].methods:
        assert method.input_type.name == f"{method.name}Request", method.name
        assert method.output_type.name == f"{method.name}Response", method.name


def test_vendored_status_proto_is_googles(tmp_path: Path) -> None:
    # buf and protoc read google/rpc/status.proto from proto/third_party/googleapis/; the generated code
    # imports googleapis-common-protos' module instead: the two must define the same messages.
    out = tmp_path / "status.binpb"
    third_party = ROOT / "proto" / "third_party" / "googleapis"
    include = Path(protoc.__file__).parent / "_proto"
    args = ["grpc_tools.protoc", f"-I{include}", f"-I{third_party}", f"--descriptor_set_out={out}"]
    assert protoc.main([*args, "google/rpc/status.proto"]) == 0
    (vendored,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    installed = descriptor_pb2.FileDescriptorProto()
    status_pb2.DESCRIPTOR.CopyToProto(installed)
    assert (
        (vendored.name, vendored.package)
        == (installed.name, installed.package)
        == (
            "google/rpc/status.proto",
            "google.rpc",
        )
    )
    for message in vendored.message_type:
        for field in message.field:
            field.ClearField("json_name")  # protoc fills it in; CopyToProto leaves it out
    assert list(vendored.message_type) == list(installed.message_type)
    assert list(vendored.dependency) == list(installed.dependency)
