"""TubeMQ RPC envelopes, sans-IO (protocol doc §1.3-§1.6, §3.1, §8.2).

A request payload is three varint-delimited messages, ``RpcConnHeader{flag=0}``,
``RequestHeader{serviceType, protocolVer}`` and ``RequestBody{method, timeout, request}``; an answer
is ``RpcConnHeader{flag=1}``, ``ResponseHeader{status, protocolVer}`` and either
``RspResponseBody{method, data}`` (SUCCESS) or ``RspExceptionBody{exceptionName, stackTrace}``
(ERROR/FATAL). ``request`` and ``data`` hold the serialized method-specific message named by
:data:`METHODS` (the method table, :mod:`gateway.tubemq.wire.methods`, re-exported here).

This module is the envelope's shared bytes and the client side: :func:`encode_request`, then
:func:`decode_response` and :func:`parse_response` (or :func:`parse_as`). The server side (the embedded
cluster's) is :mod:`gateway.tubemq.wire.rpc_server`.

The headers are the same for every call of a service, so their bytes are built once and cached, and
``RequestBody``/``RspResponseBody`` are written by hand around the inner message's bytes (one copy
fewer than building the envelope message); the tests check these bytes against protobuf's own. Every
parse checks required fields and UTF-8 text as the Java peers do (:mod:`gateway.tubemq.wire.strict`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from google.protobuf.message import EncodeError, Message

from gateway.tubemq.errors import STATUS_ERROR as STATUS_ERROR  # re-exported: answer statuses live here too
from gateway.tubemq.errors import STATUS_FATAL as STATUS_FATAL
from gateway.tubemq.errors import ProtocolError, RemoteException, remote_exception
from gateway.tubemq.wire.frame import (
    BLOCK_SIZE,
    Frame,
    FrameError,
    decode_delimited,
    decode_varint,
    encode_delimited,
    encode_frame_parts,
    encode_varint,
)
from gateway.tubemq.wire.methods import METHODS as METHODS  # re-exported: rpc.Method, rpc.METHODS, ...
from gateway.tubemq.wire.methods import OP_REGISTER as OP_REGISTER
from gateway.tubemq.wire.methods import OP_UNREGISTER as OP_UNREGISTER
from gateway.tubemq.wire.methods import SERVICE_METHODS as SERVICE_METHODS
from gateway.tubemq.wire.methods import Method as Method
from gateway.tubemq.wire.methods import MethodSpec as MethodSpec
from gateway.tubemq.wire.methods import Service as Service
from gateway.tubemq.wire.pb import RPC_pb2 as rpc_pb
from gateway.tubemq.wire.speedups import compiled_or
from gateway.tubemq.wire.strict import parse_strict as _parse

PROTOCOL_VERSION = 3
"""``protocolVer`` of ``org.apache.inlong`` clients (2: ``com.apache``, 1: ``com.tencent``)."""
FLAG_REQUEST = 0
FLAG_RESPONSE = 1
STATUS_SUCCESS = 0


@dataclass(slots=True)
class RpcResponse:
    """A SUCCESS answer (client side); ``data`` is the serialized inner response of ``method``. Treat it
    as read-only (not frozen: one is built per answer, and a frozen dataclass costs twice as much to build).
    """

    serial: int
    method: int
    data: bytes


@dataclass(frozen=True, slots=True)
class RpcFailure:
    """An ERROR (1) or FATAL (2) answer (client side), from ``RspExceptionBody``."""

    serial: int
    status: int
    exception_name: str
    message: str

    def to_exception(self) -> RemoteException:
        """The typed exception for this answer (``errors.remote_exception``)."""
        return remote_exception(self.status, self.exception_name, self.message)


# --- wire helpers (the server side, rpc_server.py, uses them too) -------------------------------------

_MessageT = TypeVar("_MessageT", bound=Message)

_UINT64_MASK = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def int_varint(value: int) -> bytes:
    """A protobuf int32/int64 value: negatives take ten bytes (two's complement on 64 bits)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit an int64")
    return encode_varint(value & _UINT64_MASK)


def serialize(message: Message) -> bytes:
    try:
        return message.SerializeToString()
    except EncodeError as exc:
        raise ValueError(f"cannot encode {type(message).__name__}: {exc}") from exc


_CONN_REQUEST = encode_delimited(rpc_pb.RpcConnHeader(flag=FLAG_REQUEST).SerializeToString())
_CONN_RESPONSE = encode_delimited(rpc_pb.RpcConnHeader(flag=FLAG_RESPONSE).SerializeToString())
_request_prefixes: dict[tuple[int, int], bytes] = {}
_response_prefixes: dict[tuple[int, int | None], bytes] = {}


def _request_prefix(service: int, protocol_ver: int) -> bytes:
    key = (service, protocol_ver)
    prefix = _request_prefixes.get(key)
    if prefix is None:
        header = rpc_pb.RequestHeader(serviceType=service, protocolVer=protocol_ver)
        prefix = _CONN_REQUEST + encode_delimited(header.SerializeToString())
        if len(_request_prefixes) < 64:  # bounded: callers could pass arbitrary values
            _request_prefixes[key] = prefix
    return prefix


def response_prefix(status: int, protocol_ver: int | None) -> bytes:
    key = (status, protocol_ver)
    prefix = _response_prefixes.get(key)
    if prefix is None:
        header = rpc_pb.ResponseHeader(status=status)  # type: ignore[arg-type]
        if protocol_ver is not None:
            header.protocolVer = protocol_ver
        prefix = _CONN_RESPONSE + encode_delimited(header.SerializeToString())
        if len(_response_prefixes) < 64:
            _response_prefixes[key] = prefix
    return prefix


for _service in Service:
    _request_prefix(_service, PROTOCOL_VERSION)
_SUCCESS_PREFIX = response_prefix(STATUS_SUCCESS, PROTOCOL_VERSION)
_SUCCESS_PREFIX_LEN = len(_SUCCESS_PREFIX)
SUCCESS_PREFIX = _SUCCESS_PREFIX
"""The headers of a SUCCESS answer as the Java peers write them (what :func:`decode_response` reads fast)."""


class RpcLoops(Protocol):
    """What gateway/tubemq/wire/_rpc.c holds, and its twin :class:`_Python`."""

    def frame_requests(
        self,
        serials: Sequence[int],
        prefix: bytes,
        body_head: bytes,
        requests: Sequence[Any],
        frame_one: Callable[[int, Any], bytes],
        /,
    ) -> list[bytes]:
        """The frame of each request: a ``bytes`` request with a serial within int32 is framed here
        (``prefix``, the body's length, ``body_head``, the request's length, the request), any other
        request by ``frame_one(serial, request)``."""

    def usual_answer(self, payload: bytes, prefix: bytes, /) -> bool:
        """Whether a reader may keep this answer's frame and decode it later, with its batch: only an
        answer :func:`decode_response` reads without error (the usual success envelope after ``prefix``)."""


class _Python:
    """The reference of the C loops."""

    @staticmethod
    def frame_requests(
        serials: Sequence[int],
        prefix: bytes,
        body_head: bytes,
        requests: Sequence[Any],
        frame_one: Callable[[int, Any], bytes],
        /,
    ) -> list[bytes]:
        return [
            _request_frame(serial, prefix, body_head, request)
            if type(request) is bytes and _INT32_MIN <= serial <= _INT32_MAX
            else frame_one(serial, request)
            for serial, request in zip(serials, requests, strict=True)
        ]

    @staticmethod
    def usual_answer(payload: bytes, prefix: bytes, /) -> bool:
        """Never: the Python reader decodes each answer as it arrives, which costs it no more than later."""
        return False


if TYPE_CHECKING:
    import gateway.tubemq.wire._rpc as _rpc

    _stub: RpcLoops = _rpc

_loops: RpcLoops = compiled_or("gateway.tubemq.wire._rpc", _Python())

usual_answer = _loops.usual_answer
"""``usual_answer(payload, SUCCESS_PREFIX)``: whether a reader may keep an answer's frame and decode it later
with its batch (:meth:`RpcLoops.usual_answer`; the usual success envelope on the compiled path, never on the
pure one)."""


# --- client side -----------------------------------------------------------------------------------


def encode_request(
    serial: int,
    method: int,
    request: Message | bytes,
    timeout_ms: int,
    service: int | None = None,
    *,
    protocol_ver: int = PROTOCOL_VERSION,
) -> bytes:
    """Return the whole request frame.

    ``service`` defaults to the method's service in :data:`METHODS`; a method id outside the table
    (e.g. to test a server's FATAL answer) needs an explicit ``service``. ``timeout_ms`` must be > 0:
    the Java server never answers a call whose timeout has passed. Raises ``ValueError`` for an
    unknown method without ``service``, a message of the wrong type, a missing required field or a
    non-positive timeout. A request given as ``bytes`` is an already serialized message of the method's
    request type (``producer.send_request.SendRequestTemplate``): framed as it is, without the type check.
    """
    spec = METHODS.get(method)
    if spec is not None:
        if type(request) is not spec.request_type and not isinstance(request, bytes):
            raise ValueError(
                f"method {method} ({spec.name}) takes {spec.request_type.__name__}, "
                f"not {type(request).__name__}"
            )
        if service is None:
            service = spec.service
    elif service is None:
        raise ValueError(f"method {method} is not served; pass service= to send it anyway")
    if timeout_ms <= 0:
        raise ValueError(f"timeout_ms must be > 0 (the server drops expired calls), got {timeout_ms}")
    prefix = _request_prefix(service, protocol_ver)
    head = _body_head(method, timeout_ms)
    inner = request if isinstance(request, bytes) else serialize(request)
    if (
        len(prefix) + len(head) + len(inner) + 6 <= BLOCK_SIZE  # + two varints: one block, surely
        and _INT32_MIN <= serial <= _INT32_MAX
    ):
        # one call, as encode_requests frames a batch (byte-identical to _request_frame's frame)
        (frame,) = _loops.frame_requests((serial,), prefix, head, (inner,), _one_block_only)
        return frame
    return _request_frame(serial, prefix, head, inner)


def _one_block_only(serial: int, request: bytes) -> bytes:
    """``frame_requests``' fallback for a frame it does not write itself, which ``encode_request`` never
    hands it (a request of one block, a serial within int32)."""
    raise AssertionError(f"request {serial} of {len(request)} bytes framed past the one-block path")


def encode_requests(
    serials: Sequence[int],
    method: int,
    requests: Sequence[Message | bytes],
    timeout_ms: int,
    service: int | None = None,
) -> list[bytes]:
    """The request frames of several calls of ``method`` sharing ``timeout_ms`` (``encode_request`` each).

    A request given as ``bytes`` is an already serialized message of the method's request type (e.g. from
    ``producer.send_request.SendRequestTemplate``); it is framed as it is, without the type check.
    """
    spec = METHODS.get(method)
    if spec is not None and service is None:
        service = spec.service
    if service is None or timeout_ms <= 0:
        raise ValueError(
            f"method {method} needs a service and a timeout > 0 ms, got {service} and {timeout_ms}"
        )
    prefix = _request_prefix(service, PROTOCOL_VERSION)
    head = _body_head(method, timeout_ms)

    def frame_one(serial: int, request: Message | bytes) -> bytes:
        if isinstance(request, bytes):
            return _request_frame(serial, prefix, head, request)
        return encode_request(serial, method, request, timeout_ms, service)

    # one call frames the usual requests (bytes) and hands any other to frame_one
    return _loops.frame_requests(serials, prefix, head, requests, frame_one)


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_body_heads: dict[tuple[int, int], bytes] = {}


def _body_head(method: int, timeout_ms: int) -> bytes:
    """``RequestBody`` up to its ``request`` field's tag: method (1), timeout (2), then field 3's tag."""
    key = (method, timeout_ms)
    head = _body_heads.get(key)
    if head is None:
        head = b"".join((b"\x08", int_varint(method), b"\x10", int_varint(timeout_ms), b"\x1a"))
        if len(_body_heads) < 256:  # bounded: timeouts follow the callers' deadlines
            _body_heads[key] = head
    return head


def _request_frame(serial: int, prefix: bytes, body_head: bytes, inner: bytes) -> bytes:
    inner_len = encode_varint(len(inner))
    body_len = encode_varint(len(body_head) + len(inner_len) + len(inner))
    return encode_frame_parts(serial, [prefix, body_len, body_head, inner_len, inner])


def decode_response(frame: Frame) -> RpcResponse | RpcFailure:
    """Decode an answer frame; raise ``ProtocolError`` when the envelope is unreadable."""
    payload = frame.payload
    try:
        if payload.startswith(_SUCCESS_PREFIX):
            # The usual answer: headers are the cached constant bytes, only the body needs parsing.
            # (one-byte lengths read inline: a send's answer is some 30 bytes)
            size = payload[_SUCCESS_PREFIX_LEN] if len(payload) > _SUCCESS_PREFIX_LEN else 0x80
            if size < 0x80:
                start = _SUCCESS_PREFIX_LEN + 1
            else:
                size, start = decode_varint(payload, _SUCCESS_PREFIX_LEN)
            if size > len(payload) - start:
                raise FrameError(
                    f"body announces {size} bytes at offset {start}, but only {len(payload) - start} remain"
                )
            end = start + size
            # RspResponseBody as Java writes it: method (one varint byte), data, nothing else. Read by
            # hand, this is one copy of the data and no protobuf message; any other layout is parsed.
            if (
                size >= 3
                and payload[start] == 0x08
                and payload[start + 1] < 0x80
                and payload[start + 2] == 0x12
            ):
                data_size = payload[start + 3] if size > 3 else 0x80
                if data_size < 0x80:
                    data_start = start + 4
                else:
                    data_size, data_start = decode_varint(payload, start + 3)
                if data_start + data_size == end:
                    return RpcResponse(frame.serial, payload[start + 1], payload[data_start:end])
            raw_body = payload[start:end]
            status = STATUS_SUCCESS
        else:
            raw_conn, raw_header, raw_body = decode_delimited(payload, 3)
            _parse(rpc_pb.RpcConnHeader, raw_conn)
            status = _parse(rpc_pb.ResponseHeader, raw_header).status
        if status == STATUS_SUCCESS:
            body = _parse(rpc_pb.RspResponseBody, raw_body)
            return RpcResponse(frame.serial, body.method, body.data)
        failure = _parse(rpc_pb.RspExceptionBody, raw_body)
        return RpcFailure(frame.serial, status, failure.exceptionName, failure.stackTrace)
    except (ValueError, FrameError) as exc:
        raise ProtocolError(f"unreadable answer envelope (serial {frame.serial}): {exc}") from exc


def parse_response(method: int, data: bytes) -> Message:
    """Parse ``RspResponseBody.data`` as ``method``'s response type; raise ``ProtocolError`` if unreadable."""
    spec = METHODS.get(method)
    if spec is None:
        raise ProtocolError(f"answer for method {method}, which has no response type")
    return parse_as(spec.response_type, data)


def parse_as(message_type: type[_MessageT], data: bytes) -> _MessageT:
    """Parse ``data`` as ``message_type`` (required fields checked); raise ``ProtocolError`` if unreadable."""
    try:
        return _parse(message_type, data)
    except ValueError as exc:
        raise ProtocolError(f"unreadable {message_type.__name__}: {exc}") from exc
