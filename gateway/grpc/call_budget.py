"""What one gRPC call holds of the process's budgets, and the request deserializers that count it.

The interceptor (``gateway/grpc/interceptors.py``) makes a :class:`CallState` for every call when grpc asks it
for the method's handler, before any request message is received, and keeps it in :data:`CALL` (grpc.aio runs
the interceptor, the deserializer and the handler of a call in one task; a PublishStream's reader task is
started from it and sees the same object). The state says who the caller is (or why it is refused) and which
publish bytes it holds of the process's :class:`~gateway.service.admission.Admission`.

Request deserializers are wrapped:

* :func:`budgeted` (Publish, PublishStream): each message's raw bytes are held in the process's in-flight
  publish bytes (``limits.max_inflight_publish_bytes``, shared with HTTP) before it is parsed: out of the room
  the call took before the message was received (:attr:`CallState.room`, see ``gateway/grpc/read_room.py``;
  what the message does not need is given back at once), else reserved then; a message that does not fit is
  not parsed and becomes :data:`OVER_BUDGET`, which the call answers UNAVAILABLE;
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

from gateway.grpc.inflate import inflate
from gateway.grpc.read_room import ReadRoom
from gateway.service.admission import Admission
from gateway.service.errors import InvalidInput, PayloadTooLarge, ServiceError, Unavailable
from gateway.service.principal import Principal

__all__ = [
    "CALL",
    "OVER_BUDGET",
    "CallState",
    "Malformed",
    "Refused",
    "TooLarge",
    "bounded",
    "budgeted",
    "checked",
    "claim_message_bytes",
]


class CallState:
    """One call: ``principal`` when the metadata authenticated it, ``error`` when it is refused, the publish
    bytes it holds (``reserved``; ``unclaimed``: of those, not yet handed to a stream batch; ``room``: taken
    for the message being received, not yet its own)."""

    __slots__ = (
        "admission",
        "caller",
        "closed",
        "error",
        "metadata",
        "principal",
        "reads",
        "reserved",
        "room",
        "unclaimed",
    )

    def __init__(self, admission: Admission, metadata: Any = None) -> None:
        self.admission = admission
        #: the call's request headers as grpc handed them to the interceptor (read once per call: each
        #: ``context.invocation_metadata()`` builds them again)
        self.metadata = metadata
        self.principal: Principal | None = None
        self.error: ServiceError | None = None
        self.reserved = 0
        self.unclaimed = 0
        self.room = 0
        #: where ``room`` was taken (and goes back to), and for which caller
        self.reads: ReadRoom | None = None
        self.caller = ""
        self.closed = False

    def release(self, size: int) -> None:
        if not self.closed and size:
            self.reserved -= size
            self.admission.release(size)

    def keep_room(self, size: int) -> int:
        """The read is over and its message weighs ``size`` bytes: keep as much of the room taken for it
        (all of it when it fits), give the rest back; the bytes kept."""
        room, self.room = self.room, 0
        if not room or self.reads is None:
            return 0
        kept = size if size <= room else 0
        self.reads.give_back(room, kept, self.caller)
        return kept

    def give_back_room(self) -> None:
        """Give back the room taken for a message that the read did not use (none came, or it failed)."""
        self.keep_room(0)

    def close(self) -> None:
        """The call ended: give back everything it still holds."""
        if not self.closed:
            self.give_back_room()
            self.admission.release(self.reserved)
            self.reserved = self.unclaimed = 0
            self.closed = True


CALL: contextvars.ContextVar[CallState | None] = contextvars.ContextVar("gateway_grpc_call", default=None)


class _OverBudget:
    __slots__ = ()


#: a publish message that did not fit into the in-flight bytes (never parsed)
OVER_BUDGET: Any = _OverBudget()


class TooLarge:
    """A request message above its method's bound (never parsed): ``size`` bytes (None: it inflates past
    the bound, which ``setting`` names)."""

    __slots__ = ("limit", "setting", "size")

    def __init__(self, size: int | None, limit: int, setting: str) -> None:
        self.size = size
        self.limit = limit
        self.setting = setting

    def error(self) -> PayloadTooLarge:
        what = f"of {self.size} bytes" if self.size is not None else "inflating to more bytes"
        advice = (
            "send a larger batch as several PublishStream messages, a larger value over REST"
            if self.setting == _PUBLISH_BOUND
            else "only publish messages may be larger"
        )
        return PayloadTooLarge(
            f"request message {what} is above this method's limit of {self.limit} bytes ({self.setting}); "
            f"{advice}",
            limit=self.limit,
        )


_PUBLISH_BOUND = "grpc.max_message_bytes"
_CONTROL_BOUND = "limits.max_control_body_bytes"


class Refused:
    """A request message refused before it was inflated (``error``: why)."""

    __slots__ = ("error",)

    def __init__(self, error: ServiceError) -> None:
        self.error = error


class Malformed:
    """A request message the protobuf reader refused (``error``: its ``DecodeError``)."""

    __slots__ = ("error",)

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def budgeted(
    deserialize: Callable[[bytes], Any],
    limit: Callable[[], int],
    bound: Callable[[], int],
    screen: Callable[[bytes], ServiceError | None] | None = None,
) -> Callable[[bytes], Any]:
    """``deserialize`` for publish messages of at most ``bound()`` bytes once inflated
    (gateway/grpc/inflate.py), holding each message's bytes in the call's admission first, out of the room
    the call took for it or else reserved (``limit()``: the process's bound on publish bytes held, 0 = none);
    a message it cannot read gives them back at once. ``screen(raw)``, when given, may refuse a message
    before it is inflated."""

    def read(raw: bytes) -> Any:
        call = CALL.get()
        if screen is not None:
            refusal = screen(raw)
            if refusal is not None:
                if call is not None:
                    call.give_back_room()
                return Refused(refusal)
        most = bound()
        message = inflate(raw, most)
        del raw
        if message is None:
            if call is not None:
                call.give_back_room()
            return TooLarge(None, most, _PUBLISH_BOUND)
        if call is None:
            return _parsed(deserialize, message)
        size = len(message)
        if call.keep_room(size) < size and size and not call.admission.reserve(size, limit()):
            return OVER_BUDGET
        call.reserved += size
        call.unclaimed += size
        try:
            return deserialize(message)
        except BaseException as exc:
            call.unclaimed -= size
            call.release(size)
            if isinstance(exc, DecodeError):
                return Malformed(exc)
            raise

    return read


def bounded(deserialize: Callable[[bytes], Any], limit: Callable[[], int]) -> Callable[[bytes], Any]:
    """``deserialize`` for messages of at most ``limit()`` bytes once inflated (gateway/grpc/inflate.py)."""

    def read(raw: bytes) -> Any:
        most = limit()
        if len(raw) > most:
            return TooLarge(len(raw), most, _CONTROL_BOUND)
        message = inflate(raw, most)
        if message is None:
            return TooLarge(None, most, _CONTROL_BOUND)
        return _parsed(deserialize, message)

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
        raise request.error()
    if kind is Refused:
        raise request.error
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
