"""How the requests of a link end: :class:`Outcome` and :class:`RequestCompleted` (the event), and the
answers of a ``Connection.request_many`` batch: :class:`BatchWait` (the slots the reader files them in)
and :data:`AnswersDecoder` (what reads them all at once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import (
    ConnectionClosed,
    ProtocolError,
    RemoteException,
    RequestTimeout,
    TubeMQError,
)
from gateway.tubemq.events import Event

__all__ = ["AnswersDecoder", "BatchWait", "Outcome", "RequestCompleted", "outcome_of"]

AnswersDecoder = Callable[[Sequence[object], int], Sequence[object | None]]
"""Reads the answers of a ``request_many`` batch at once: given what the reader filed for each request and
the method, a value per answer it read, None for one to parse the general way."""


class Outcome(Enum):
    """How a request ended, for ``RequestCompleted``."""

    OK = "ok"
    REMOTE_EXCEPTION = "remote_exception"
    TIMEOUT = "timeout"
    CLOSED = "closed"
    PROTOCOL_ERROR = "protocol_error"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RequestCompleted(Event):
    """``count`` requests (one, or those of a batch that ended alike) ended after ``seconds``."""

    address: NodeAddress
    method: int
    outcome: Outcome
    seconds: float
    count: int = 1


class BatchWait:
    """The answers of one ``request_many`` call by the serial numbers of its requests (``slots``: None until
    one comes), how many are still unanswered, and the future their caller awaits."""

    __slots__ = ("_first", "_positions", "left", "slots", "waiter")

    def __init__(self, serials: Sequence[int], waiter: asyncio.Future[None]) -> None:
        self.left = len(serials)
        self.slots: list[object] = [None] * self.left
        self.waiter = waiter
        # Serials in a row (a range: no wrap-around inside the batch) place an answer by subtraction.
        self._first = serials[0] if isinstance(serials, range) else None
        self._positions = None if isinstance(serials, range) else {s: i for i, s in enumerate(serials)}

    def slot_of(self, serial: int) -> int:
        """The slot of the request with this serial number (one of the batch's)."""
        if self._positions is None:
            assert self._first is not None
            return serial - self._first
        return self._positions[serial]

    def answered(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.wake()

    def wake(self) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)


def outcome_of(result: object) -> Outcome:
    if not isinstance(result, TubeMQError):
        return Outcome.OK
    if isinstance(result, RemoteException):
        return Outcome.REMOTE_EXCEPTION
    if isinstance(result, ConnectionClosed):
        return Outcome.CLOSED
    if isinstance(result, ProtocolError):
        return Outcome.PROTOCOL_ERROR
    if isinstance(result, RequestTimeout):
        return Outcome.TIMEOUT
    return Outcome.OK
