"""Room in the process's in-flight publish bytes for a publish message about to be read.

grpc.aio has the C core receive a request message only when the handler asks for it, and the size of what it
will hand over is known only then; its bound is the server's ``grpc.max_receive_message_length`` (and, for a
compressed message, the same bound on what it inflates to, gateway/grpc/inflate.py). So before a Publish or
PublishStream message is read, the call takes that bound, or ``limits.max_inflight_publish_bytes`` when it is
smaller, out of the :class:`~gateway.service.admission.Admission` the REST bodies count into; the request
deserializer (:func:`gateway.grpc.call_budget.budgeted`) keeps the message's own size of it and gives the
rest back at once.

A read the budget has no room for waits its turn (first come, first served) while other reads hold room
(they give most of it back as soon as their message is in), for at most ``limits.body_timeout`` seconds; when
the messages and bodies already held leave no room, a Publish is refused at once, as an HTTP body would be,
while a PublishStream waits all the same (its own messages being published are among those held: their acks
give the room back). Either way a call that gets no room is answered UNAVAILABLE without its message ever
being received: a message costs memory only
once its bound fits into the budget, whoever sends it and however small it is on the wire.
"""

from __future__ import annotations

import asyncio
from collections import deque

from gateway.service.admission import Admission
from gateway.service.errors import Unavailable

__all__ = ["ReadRoom"]


class _Waiter:
    __slots__ = ("future", "limit", "size")

    def __init__(self, size: int, limit: int, future: asyncio.Future[None]) -> None:
        self.size = size
        self.limit = limit
        self.future = future


class ReadRoom:
    """Reservations of room for messages about to be read, in ``admission``'s publish bytes."""

    __slots__ = ("_admission", "_taken", "_waiting")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._waiting: deque[_Waiter] = deque()
        #: the room held by reads in progress (part of the admission's in-flight bytes)
        self._taken = 0
        admission.watch_releases(self._wake)

    def __repr__(self) -> str:
        return f"<ReadRoom taken={self._taken} waiting={len(self._waiting)} {self._admission!r}>"

    @property
    def waiting(self) -> int:
        """Reads waiting for room."""
        return len(self._waiting)

    async def take(self, size: int, limit: int, patience: float, *, queue: bool = False) -> None:
        """Reserve ``size`` bytes (``limit``: the budget's bound, 0 = none), waiting up to ``patience``
        seconds behind the reads that asked first. Raises :class:`Unavailable` when no room came in time, or
        (unless ``queue``) at once when what is held besides the room of reads in progress leaves none. The
        read gives the room back with :meth:`give_back`."""
        admission = self._admission
        if not self._waiting and admission.reserve(size, limit):
            self._taken += size
            return
        if not queue and limit and admission.inflight_bytes - self._taken + size > limit:
            raise self._full(limit, "")
        waiter = _Waiter(size, limit, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        granted = False
        try:
            async with asyncio.timeout(patience):
                await waiter.future
            granted = True
        except TimeoutError:
            raise self._full(
                limit, f" and no room came within {patience:g} s (limits.body_timeout)"
            ) from None
        finally:
            if not granted:
                self._give_up(waiter)

    def give_back(self, room: int, kept: int) -> None:
        """A read that took ``room`` is over: ``kept`` bytes of it stay held (its message's), the rest is
        given back."""
        self._taken -= room
        if room > kept:
            self._admission.release(room - kept)

    @staticmethod
    def _full(limit: int, why: str) -> Unavailable:
        return Unavailable(
            f"this gateway holds its maximum of {limit} bytes of publish requests{why}: it cannot receive "
            "this call's message now; retry shortly or through another replica",
            retry_after=1.0,
        )

    def _give_up(self, waiter: _Waiter) -> None:
        future = waiter.future
        if future.done() and not future.cancelled():
            self.give_back(waiter.size, 0)  # granted just as the wait ended
            return
        future.cancel()
        try:
            self._waiting.remove(waiter)
        except ValueError:
            return
        self._wake()  # a read behind it may fit where it did not

    def _wake(self) -> None:
        """Hand the room given back to the reads waiting, in their order."""
        waiting = self._waiting
        while waiting:
            waiter = waiting[0]
            if waiter.future.done():
                waiting.popleft()
                continue
            if not self._admission.reserve(waiter.size, waiter.limit):
                return
            self._taken += waiter.size
            waiting.popleft()
            waiter.future.set_result(None)
