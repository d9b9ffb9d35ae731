"""The committed generated protobuf modules match their .proto sources, and the schemas hold what the
protocol needs (proto2 presence, global names, no cross-file imports)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gateway.tubemq.wire.pb import BrokerService_pb2, MasterService_pb2, RPC_pb2
from tests.support.files import ROOT

SCRIPT = ROOT / "scripts" / "gen_protos.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_protos", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generated(root: Path, out_rel: str) -> dict[str, bytes]:
    base = root / out_rel
    if not base.is_dir():
        return {}
    return {
        p.relative_to(base).as_posix(): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and ("_pb2" in p.name) and p.suffix in {".py", ".pyi"}
    }


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (dev dependency) not installed")
    gen = _load_script()
    gen.generate(tmp_path)
    for _src, _sub, out_rel, _grpc in gen.TARGETS:
        fresh = _generated(tmp_path, out_rel)
        committed = _generated(ROOT, out_rel)
        assert sorted(committed) == sorted(fresh), f"{out_rel}: run python scripts/gen_protos.py"
        stale = [name for name in fresh if fresh[name] != committed[name]]
        assert not stale, f"{out_rel}: stale {stale}; run python scripts/gen_protos.py"
    assert _generated(tmp_path, "gateway/tubemq/wire/pb"), "no tubemq modules generated"


def test_generation_is_deterministic(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (dev dependency) not installed")
    gen = _load_script()
    gen.generate(tmp_path / "a")
    gen.generate(tmp_path / "b")
    for _src, _sub, out_rel, _grpc in gen.TARGETS:
        assert _generated(tmp_path / "a", out_rel) == _generated(tmp_path / "b", out_rel)


def test_script_runs_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (dev dependency) not installed")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out-root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "gateway/tubemq/wire/pb/RPC_pb2.py" in done.stdout.split()
    assert (tmp_path / "gateway/tubemq/wire/pb/__init__.py").is_file()


def test_generation_over_a_tree_whose_modules_were_imported(tmp_path: Path) -> None:
    """A tree whose generated modules were imported holds their ``.pyc`` files in ``__pycache__``: the script
    reads and packages only what protoc writes, so it regenerates over such a tree as over a fresh one."""
    pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (dev dependency) not installed")
    gen = _load_script()
    gen.generate(tmp_path)
    for _src, _sub, out_rel, _grpc in gen.TARGETS:
        for module in (tmp_path / out_rel).rglob("*_pb2*.py"):
            cache = module.parent / "__pycache__"
            cache.mkdir(exist_ok=True)
            (cache / f"{module.stem}.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\x00\xff compiled")
    gen.generate(tmp_path)
    assert not [p for p in tmp_path.rglob("__pycache__/__init__.py")], "a cache directory made a package"
    for _src, _sub, out_rel, _grpc in gen.TARGETS:
        assert _generated(tmp_path, out_rel) == _generated(ROOT, out_rel)


@pytest.mark.parametrize("module", [RPC_pb2, MasterService_pb2, BrokerService_pb2])
def test_schema_files_are_standalone_proto2_without_package(module: ModuleType) -> None:
    file = module.DESCRIPTOR
    assert file.package == ""
    assert list(file.dependencies) == []
    assert file.name == module.__name__.rsplit(".", 1)[1].removesuffix("_pb2") + ".proto"
    for message in file.message_types_by_name.values():
        assert message.full_name == message.name  # global names, as upstream


def test_presence_of_optional_fields_is_kept() -> None:
    response = BrokerService_pb2.GetMessageResponseB2C(success=True, errCode=200)
    assert not response.HasField("currOffset")
    response.currOffset = 0
    assert response.HasField("currOffset")
    parsed = BrokerService_pb2.GetMessageResponseB2C.FromString(response.SerializeToString())
    assert parsed.HasField("currOffset") and not parsed.HasField("maxOffset")


def test_required_fields_are_enforced() -> None:
    incomplete = MasterService_pb2.CloseRequestP2M()
    assert not incomplete.IsInitialized()
    assert incomplete.FindInitializationErrors() == ["clientId"]


def test_worked_example_bytes_of_the_doc() -> None:
    # §1.7: the inner request and envelope parts, byte for byte.
    inner = MasterService_pb2.CloseRequestP2M(clientId="p1").SerializeToString()
    assert inner.hex(" ") == "0a 02 70 31"
    assert RPC_pb2.RpcConnHeader(flag=0).SerializeToString().hex(" ") == "08 00"
    assert RPC_pb2.RequestHeader(serviceType=1, protocolVer=3).SerializeToString().hex(" ") == "08 01 10 03"
    body = RPC_pb2.RequestBody(method=3, timeout=10000, request=inner).SerializeToString()
    assert body.hex(" ") == "08 03 10 90 4e 1a 04 0a 02 70 31"


def test_status_enum() -> None:
    status = RPC_pb2.ResponseHeader.Status
    assert (status.Value("SUCCESS"), status.Value("ERROR"), status.Value("FATAL")) == (0, 1, 2)
    assert (RPC_pb2.ResponseHeader.SUCCESS, RPC_pb2.ResponseHeader.FATAL) == (0, 2)
