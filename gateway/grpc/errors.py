"""The one place where service errors become gRPC statuses (the gRPC twin of ``gateway/api/errors.py``).

::

    ServiceError kind        gRPC code             REST
    InvalidInput             INVALID_ARGUMENT      400   message "<field>: <message>"
    PayloadTooLarge          RESOURCE_EXHAUSTED    413   detail.limit
    NotFound                 NOT_FOUND             404
    Gone                     FAILED_PRECONDITION   410   an expired or deleted consumer instance
    Unavailable              UNAVAILABLE           503   detail.retry_after_seconds, trailer retry-after
    RateLimited              RESOURCE_EXHAUSTED    429   detail.retry_after_seconds, trailer retry-after,
                                                         and a google.rpc.RetryInfo in the status details
    UpstreamError            INTERNAL              502   detail.tubemq_error_code
    Unauthenticated          UNAUTHENTICATED       401   no, bad or expired credentials
    PermissionDenied         PERMISSION_DENIED     403   the message names principal, action and resource
    AdapterError             refusals of the gRPC adapter itself:
     ├── AuthError           UNAUTHENTICATED / PERMISSION_DENIED (raised by an auth hook)
     └── StreamSuperseded    ABORTED (a newer Subscribe took the consumer instance over)

Field names in errors are the proto3 JSON names (``messages[2].streamId``, ``maxMessages``), which are also
the REST names; :func:`renamed` maps the few the service layer spells after REST query parameters.

Every failed call carries an ``ErrorDetail`` (the REST error body's fields) packed into an ``ErrorStatus``
in the standard ``grpc-status-details-bin`` trailer; per-message failures of a publish carry the same
``ErrorDetail`` inside the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn

import grpc
from google.protobuf.any_pb2 import Any as AnyPb
from google.protobuf.duration_pb2 import Duration

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.errors import ErrorKind, PayloadTooLarge, RateLimited, ServiceError, Unavailable

CODE_BY_KIND: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.GONE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.UPSTREAM: grpc.StatusCode.INTERNAL,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
}

#: Response metadata: (key, value) pairs, values str (or bytes for keys ending in -bin).
Metadata = tuple[tuple[str, Any], ...]

DETAILS_TRAILER = "grpc-status-details-bin"
RETRY_AFTER_TRAILER = "retry-after"
#: The type URL standard gRPC clients look for: our RetryInfo is wire-compatible with google.rpc.RetryInfo.
RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo"


class AdapterError(Exception):
    """A refusal of the gRPC adapter itself (not of the service layer), with its own status code."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def detail(self) -> pb.ErrorDetail:
        return pb.ErrorDetail(code=self.code.name.lower(), message=self.message, grpc_code=_number(self.code))


class AuthError(AdapterError):
    """Raised by an auth hook to refuse a call: UNAUTHENTICATED (no or bad credentials) by default,
    PERMISSION_DENIED when ``denied`` (known caller, not allowed)."""

    def __init__(self, message: str, *, denied: bool = False) -> None:
        super().__init__(message)
        self.code = grpc.StatusCode.PERMISSION_DENIED if denied else grpc.StatusCode.UNAUTHENTICATED


class StreamSuperseded(AdapterError):
    """A newer Subscribe took over the consumer instance of this stream."""

    code = grpc.StatusCode.ABORTED


def code_of(exc: ServiceError | AdapterError) -> grpc.StatusCode:
    if isinstance(exc, AdapterError):
        return exc.code
    return CODE_BY_KIND.get(exc.kind, grpc.StatusCode.INTERNAL)


def _number(code: grpc.StatusCode) -> int:
    number: int = code.value[0]
    return number


def error_detail(exc: ServiceError) -> pb.ErrorDetail:
    """The REST error body of ``exc`` as a protobuf message (also used for per-message results)."""
    detail = pb.ErrorDetail(code=exc.kind.value, message=exc.message, grpc_code=_number(code_of(exc)))
    if exc.field is not None:
        detail.field = exc.field
    if exc.index is not None:
        detail.index = exc.index
    if exc.errno is not None:
        detail.tubemq_error_code = exc.errno
    if isinstance(exc, PayloadTooLarge):
        detail.limit = exc.limit
    if isinstance(exc, Unavailable | RateLimited):
        detail.retry_after_seconds = exc.retry_after
    return detail


def status_message(exc: ServiceError) -> str:
    """The status text: the REST message, prefixed by the field it blames, if any."""
    return f"{exc.field}: {exc.message}" if exc.field else exc.message


def trailers_for(code: grpc.StatusCode, message: str, detail: pb.ErrorDetail) -> Metadata:
    status = pb.ErrorStatus(code=_number(code), message=message)
    status.details.add().Pack(detail)
    retry = detail.HasField("retry_after_seconds")
    if retry:
        delay = Duration()
        delay.FromNanoseconds(max(0, round(detail.retry_after_seconds * 1e9)))
        info = pb.RetryInfo(retry_delay=delay).SerializeToString()
        status.details.append(AnyPb(type_url=RETRY_INFO_TYPE_URL, value=info))
    trailers: Metadata = ((DETAILS_TRAILER, status.SerializeToString()),)
    if retry:
        trailers += ((RETRY_AFTER_TRAILER, str(max(1, math.ceil(detail.retry_after_seconds)))),)
    return trailers


async def abort(
    context: grpc.aio.ServicerContext, exc: ServiceError | AdapterError, extra: Metadata = ()
) -> NoReturn:
    """End the call with the status of ``exc`` and ``extra`` trailers; raises grpc's AbortError."""
    if isinstance(exc, AdapterError):
        detail, message = exc.detail(), exc.message
    else:
        detail, message = error_detail(exc), status_message(exc)
    code = code_of(exc)
    await context.abort(code, message, trailers_for(code, message, detail) + extra)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


async def abort_internal(
    context: grpc.aio.ServicerContext, request_id: str, extra: Metadata = ()
) -> NoReturn:
    """End a call that failed on a bug with INTERNAL, naming the request id to look up in the logs."""
    message = f"internal error; the gateway logged it under request id {request_id}"
    detail = pb.ErrorDetail(code="internal", message=message, grpc_code=_number(grpc.StatusCode.INTERNAL))
    trailers = trailers_for(grpc.StatusCode.INTERNAL, message, detail) + extra
    await context.abort(grpc.StatusCode.INTERNAL, message, trailers)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


def retry_delay(status: pb.ErrorStatus) -> float | None:
    """Client side helper: the seconds of the status's google.rpc.RetryInfo detail, if it has one."""
    for detail in status.details:
        if detail.type_url == RETRY_INFO_TYPE_URL:
            info = pb.RetryInfo.FromString(detail.value)
            return float(info.retry_delay.ToNanoseconds()) / 1e9
    return None


def unpack_status(trailers: Any) -> tuple[pb.ErrorStatus, pb.ErrorDetail] | None:
    """Client side helper: the ErrorStatus and its ErrorDetail from a failed call's trailing metadata."""
    for key, value in trailers or ():
        if key == DETAILS_TRAILER:
            status = pb.ErrorStatus.FromString(value)
            detail = pb.ErrorDetail()
            if status.details and status.details[0].Unpack(detail):
                return status, detail
            return status, pb.ErrorDetail()
    return None


@contextmanager
def renamed(fields: Mapping[str, str]) -> Iterator[None]:
    """Rename the ``field`` of an InvalidInput raised inside, for the names gRPC spells differently."""
    try:
        yield
    except ServiceError as exc:
        if exc.field is not None and exc.field in fields:
            exc.field = fields[exc.field]
        raise
