"""Every call of the real Java client/server capture decodes to the recorded fields with our
frame + rpc + pb code, and re-encodes to the very same bytes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.tubemq.wire import rpc, rpc_server
from gateway.tubemq.wire.frame import Frame, decode_delimited
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from gateway.tubemq.wire.pb import RPC_pb2
from tests.support.files import CAPTURE_FILE

CAPTURE = json.loads(CAPTURE_FILE.read_text())
CALLS: list[tuple[str, dict[str, Any]]] = [
    (f"{index}-{conn['server']}-{call['serial']}-m{call['method']}", call)
    for index, conn in enumerate(CAPTURE["connections"])
    for call in conn["calls"]
]


def as_dict(message: Message) -> dict[str, Any]:
    # The capture's convention: proto field names, int64 as strings, bytes as base64, enums by name.
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def only_frame(hex_text: str) -> Frame:
    frames = FrameDecoder().feed(bytes.fromhex(hex_text))
    assert len(frames) == 1
    return frames[0]


def test_capture_is_not_empty() -> None:
    assert len(CALLS) >= 30
    methods = {call["method"] for _, call in CALLS}
    assert methods == {1, 2, 3, 4, 5, 6, 13, 15, 16, 17, 18}


@pytest.mark.parametrize("call", [call for _, call in CALLS], ids=[name for name, _ in CALLS])
def test_request_decodes_to_the_recorded_fields(call: dict[str, Any]) -> None:
    frame = only_frame(call["request_frame_hex"])
    assert frame.serial == call["serial"]
    request = rpc_server.decode_request(frame)
    rpc_server.check_service(request)
    envelope = call["request_envelope"]
    assert request.method == call["method"]
    assert request.timeout_ms == envelope["timeout"]
    header = {"serviceType": request.service_type, "protocolVer": request.protocol_ver}
    assert header == envelope["request_header"]
    raw_conn, raw_header, _ = decode_delimited(frame.payload, 3, exact=True)
    assert as_dict(RPC_pb2.RpcConnHeader.FromString(raw_conn)) == envelope["conn_header"]
    assert as_dict(RPC_pb2.RequestHeader.FromString(raw_header)) == envelope["request_header"]

    spec = rpc.METHODS[request.method]
    assert spec.request_type.DESCRIPTOR.name == call["request_type"]
    message = rpc_server.parse_request(request)
    assert as_dict(message) == call["request"]


@pytest.mark.parametrize("call", [call for _, call in CALLS], ids=[name for name, _ in CALLS])
def test_response_decodes_to_the_recorded_fields(call: dict[str, Any]) -> None:
    frame = only_frame(call["response_frame_hex"])
    assert frame.serial == call["serial"]
    answer = rpc.decode_response(frame)
    assert isinstance(answer, rpc.RpcResponse)
    assert answer.method == call["method"]
    envelope = call["response_envelope"]
    raw_conn, raw_header, _ = decode_delimited(frame.payload, 3, exact=True)
    assert as_dict(RPC_pb2.RpcConnHeader.FromString(raw_conn)) == envelope["conn_header"]
    assert as_dict(RPC_pb2.ResponseHeader.FromString(raw_header)) == envelope["response_header"]

    assert rpc.METHODS[answer.method].response_type.DESCRIPTOR.name == call["response_type"]
    message = rpc.parse_response(answer.method, answer.data)
    assert as_dict(message) == call["response"]


@pytest.mark.parametrize("call", [call for _, call in CALLS], ids=[name for name, _ in CALLS])
def test_reencoding_gives_the_captured_bytes(call: dict[str, Any]) -> None:
    spec = rpc.METHODS[call["method"]]
    request = json_format.ParseDict(call["request"], spec.request_type())
    timeout = call["request_envelope"]["timeout"]
    encoded = rpc.encode_request(call["serial"], call["method"], request, timeout)
    assert encoded.hex() == call["request_frame_hex"]

    response = json_format.ParseDict(call["response"], spec.response_type())
    assert (
        rpc_server.encode_response(call["serial"], call["method"], response).hex()
        == call["response_frame_hex"]
    )


def test_each_connection_decodes_as_one_stream_in_any_split() -> None:
    chooser = random.Random(20240611)
    for conn in CAPTURE["connections"]:
        for side in ("request_frame_hex", "response_frame_hex"):
            stream = b"".join(bytes.fromhex(call[side]) for call in conn["calls"])
            decoder = FrameDecoder()
            frames: list[Frame] = []
            pos = 0
            while pos < len(stream):
                step = chooser.randint(1, 64)
                frames.extend(decoder.feed(stream[pos : pos + step]))
                pos += step
            assert [frame.serial for frame in frames] == [call["serial"] for call in conn["calls"]]
            for frame, call in zip(frames, conn["calls"], strict=True):
                if side == "request_frame_hex":
                    assert rpc_server.decode_request(frame).method == call["method"]
                else:
                    answer = rpc.decode_response(frame)
                    assert isinstance(answer, rpc.RpcResponse) and answer.method == call["method"]
