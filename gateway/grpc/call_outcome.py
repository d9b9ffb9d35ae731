"""How a gRPC call that raised ends: its status code, its status, and the line that says why it was refused.

:func:`code_of` is the status code a call that raised ends with (the one the call's metrics and its
``GrpcCallFinished`` event name). :func:`answer` ends the call: a
:class:`~gateway.service.errors.ServiceError` or :class:`~gateway.grpc.errors.AdapterError` through
:func:`gateway.grpc.errors.abort`, any other exception (a bug) as INTERNAL naming the request id, logged with
its traceback.

Every refusal is logged (:func:`log_refusal`) as one structured line, ``gRPC call refused`` on the
``gateway.grpc`` logger: the method, the status code and ``reason`` (the ``ErrorInfo`` reason the client
gets), ``detail`` (the status message the client gets), the field, index, limit, retry delay and TubeMQ
error code when the refusal names them, the request id and the caller. A client sees only the status code
and its message (h2load, a load balancer's log, a metric), so the gateway's own log is where the cause of
any refused call can be looked up afterwards. The line is WARNING when the gateway refused what the client
may have sent correctly (RESOURCE_EXHAUSTED, UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED: load, limits, the
broker), INFO when the call itself was at fault (bad input, unknown resource, credentials). Consumer instance
ids, which are bearer-like, are redacted in ``detail`` as everywhere in the logs.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable

import grpc

from gateway.grpc import errors
from gateway.observability.request_id import REQUEST_ID_HEADER as HTTP_REQUEST_ID_HEADER
from gateway.service.errors import PayloadTooLarge, RateLimited, ServiceError, Unavailable
from gateway.service.instance_id import redact_text
from gateway.service.principal import current_principal
from gateway.service.publish import PublishOutcome

__all__ = ["REQUEST_ID_HEADER", "answer", "code_of", "forget_failures", "forget_frames", "log_refusal"]

log = logging.getLogger("gateway.grpc")

REQUEST_ID_HEADER = HTTP_REQUEST_ID_HEADER.lower()  # gRPC metadata keys are lower case

#: status codes of refusals a correct call can meet (load, limits, the broker): logged as warnings
_WARNED = frozenset(
    {
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)


def code_of(exc: BaseException, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status code a call that raised ``exc`` ends with."""
    if isinstance(exc, ServiceError | errors.AdapterError):
        return errors.code_of(exc)
    if isinstance(exc, grpc.aio.AbortError):
        aborted: grpc.StatusCode | None = context.code()
        return aborted if aborted is not None else grpc.StatusCode.UNKNOWN
    if isinstance(exc, Exception):
        return grpc.StatusCode.INTERNAL
    return grpc.StatusCode.CANCELLED  # CancelledError, GeneratorExit: the client went away


async def answer(exc: BaseException, context: grpc.aio.ServicerContext, request_id: str, method: str) -> None:
    """End the call with the status of our error, or INTERNAL for a bug (both raise grpc's AbortError);
    return for anything else (an abort already made, a cancellation), which the caller re-raises."""
    tag = ((REQUEST_ID_HEADER, request_id),)
    if isinstance(exc, ServiceError | errors.AdapterError):
        log_refusal(method, exc, request_id)
        forget_frames(exc)
        await errors.abort(context, exc, tag)
    if isinstance(exc, Exception) and not isinstance(exc, grpc.aio.AbortError):
        log.error("gRPC call %s failed", method, exc_info=exc, extra={"request_id": request_id})
        forget_frames(exc)
        await errors.abort_internal(context, request_id, tag)


def forget_frames(exc: BaseException) -> None:
    """Drop the variables of the finished frames ``exc`` went through, once it is logged or answered: grpc.aio
    keeps the exception that ended a call (its ``AbortError``'s context) for as long as it keeps the call's
    state, and an exception is often in a reference cycle with its frames (freed only when the cyclic
    collector runs); those frames hold what the call was given (a publish's messages and their encoded
    copies: up to ``grpc.max_message_bytes`` each)."""
    traceback.clear_frames(exc.__traceback__)


def forget_failures(outcomes: Iterable[PublishOutcome]) -> None:
    """:func:`forget_frames` of each failed outcome's error (a message refused by the service: too large,
    ...), once the outcomes are answered."""
    for outcome in outcomes:
        if outcome.error is not None:
            forget_frames(outcome.error)


def log_refusal(method: str, exc: ServiceError | errors.AdapterError, request_id: str) -> None:
    """The ``gRPC call refused`` line of a call ended by ``exc`` (see the module docstring)."""
    code = errors.code_of(exc)
    level = logging.WARNING if code in _WARNED else logging.INFO
    if not log.isEnabledFor(level):
        return
    extra: dict[str, object] = {
        "method": method,
        "grpc_code": code.name,
        "reason": errors.reason_of(exc),
        "detail": redact_text(errors.status_message(exc)),
        "request_id": request_id,
    }
    principal = current_principal()
    if not principal.anonymous:
        extra["principal"] = principal.label
    if isinstance(exc, ServiceError):
        if exc.field is not None:
            extra["field"] = redact_text(exc.field)
        if exc.index is not None:
            extra["index"] = exc.index
        if exc.errno is not None:
            extra["tubemq_error_code"] = exc.errno
        if isinstance(exc, PayloadTooLarge):
            extra["limit"] = exc.limit
        if isinstance(exc, Unavailable | RateLimited) and exc.retry_after is not None:
            extra["retry_after_seconds"] = exc.retry_after
    log.log(level, "gRPC call refused", extra=extra)
