"""RPC envelopes and the method table: round trips for every method id, exception answers, malformed
envelopes, and the hand-written envelope bytes against protobuf's own serialization."""

from __future__ import annotations

import contextlib

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.errors import ProtocolError, ServiceStoppingException, StandbyException
from gateway.tubemq.wire import rpc, rpc_server
from gateway.tubemq.wire.frame import Frame as WireFrame
from gateway.tubemq.wire.frame import decode_delimited, encode_delimited, encode_frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from gateway.tubemq.wire.pb import BrokerService_pb2, MasterService_pb2, RPC_pb2

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.tubemq.wire._rpc", "gateway.tubemq.wire._frame_decoder")

SERVED = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 16, 17, 18, 20, 21, 22}
UNSERVED = {11, 12, 14, 19}
INT64_MAX = (1 << 63) - 1


def one_frame(data: bytes) -> WireFrame:
    frames = FrameDecoder().feed(data)
    assert len(frames) == 1
    return frames[0]


def filled(message_type: type[Message], depth: int = 0) -> Message:
    """An instance with every required field (recursively) and one value in every other field."""
    message = message_type()
    for field in message_type.DESCRIPTOR.fields:
        required = field.is_required
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if required or depth == 0:
                sub = filled(GetMessageClass(field.message_type), depth + 1)
                if field.is_repeated:
                    getattr(message, field.name).add().CopyFrom(sub)
                else:
                    getattr(message, field.name).CopyFrom(sub)
            continue
        value: object
        if field.type == FieldDescriptor.TYPE_STRING:
            value = f"{field.name}-é"
        elif field.type == FieldDescriptor.TYPE_BYTES:
            value = bytes(range(field.number))
        elif field.type == FieldDescriptor.TYPE_BOOL:
            value = True
        elif field.type == FieldDescriptor.TYPE_ENUM:
            value = field.enum_type.values[-1].number
        else:
            value = -field.number if field.number % 2 else field.number * 1000
        if field.is_repeated:
            getattr(message, field.name).extend([value, value])
        else:
            setattr(message, field.name, value)
    assert message.IsInitialized()
    return message


def test_method_table_covers_section_2() -> None:
    assert {m.value for m in rpc.Method} == SERVED | UNSERVED
    assert set(rpc.METHODS) == SERVED
    for method, spec in rpc.METHODS.items():
        assert spec.method == method
        assert method in rpc.SERVICE_METHODS[spec.service]
        assert spec.request_type.DESCRIPTOR.file.name in {"MasterService.proto", "BrokerService.proto"}
    assert rpc.METHODS[13].service == rpc.Service.BROKER_WRITE
    assert rpc.METHODS[17].request_type is BrokerService_pb2.GetMessageRequestC2B
    assert rpc.METHODS[22].response_type is MasterService_pb2.GetPartMetaResponseM2C
    assert rpc.METHODS[1].name == "producerRegisterP2M"
    for method in UNSERVED:
        assert method in rpc.SERVICE_METHODS[rpc.Service.BROKER_READ]


@pytest.mark.parametrize("method", sorted(SERVED))
def test_round_trip_every_method(method: int) -> None:
    spec = rpc.METHODS[method]
    request = filled(spec.request_type)
    frame = rpc.encode_request(7, method, request, 2500)
    decoded = rpc_server.decode_request(one_frame(frame))
    assert decoded == rpc_server.RpcRequest(7, method, spec.service, 3, 2500, request.SerializeToString())
    rpc_server.check_service(decoded)
    assert rpc_server.parse_request(decoded) == request

    response = filled(spec.response_type)
    answer = rpc.decode_response(one_frame(rpc_server.encode_response(7, method, response)))
    assert answer == rpc.RpcResponse(7, method, response.SerializeToString())
    assert isinstance(answer, rpc.RpcResponse)
    assert rpc.parse_response(answer.method, answer.data) == response
    assert rpc.parse_as(spec.response_type, answer.data) == response


def test_worked_example_of_the_doc() -> None:
    # §1.7: producer close, serial 1, timeout 10000.
    frame = rpc.encode_request(
        1, rpc.Method.PRODUCER_CLOSE, MasterService_pb2.CloseRequestP2M(clientId="p1"), 10000
    )
    assert frame.hex(" ") == (
        "ff 7f f4 fe 00 00 00 01 00 00 00 01 00 00 00 14 "
        "02 08 00 04 08 01 10 03 0b 08 03 10 90 4e 1a 04 0a 02 70 31"
    )


def reference_request_payload(service: int, method: int, timeout: int, inner: bytes, ver: int = 3) -> bytes:
    return encode_delimited(
        RPC_pb2.RpcConnHeader(flag=0).SerializeToString(),
        RPC_pb2.RequestHeader(serviceType=service, protocolVer=ver).SerializeToString(),
        RPC_pb2.RequestBody(method=method, timeout=timeout, request=inner).SerializeToString(),
    )


@given(
    serial=st.integers(-(1 << 31), (1 << 31) - 1),
    method=st.integers(-(1 << 31), (1 << 31) - 1),
    service=st.integers(-(1 << 31), (1 << 31) - 1),
    timeout=st.integers(1, INT64_MAX),
    client_id=st.text(max_size=300),
)
def test_hand_written_request_body_matches_protobuf(
    serial: int, method: int, service: int, timeout: int, client_id: str
) -> None:
    inner = MasterService_pb2.CloseRequestP2M(clientId=client_id)
    if method in rpc.METHODS:
        inner_message: Message = filled(rpc.METHODS[method].request_type)
    else:
        inner_message = inner
    frame = rpc.encode_request(serial, method, inner_message, timeout, service)
    payload = reference_request_payload(service, method, timeout, inner_message.SerializeToString())
    assert frame == encode_frame(serial, payload)
    assert rpc_server.decode_request(one_frame(frame)).method == method


@given(
    method=st.integers(-(1 << 31), (1 << 31) - 1),
    data=st.binary(max_size=20000),
    ver=st.sampled_from([1, 2, 3, 0, -1]),
)
def test_hand_written_response_body_matches_protobuf(method: int, data: bytes, ver: int) -> None:
    response = BrokerService_pb2.TransferedMessage(messageId=1, checkSum=-1, payLoadData=data, flag=0)
    frame = rpc_server.encode_response(-5, method, response, protocol_ver=ver)
    payload = encode_delimited(
        RPC_pb2.RpcConnHeader(flag=1).SerializeToString(),
        RPC_pb2.ResponseHeader(status=RPC_pb2.ResponseHeader.SUCCESS, protocolVer=ver).SerializeToString(),
        RPC_pb2.RspResponseBody(method=method, data=response.SerializeToString()).SerializeToString(),
    )
    assert frame == encode_frame(-5, payload)
    answer = rpc.decode_response(one_frame(frame))
    assert answer == rpc.RpcResponse(-5, method, response.SerializeToString())


def test_large_request_spans_several_blocks() -> None:
    request = filled(BrokerService_pb2.SendMessageRequestP2B)
    assert isinstance(request, BrokerService_pb2.SendMessageRequestP2B)
    request.data = bytes(range(256)) * 100
    frame = rpc.encode_request(3, rpc.Method.SEND_MESSAGE, request, 10000)
    assert int.from_bytes(frame[8:12], "big") == 4  # listSize: 25.6 KB in 8192-byte blocks
    decoded = rpc_server.decode_request(one_frame(frame))
    assert rpc_server.parse_request(decoded) == request


def test_encode_request_rejects_bad_calls() -> None:
    close = MasterService_pb2.CloseRequestP2M(clientId="p")
    with pytest.raises(ValueError, match="takes CloseRequestC2M"):
        rpc.encode_request(1, rpc.Method.CONSUMER_CLOSE, close, 1000)
    with pytest.raises(ValueError, match="missing required"):
        rpc.encode_request(1, rpc.Method.PRODUCER_CLOSE, MasterService_pb2.CloseRequestP2M(), 1000)
    with pytest.raises(ValueError, match="timeout_ms"):
        rpc.encode_request(1, rpc.Method.PRODUCER_CLOSE, close, 0)
    with pytest.raises(ValueError, match="not served"):
        rpc.encode_request(1, 11, close, 1000)
    # An unserved method can still be sent on purpose (to exercise a server's FATAL answer).
    decoded = rpc_server.decode_request(
        one_frame(rpc.encode_request(1, 11, close, 1000, rpc.Service.BROKER_WRITE))
    )
    assert (decoded.method, decoded.service_type) == (11, 3)


def test_explicit_service_and_protocol_version() -> None:
    request = filled(BrokerService_pb2.SendMessageRequestP2B)
    frame = rpc.encode_request(9, 13, request, 500, rpc.Service.BROKER_READ, protocol_ver=2)
    decoded = rpc_server.decode_request(one_frame(frame))
    assert (decoded.service_type, decoded.protocol_ver) == (2, 2)
    rpc_server.check_service(decoded)  # Go sends method 13 to the read service; it is accepted


@pytest.mark.parametrize(
    ("status", "name", "expected"),
    [
        (1, "org.apache.inlong.tubemq.corerpc.exception.StandbyException", StandbyException),
        (1, "com.apache.tubemq.corerpc.exception.ServiceStoppingException", ServiceStoppingException),
    ],
)
def test_exception_answers(status: int, name: str, expected: type[Exception]) -> None:
    frame = rpc_server.encode_exception(-3, status, name, "not the active master")
    answer = rpc.decode_response(one_frame(frame))
    assert answer == rpc.RpcFailure(-3, status, name, "not the active master")
    assert isinstance(answer, rpc.RpcFailure)
    error = answer.to_exception()
    assert isinstance(error, expected)
    assert error.status == status and error.message == "not the active master"


def test_error_answer_carries_protocol_version_and_fatal_does_not() -> None:
    def header(frame: bytes) -> RPC_pb2.ResponseHeader:
        parts = decode_delimited(one_frame(frame).payload, 3)
        return RPC_pb2.ResponseHeader.FromString(parts[1])

    error = header(rpc_server.encode_exception(1, rpc.STATUS_ERROR, rpc_server.JAVA_EXCEPTION, "x", 2))
    assert (error.status, error.HasField("protocolVer"), error.protocolVer) == (1, True, 2)
    fatal = header(
        rpc_server.encode_exception(1, rpc.STATUS_FATAL, rpc_server.INVALID_PROTOBUF_EXCEPTION, "y")
    )
    assert (fatal.status, fatal.HasField("protocolVer")) == (2, False)
    assert not fatal.HasField("serviceType")
    with pytest.raises(ValueError, match="ERROR"):
        rpc_server.encode_exception(1, rpc.STATUS_SUCCESS, "x", "y")


def test_encode_response_rejects_incomplete_message() -> None:
    with pytest.raises(ValueError, match="errCode"):
        rpc_server.encode_response(1, 3, MasterService_pb2.CloseResponseM2P(success=True, errMsg="OK!"))


def raw_frame(serial: int, *parts: bytes) -> WireFrame:
    return WireFrame(serial, encode_delimited(*parts))


CONN_REQ = RPC_pb2.RpcConnHeader(flag=0).SerializeToString()
REQ_HEADER = RPC_pb2.RequestHeader(serviceType=1, protocolVer=3).SerializeToString()
CONN_RSP = RPC_pb2.RpcConnHeader(flag=1).SerializeToString()


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # nothing at all
        b"\x02\x08\x00",  # headers missing
        encode_delimited(CONN_REQ, REQ_HEADER),  # body missing
        encode_delimited(CONN_REQ, REQ_HEADER) + b"\x10\x08\x03",  # body runs past the payload
        encode_delimited(b"", REQ_HEADER, b"\x08\x03"),  # RpcConnHeader without its required flag
        encode_delimited(CONN_REQ, REQ_HEADER, b"\x10\x90\x4e"),  # RequestBody without its method
        encode_delimited(CONN_REQ, b"\xff", b"\x08\x03"),  # corrupt RequestHeader
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # over-long varint
    ],
)
def test_malformed_request_envelopes_get_a_fatal_answer(payload: bytes) -> None:
    with pytest.raises(rpc_server.RpcDecodeError) as caught:
        rpc_server.decode_request(WireFrame(42, payload))
    error = caught.value
    assert isinstance(error, ProtocolError)
    assert (error.serial, error.status) == (42, rpc.STATUS_FATAL)
    assert error.exception_name == "com.google.protobuf.InvalidProtocolBufferException"
    assert error.detail.startswith("IPC server unable to read call parameters:")
    answer = rpc.decode_response(one_frame(error.answer()))
    assert answer == rpc.RpcFailure(42, 2, error.exception_name, error.detail)


def test_absent_optional_header_fields_read_as_zero() -> None:
    body = RPC_pb2.RequestBody(method=3).SerializeToString()
    decoded = rpc_server.decode_request(raw_frame(1, CONN_REQ, b"", body))
    assert decoded == rpc_server.RpcRequest(1, 3, 0, 0, 0, b"")
    with pytest.raises(rpc_server.RpcDecodeError) as caught:
        rpc_server.check_service(decoded)
    assert (caught.value.status, caught.value.detail) == (rpc.STATUS_ERROR, "Service Type is invalid!")


@pytest.mark.parametrize(("service", "method"), [(1, 13), (1, 15), (2, 1), (3, 15), (3, 17), (2, 20)])
def test_method_sent_to_the_wrong_service_gets_an_error_answer(service: int, method: int) -> None:
    request = rpc_server.RpcRequest(5, method, service, 3, 1000, b"")
    with pytest.raises(rpc_server.RpcDecodeError) as caught:
        rpc_server.check_service(request)
    error = caught.value
    assert (error.status, error.exception_name) == (rpc.STATUS_ERROR, "java.lang.Exception")
    assert error.detail == f"Unsupported method {method}in service type {service}!"
    assert isinstance(rpc.decode_response(one_frame(error.answer())), rpc.RpcFailure)


@pytest.mark.parametrize("method", sorted(UNSERVED | {0, 10, 23, -1}))
def test_unserved_method_gets_a_fatal_answer(method: int) -> None:
    with pytest.raises(rpc_server.RpcDecodeError) as caught:
        rpc_server.parse_request(rpc_server.RpcRequest(5, method, 2, 3, 1000, b""))
    error = caught.value
    assert (error.status, error.exception_name) == (rpc.STATUS_FATAL, "java.lang.Exception")
    assert error.detail == f"IPC server handle request error :Unsupported method ID :{method}"


def test_unparsable_inner_request_gets_a_fatal_answer() -> None:
    with pytest.raises(rpc_server.RpcDecodeError) as caught:
        rpc_server.parse_request(rpc_server.RpcRequest(5, 3, 1, 3, 1000, b"\x0a\x05ab"))
    assert caught.value.exception_name == rpc_server.INVALID_PROTOBUF_EXCEPTION
    assert caught.value.status == rpc.STATUS_FATAL
    with pytest.raises(rpc_server.RpcDecodeError) as caught:
        rpc_server.parse_request(rpc_server.RpcRequest(5, 6, 1, 3, 1000, b"\x0a\x01p"))
    assert (
        caught.value.detail == "IPC server handle request error :Message missing required fields: groupName"
    )


RSP_OK_HEADER = RPC_pb2.ResponseHeader(
    status=RPC_pb2.ResponseHeader.SUCCESS, protocolVer=3
).SerializeToString()


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        encode_delimited(CONN_RSP, RSP_OK_HEADER),  # body missing
        encode_delimited(CONN_RSP, RSP_OK_HEADER, b"\x08\x03"),  # RspResponseBody without data
        encode_delimited(CONN_RSP, b"\x08\x05", b""),  # status outside the enum
        encode_delimited(CONN_RSP, b"\x18\x03", b""),  # status absent
        encode_delimited(CONN_RSP, b"\x08\x01", b"\x12\x00"),  # RspExceptionBody without its name
        encode_delimited(b"\x10\x01", RSP_OK_HEADER, b"\x08\x03\x12\x00"),  # RpcConnHeader without flag
        encode_delimited(CONN_RSP, RSP_OK_HEADER) + b"\x05\x08",  # body runs past the payload
    ],
)
def test_malformed_answers_raise_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError, match="serial 9"):
        rpc.decode_response(WireFrame(9, payload))


def test_answer_without_the_cached_prefix_is_still_read() -> None:
    # Headers with optional fields set the Java server never sends: the slow path handles them.
    conn = RPC_pb2.RpcConnHeader(flag=1, traceId=5).SerializeToString()
    header = RPC_pb2.ResponseHeader(status=0, serviceType=1).SerializeToString()
    body = RPC_pb2.RspResponseBody(method=3, data=b"\x08\x01").SerializeToString()
    assert rpc.decode_response(raw_frame(4, conn, header, body)) == rpc.RpcResponse(4, 3, b"\x08\x01")


def test_parse_helpers_raise_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="method 11"):
        rpc.parse_response(11, b"")
    with pytest.raises(ProtocolError, match="CloseResponseM2P"):
        rpc.parse_response(3, b"\x08\x01")  # errCode and errMsg missing
    with pytest.raises(ProtocolError, match="GetMessageResponseB2C"):
        rpc.parse_as(BrokerService_pb2.GetMessageResponseB2C, b"\xff\xff")


@given(st.binary(max_size=200), st.integers(-(1 << 31), (1 << 31) - 1))
def test_arbitrary_payloads_fail_only_with_our_errors(payload: bytes, serial: int) -> None:
    frame = WireFrame(serial, payload)
    try:
        request = rpc_server.decode_request(frame)
    except rpc_server.RpcDecodeError as exc:
        assert exc.serial == serial
    else:
        try:
            rpc_server.check_service(request)
            rpc_server.parse_request(request)
        except rpc_server.RpcDecodeError as exc:
            assert exc.serial == serial
    try:
        answer = rpc.decode_response(frame)
    except ProtocolError:
        pass
    else:
        if isinstance(answer, rpc.RpcResponse):
            with contextlib.suppress(ProtocolError):
                rpc.parse_response(answer.method, answer.data)


@pytest.mark.parametrize(
    ("name", "version", "expected"),
    [
        (
            "org.apache.inlong.tubemq.corerpc.exception.StandbyException",
            2,
            "com.apache.tubemq.corerpc.exception.StandbyException",
        ),
        (
            "org.apache.inlong.tubemq.corerpc.exception.StandbyException",
            1,
            "com.tencent.tubemq.corerpc.exception.StandbyException",
        ),
        (
            "com.tencent.tubemq.corerpc.exception.StandbyException",
            3,
            "org.apache.inlong.tubemq.corerpc.exception.StandbyException",
        ),
        ("java.lang.Exception", 2, "java.lang.Exception"),
        ("org.apache.inlong.tubemq.X", 9, "org.apache.inlong.tubemq.X"),
    ],
)
def test_java_class_name(name: str, version: int, expected: str) -> None:
    assert rpc_server.java_class_name(name, version) == expected


@given(
    st.lists(st.binary(max_size=12_000), min_size=1, max_size=4),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(1, 1 << 40),
)
def test_encode_requests_frames_messages_and_bytes_like_encode_request(
    bodies: list[bytes], first: int, timeout_ms: int
) -> None:
    messages = [
        BrokerService_pb2.SendMessageRequestP2B(
            clientId="c", topicName="t", partitionId=i, data=body, flag=0, checkSum=-1, sentAddr=1
        )
        for i, body in enumerate(bodies)
    ]
    serials = [(first + i) if first + i < (1 << 31) else i for i in range(len(messages))]
    expected = [rpc.encode_request(s, 13, m, timeout_ms) for s, m in zip(serials, messages, strict=True)]
    assert rpc.encode_requests(serials, 13, messages, timeout_ms) == expected
    raw = [m.SerializeToString() for m in messages]
    assert rpc.encode_requests(serials, 13, raw, timeout_ms, rpc.Service.BROKER_WRITE) == expected
    mixed: list[Message | bytes] = [raw[0], *messages[1:]]
    assert rpc.encode_requests(serials, 13, mixed, timeout_ms) == expected
    for frame, message in zip(expected, messages, strict=True):
        assert rpc_server.parse_request(rpc_server.decode_request(one_frame(frame))) == message


def test_encode_requests_refuses_what_encode_request_refuses() -> None:
    close = MasterService_pb2.CloseRequestP2M(clientId="p")
    with pytest.raises(ValueError, match="timeout"):
        rpc.encode_requests([1], rpc.Method.PRODUCER_CLOSE, [close], 0)
    with pytest.raises(ValueError, match="service"):
        rpc.encode_requests([1], 11, [b""], 1000)
    with pytest.raises(ValueError, match="takes CloseRequestC2M"):
        rpc.encode_requests([1], rpc.Method.CONSUMER_CLOSE, [close], 1000)


def _success_answer(serial: int, body: bytes) -> WireFrame:
    header = RPC_pb2.ResponseHeader(status=RPC_pb2.ResponseHeader.SUCCESS, protocolVer=3).SerializeToString()
    return WireFrame(serial, encode_delimited(CONN_RSP, header, body))


@given(
    st.one_of(
        # as Java writes it, with any method (one-byte varints take the hand-read path) and data
        st.builds(
            lambda method, data: RPC_pb2.RspResponseBody(method=method, data=data).SerializeToString(),
            st.integers(-(1 << 31), (1 << 31) - 1) | st.integers(0, 127),
            st.binary(max_size=300),
        ),
        # the hand-read layout spoiled: trailing or missing bytes, repeated or unknown fields, any bytes
        st.builds(
            lambda data, tail: b"\x08\x03\x12" + bytes([len(data)]) + data + tail,
            st.binary(max_size=100),
            st.sampled_from([b"", b"\x08\x04", b"\x12\x01z", b"\x18\x01", b"\x00", b"\x12"]),
        ),
        st.builds(lambda data: b"\x08\x03\x12" + bytes([len(data) + 1]) + data, st.binary(max_size=100)),
        st.binary(max_size=40).map(lambda b: b"\x08\x03\x12" + b),
        st.binary(max_size=40),
    )
)
def test_success_answers_read_as_protobuf_reads_their_body(body: bytes) -> None:
    # The usual answer's body is read by hand; it must give what protobuf's parse gives, or fail likewise.
    expected: rpc.RpcResponse | None
    try:
        parsed = RPC_pb2.RspResponseBody.FromString(body)
        expected = rpc.RpcResponse(7, parsed.method, parsed.data) if parsed.IsInitialized() else None
    except DecodeError:
        expected = None
    if expected is None:
        with pytest.raises(ProtocolError, match="serial 7"):
            rpc.decode_response(_success_answer(7, body))
    else:
        assert rpc.decode_response(_success_answer(7, body)) == expected
