"""TubeMQ RPC envelopes, the server side, sans-IO (protocol doc §1.3-§1.6, §8.2): what the embedded cluster
uses to read calls and answer them as the Java server does.

:func:`decode_request`, :func:`check_service`, :func:`parse_request`, then :func:`encode_response` or
:func:`encode_exception`; every :class:`RpcDecodeError` carries the answer the Java server would give
(:meth:`RpcDecodeError.answer`). The envelope's layout, its cached header bytes and the client side are
:mod:`gateway.tubemq.wire.rpc`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from gateway.tubemq.errors import STATUS_ERROR, STATUS_FATAL, ProtocolError
from gateway.tubemq.wire.frame import (
    Frame,
    FrameError,
    decode_delimited,
    encode_delimited,
    encode_frame,
    encode_varint,
)
from gateway.tubemq.wire.methods import METHODS, SERVICE_METHODS
from gateway.tubemq.wire.pb import RPC_pb2 as rpc_pb
from gateway.tubemq.wire.rpc import PROTOCOL_VERSION, STATUS_SUCCESS, int_varint, response_prefix, serialize
from gateway.tubemq.wire.strict import parse_strict as _parse

INVALID_PROTOBUF_EXCEPTION = "com.google.protobuf.InvalidProtocolBufferException"
JAVA_EXCEPTION = "java.lang.Exception"
_READ_PARAMS_PREFIX = "IPC server unable to read call parameters:"
_HANDLE_REQUEST_PREFIX = "IPC server handle request error :"


@dataclass(frozen=True, slots=True)
class RpcRequest:
    """A decoded request envelope (server side); absent header fields read as 0, as in Java.

    ``timeout_ms`` is the client's deadline in milliseconds (0 or less: Java never answers);
    ``body`` is the serialized inner request, see :func:`parse_request`.
    """

    serial: int
    method: int
    service_type: int
    protocol_ver: int
    timeout_ms: int
    body: bytes


class RpcDecodeError(ProtocolError):
    """Server side: a request the node cannot accept. ``answer()`` is the frame Java would send back.

    ``status`` is FATAL for unreadable envelopes, unknown methods and unparsable inner requests, ERROR
    for a method sent to the wrong service; ``exception_name`` and ``detail`` fill ``RspExceptionBody``.
    """

    def __init__(self, serial: int, status: int, exception_name: str, detail: str) -> None:
        super().__init__(f"serial {serial}: {exception_name}: {detail}")
        self.serial = serial
        self.status = status
        self.exception_name = exception_name
        self.detail = detail

    def answer(self, protocol_ver: int = PROTOCOL_VERSION) -> bytes:
        """The whole answer frame (an ERROR answer carries ``protocol_ver``, a FATAL one none)."""
        return encode_exception(self.serial, self.status, self.exception_name, self.detail, protocol_ver)


def decode_request(frame: Frame) -> RpcRequest:
    """Decode a request envelope; raise :class:`RpcDecodeError` (FATAL) when it cannot be read."""
    payload = frame.payload
    try:
        raw_conn, raw_header, raw_body = decode_delimited(payload, 3)
        _parse(rpc_pb.RpcConnHeader, raw_conn)
        header = _parse(rpc_pb.RequestHeader, raw_header)
        body = _parse(rpc_pb.RequestBody, raw_body)
    except (ValueError, FrameError) as exc:
        raise RpcDecodeError(
            frame.serial, STATUS_FATAL, INVALID_PROTOBUF_EXCEPTION, f"{_READ_PARAMS_PREFIX}{exc}"
        ) from exc
    return RpcRequest(
        frame.serial, body.method, header.serviceType, header.protocolVer, body.timeout, body.request
    )


def check_service(request: RpcRequest) -> None:
    """Raise :class:`RpcDecodeError` (ERROR, ``java.lang.Exception``) when the request's service does
    not serve its method, with the Java server's message."""
    accepted = SERVICE_METHODS.get(request.service_type)
    if accepted is None:
        detail = "Service Type is invalid!"
    elif request.method not in accepted:
        detail = f"Unsupported method {request.method}in service type {request.service_type}!"
    else:
        return
    raise RpcDecodeError(request.serial, STATUS_ERROR, JAVA_EXCEPTION, detail)


def parse_request(request: RpcRequest) -> Message:
    """Parse the inner request of a decoded envelope as its method's request type.

    Raises :class:`RpcDecodeError` (FATAL) for a method that is not served ("Unsupported method ID")
    or an unparsable inner request, as the Java server answers.
    """
    spec = METHODS.get(request.method)
    if spec is None:
        raise RpcDecodeError(
            request.serial,
            STATUS_FATAL,
            JAVA_EXCEPTION,
            f"{_HANDLE_REQUEST_PREFIX}Unsupported method ID :{request.method}",
        )
    try:
        return _parse(spec.request_type, request.body)
    except ValueError as exc:
        raise RpcDecodeError(
            request.serial, STATUS_FATAL, INVALID_PROTOBUF_EXCEPTION, f"{_HANDLE_REQUEST_PREFIX}{exc}"
        ) from exc


def encode_response(
    serial: int, method: int, response: Message, *, protocol_ver: int = PROTOCOL_VERSION
) -> bytes:
    """Return the whole SUCCESS answer frame; ``protocol_ver`` should echo the request's.

    Raises ``ValueError`` when ``response`` misses a required field (Java would fail the same way).
    """
    data = serialize(response)
    body_head = b"".join((b"\x08", int_varint(method), b"\x12", encode_varint(len(data))))
    payload = b"".join(
        (
            response_prefix(STATUS_SUCCESS, protocol_ver),
            encode_varint(len(body_head) + len(data)),
            body_head,
            data,
        )
    )
    return encode_frame(serial, payload)


def encode_exception(
    serial: int, status: int, exception_name: str, message: str, protocol_ver: int = PROTOCOL_VERSION
) -> bytes:
    """Return the whole ERROR (1) or FATAL (2) answer frame.

    As the Java server does, an ERROR answer carries ``protocol_ver`` and a FATAL one none (§8.2).
    ``exception_name`` is sent as given; see :func:`java_class_name` for older protocol versions.
    """
    if status not in (STATUS_ERROR, STATUS_FATAL):
        raise ValueError(f"exception status must be ERROR (1) or FATAL (2), got {status}")
    body = rpc_pb.RspExceptionBody(exceptionName=exception_name, stackTrace=message).SerializeToString()
    prefix = response_prefix(status, protocol_ver if status == STATUS_ERROR else None)
    return encode_frame(serial, prefix + encode_delimited(body))


_CLASS_PREFIXES = {3: "org.apache.inlong.tubemq.", 2: "com.apache.tubemq.", 1: "com.tencent.tubemq."}


def java_class_name(name: str, protocol_ver: int) -> str:
    """Rewrite a TubeMQ class name's package prefix for a peer of ``protocol_ver`` (§8.2).

    ``name`` may use any version's prefix; names outside TubeMQ (``java.``, ``com.google.``) and
    unknown versions are returned unchanged.
    """
    target = _CLASS_PREFIXES.get(protocol_ver)
    if target is None:
        return name
    for prefix in _CLASS_PREFIXES.values():
        if name.startswith(prefix):
            return target + name[len(prefix) :]
    return name
