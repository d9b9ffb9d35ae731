"""What one gRPC call holds of the process's budgets, and the request deserializers that count it.

The interceptor (``gateway/grpc/interceptors.py``) makes a :class:`CallState` for every call when grpc asks it
for the method's handler, before any request message is received, and keeps it in :data:`CALL` (grpc.aio runs
the interceptor, the deserializer and the handler of a call in one task; a PublishStream's reader task is
started from it and sees the same object). The state says who the caller is (or why it is refused) and which
publish bytes it holds of the process's :class:`~gateway.service.admission.Admission`.

Request deserializers are wrapped:

* :func:`budgeted` (Publish, PublishStream): each message's raw bytes are reserved in the process's in-flight
  publish bytes (``limits.max_inflight_publish_bytes``, shared with HTTP) before it is parsed; a message that
  does not fit is not parsed and becomes :data:`OVER_BUDGET`, which the call answers UNAVAILABLE;
* :func:`bounded` (every other method): a message above ``limits.max_control_body_bytes`` (the bound of the
  same requests over HTTP) is not parsed and becomes a :class:`TooLarge`, answered RESOURCE_EXHAUSTED.

A message the protobuf reader refuses (``DecodeError``) becomes a :class:`Malformed`, answered
INVALID_ARGUMENT by the handler like any other bad input (logged, counted, with the request id), and a
publish message's bytes are given back at once. Raised out of a deserializer, the error would reach grpc
itself, which answers UNKNOWN ("Unexpected <class ...>") without running the handler: the call was then
neither logged nor counted, and the bytes it had reserved were never given back (the handler's end is what
gives them back), so a few malformed messages could hold the whole ``limits.max_inflight_publish_bytes``
and have every later publish, HTTP and gRPC, refused.

A unary Publish holds its bytes until the call ends; a PublishStream message until its batch is acknowledged
(:func:`claim_message_bytes`); whatever a call still holds when it ends is given back then.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from gateway.service.admission import Admission
from gateway.service.errors import InvalidInput, PayloadTooLarge, ServiceError, Unavailable
from gateway.service.principal import Principal

__all__ = [
    "CALL",
    "OVER_BUDGET",
    "CallState",
    "Malformed",
    "TooLarge",
    "bounded",
    "budgeted",
    "checked",
    "claim_message_bytes",
]


class CallState:
    """One call: ``principal`` when the metadata authenticated it, ``error`` when it is refused, the publish
    bytes it holds (``reserved``; ``unclaimed``: of those, not yet handed to a stream batch)."""

    __slots__ = ("admission", "closed", "error", "metadata", "principal", "reserved", "unclaimed")

    def __init__(self, admission: Admission, metadata: Any = None) -> None:
        self.admission = admission
        #: the call's request headers as grpc handed them to the interceptor (read once per call: each
        #: ``context.invocation_metadata()`` builds them again)
        self.metadata = metadata
        self.principal: Principal | None = None
        self.error: ServiceError | None = None
        self.reserved = 0
        self.unclaimed = 0
        self.closed = False

    def release(self, size: int) -> None:
        if not self.closed and size:
            self.reserved -= size
            self.admission.release(size)

    def close(self) -> None:
        """The call ended: give back everything it still holds."""
        if not self.closed:
            self.admission.release(self.reserved)
            self.reserved = self.unclaimed = 0
            self.closed = True


CALL: contextvars.ContextVar[CallState | None] = contextvars.ContextVar("gateway_grpc_call", default=None)


class _OverBudget:
    __slots__ = ()


#: a publish message that did not fit into the in-flight bytes (never parsed)
OVER_BUDGET: Any = _OverBudget()


class TooLarge:
    """A request message above its method's bound (never parsed)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class Malformed:
    """A request message the protobuf reader refused (``error``: its ``DecodeError``)."""

    __slots__ = ("error",)

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def budgeted(deserialize: Callable[[bytes], Any], limit: Callable[[], int]) -> Callable[[bytes], Any]:
    """``deserialize``, reserving each message's bytes in the call's admission first (``limit()``: the
    process's bound on publish bytes held, 0 = none); a message it cannot read gives them back at once."""

    def read(raw: bytes) -> Any:
        call = CALL.get()
        if call is None:
            return _parsed(deserialize, raw)
        size = len(raw)
        if not call.admission.reserve(size, limit()):
            return OVER_BUDGET
        call.reserved += size
        call.unclaimed += size
        try:
            return deserialize(raw)
        except BaseException as exc:
            call.unclaimed -= size
            call.release(size)
            if isinstance(exc, DecodeError):
                return Malformed(exc)
            raise

    return read


def bounded(deserialize: Callable[[bytes], Any], limit: Callable[[], int]) -> Callable[[bytes], Any]:
    """``deserialize`` for messages of at most ``limit()`` bytes."""

    def read(raw: bytes) -> Any:
        if len(raw) > limit():
            return TooLarge(len(raw))
        return _parsed(deserialize, raw)

    return read


def _parsed(deserialize: Callable[[bytes], Any], raw: bytes) -> Any:
    try:
        return deserialize(raw)
    except DecodeError as exc:
        return Malformed(exc)


def checked(request: Any, limits: Callable[[], tuple[int, int]]) -> Any:
    """``request``, or the error for a message the deserializer refused (``limits()``: the in-flight publish
    bytes bound and the bound of other messages, for the messages)."""
    if request is OVER_BUDGET:
        cap = limits()[0]
        raise Unavailable(
            f"this gateway holds its maximum of {cap} bytes of publish requests; retry shortly or through "
            "another replica",
            retry_after=1.0,
        )
    kind = type(request)
    if kind is TooLarge:
        cap = limits()[1]
        raise PayloadTooLarge(
            f"request message of {request.size} bytes is above this method's limit of {cap} bytes "
            "(limits.max_control_body_bytes); only publish messages may be larger",
            limit=cap,
        )
    if kind is Malformed:
        raise InvalidInput(
            f"the request message is not valid protobuf for this method ({request.error}); send the "
            "method's request message as the .proto files in proto/ define it",
            field="request",
        )
    return request


def claim_message_bytes() -> Callable[[], None]:
    """The bytes read since the last claim (a stream's request just read), and a function giving them back
    (call it when that request is acknowledged)."""
    call = CALL.get()
    if call is None or not call.unclaimed:
        return _nothing
    size, call.unclaimed = call.unclaimed, 0
    return lambda: call.release(size)


def _nothing() -> None:
    return None
