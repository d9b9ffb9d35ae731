"""The one place where service errors become gRPC statuses (the gRPC twin of ``gateway/api/errors.py``).

::

    ServiceError kind        gRPC code             REST
    InvalidInput             INVALID_ARGUMENT      400   message "<field>: <message>", BadRequest
    PayloadTooLarge          RESOURCE_EXHAUSTED    413   metadata limit, BadRequest when a field is named
    NotFound                 NOT_FOUND             404   ResourceInfo when the resource is known
    Gone                     FAILED_PRECONDITION   410   an expired or deleted consumer instance
    Conflict                 ABORTED               409   RetryInfo, metadata retryAfterSeconds, trailer
                                                         retry-after (one seek at a time per instance)
    AlreadyDefined           ALREADY_EXISTS        409   a name taken, a push subscription of the file
    KeyReused                FAILED_PRECONDITION   422   an idempotency key sent with another request
    Unavailable              UNAVAILABLE           503   RetryInfo, metadata retryAfterSeconds, trailer
                                                         retry-after
    RateLimited              RESOURCE_EXHAUSTED    429   RetryInfo, QuotaFailure, metadata retryAfterSeconds,
                                                         trailer retry-after
    UpstreamError            INTERNAL              502   metadata tubemqErrorCode
    Unauthenticated          UNAUTHENTICATED       401   no, bad or expired credentials
    PermissionDenied         PERMISSION_DENIED     403   the message names principal, action and resource
    AdapterError             refusals of the gRPC adapter itself:
     ├── AuthError           UNAUTHENTICATED / PERMISSION_DENIED (raised by an auth hook)
     └── StreamSuperseded    ABORTED (a newer Subscribe took the consumer instance over)

Every failed call ends with a ``google.rpc.Status`` (same code and message as the call) in the standard
``grpc-status-details-bin`` trailer, built with grpcio-status, whose details are the standard
``google.rpc`` error details:

* ``ErrorInfo`` always, first: ``reason`` is the REST error ``code`` in upper case (``invalid_argument`` ->
  ``INVALID_ARGUMENT``, ``rate_limited`` -> ``RATE_LIMITED``; adapter refusals ``ABORTED``, ``INTERNAL``...),
  ``domain`` is :data:`DOMAIN`, and ``metadata`` holds the REST error body's other fields as strings
  (``field``, ``index``, ``limit``, ``retryAfterSeconds``, ``tubemqErrorCode``, ``action``, ``resource``);
* ``BadRequest`` with one field violation when a request field is invalid (INVALID_ARGUMENT, or a message
  above the size limit);
* ``RetryInfo`` when retrying later can succeed (UNAVAILABLE, RATE_LIMITED, ABORTED by a conflict), with the
  delay REST sends as ``Retry-After``; RATE_LIMITED also a ``QuotaFailure`` naming the quota;
* ``ResourceInfo`` when a NOT_FOUND / gone error names the missing resource: its type (``topic``,
  ``partition``, ``consumer instance``) and, when known, its name (the topic, partition key or instance id).

A message of a publish that failed alone carries the same ``google.rpc.Status`` in its result.
Field names in errors are the proto3 JSON names (``messages[2].streamId``, ``maxMessages``), which are also
the REST names; the consumer RPCs map the service's parameter names (``max_messages``, ``timeout``...) to
theirs with :func:`gateway.service.errors.renamed_fields`.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from gateway.service.errors import (
    ErrorKind,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ServiceError,
)

CODE_BY_KIND: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.GONE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.CONFLICT: grpc.StatusCode.ABORTED,
    ErrorKind.ALREADY_DEFINED: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.UNPROCESSABLE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.UPSTREAM: grpc.StatusCode.INTERNAL,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
}

#: ``google.rpc.ErrorInfo.domain`` of every error the gateway raises.
DOMAIN = "tubemq-gateway"

#: Response metadata: (key, value) pairs, values str (or bytes for keys ending in -bin).
Metadata = tuple[tuple[str, Any], ...]

DETAILS_TRAILER = "grpc-status-details-bin"
RETRY_AFTER_TRAILER = "retry-after"

#: The resource a NOT_FOUND error's field names (google.rpc.ResourceInfo.resource_type).
_RESOURCE_TYPES = {
    "topic": "topic",
    "topics": "topic",
    "instanceId": "consumer instance",
    "partitionKey": "partition",
    "service": "grpc service",  # a health Check of a service the server does not have
}


class AdapterError(Exception):
    """A refusal of the gRPC adapter itself (not of the service layer), with its own status code."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


def reason_of(exc: ServiceError | AdapterError) -> str:
    """``ErrorInfo.reason``: the REST error code in upper case (the status code's name for the adapter's)."""
    if isinstance(exc, AdapterError):
        return str(exc.code.name)
    return exc.kind.value.upper()


def status_message(exc: ServiceError | AdapterError) -> str:
    """The status text: the REST message, prefixed by the field it blames, if any."""
    if isinstance(exc, AdapterError):
        return exc.message
    return f"{exc.field}: {exc.message}" if exc.field else exc.message


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _pack(status: status_pb2.Status, detail: Message) -> None:
    status.details.add().Pack(detail)


def error_status(exc: ServiceError | AdapterError) -> status_pb2.Status:
    """``exc`` as a ``google.rpc.Status`` with the standard error details (see the module docstring)."""
    code = code_of(exc)
    status = status_pb2.Status(code=_number(code), message=status_message(exc))
    info = error_details_pb2.ErrorInfo(reason=reason_of(exc), domain=DOMAIN)
    if isinstance(exc, AdapterError):
        _pack(status, info)
        return status
    meta = info.metadata
    if exc.field is not None:
        meta["field"] = exc.field
    if exc.index is not None:
        meta["index"] = str(exc.index)
    if exc.errno is not None:
        meta["tubemqErrorCode"] = str(exc.errno)
    if isinstance(exc, PayloadTooLarge):
        meta["limit"] = str(exc.limit)
    if isinstance(exc, PermissionDenied):
        meta["action"], meta["resource"] = exc.action, exc.resource
    retry_after = exc.retry_after
    if retry_after is not None:
        meta["retryAfterSeconds"] = _seconds(retry_after)
    _pack(status, info)
    if exc.field is not None and exc.kind in (ErrorKind.INVALID, ErrorKind.TOO_LARGE):
        violation = error_details_pb2.BadRequest.FieldViolation(field=exc.field, description=exc.message)
        _pack(status, error_details_pb2.BadRequest(field_violations=[violation]))
    if retry_after is not None:
        delay = Duration()
        delay.FromNanoseconds(max(0, round(retry_after * 1e9)))
        _pack(status, error_details_pb2.RetryInfo(retry_delay=delay))
    if isinstance(exc, RateLimited):
        quota = error_details_pb2.QuotaFailure.Violation(subject=exc.quota.name, description=exc.message)
        _pack(status, error_details_pb2.QuotaFailure(violations=[quota]))
    resource = _resource_info(exc)
    if resource is not None:
        _pack(status, resource)
    return status


def _resource_info(exc: ServiceError) -> error_details_pb2.ResourceInfo | None:
    """What a NOT_FOUND or gone error says is missing: the kind of resource (from the field it names; a gone
    thing is a consumer instance) and, when the service layer knows it, its name."""
    if exc.kind is ErrorKind.GONE:
        resource_type: str | None = "consumer instance"
    elif exc.kind is ErrorKind.NOT_FOUND:
        resource_type = _RESOURCE_TYPES.get(exc.field or "")
    else:
        return None
    if resource_type is None:
        return None
    return error_details_pb2.ResourceInfo(
        resource_type=resource_type, resource_name=exc.resource_name or "", description=exc.message
    )


def _retry_after(status: status_pb2.Status) -> float | None:
    for detail in status.details:
        if detail.TypeName() == "google.rpc.RetryInfo":
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.ToNanoseconds() / 1e9
    return None


def trailers_for(status: status_pb2.Status) -> Metadata:
    """The trailers of a call ending with ``status``: ``grpc-status-details-bin`` (grpcio-status's
    encoding) and, when it says when to retry, ``retry-after`` in whole seconds (REST's Retry-After)."""
    trailers: Metadata = tuple(rpc_status.to_status(status).trailing_metadata)
    retry_after = _retry_after(status)
    if retry_after is not None:
        trailers += ((RETRY_AFTER_TRAILER, str(max(1, math.ceil(retry_after)))),)
    return trailers


async def _abort(context: grpc.aio.ServicerContext, status: status_pb2.Status, extra: Metadata) -> NoReturn:
    code = rpc_status.to_status(status).code
    await context.abort(code, status.message, trailers_for(status) + extra)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


async def abort(
    context: grpc.aio.ServicerContext, exc: ServiceError | AdapterError, extra: Metadata = ()
) -> NoReturn:
    """End the call with the status of ``exc`` and ``extra`` trailers; raises grpc's AbortError."""
    await _abort(context, error_status(exc), extra)


async def abort_internal(
    context: grpc.aio.ServicerContext, request_id: str, extra: Metadata = ()
) -> NoReturn:
    """End a call that failed on a bug with INTERNAL, naming the request id to look up in the logs."""
    message = f"internal error; the gateway logged it under request id {request_id}"
    await _abort(context, error_status(AdapterError(message)), extra)
