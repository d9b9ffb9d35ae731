"""Room in the process's in-flight publish bytes for a publish message about to be read.

grpc.aio has the C core receive a request message only when the handler asks for it, and the size of what it
will hand over is known only then; its bound is the server's ``grpc.max_receive_message_length`` (and, for a
compressed message, the same bound on what it inflates to, gateway/grpc/inflate.py). So before a Publish or
PublishStream message is read, the call takes that bound, or ``limits.max_inflight_publish_bytes`` when it is
smaller, out of the :class:`~gateway.service.admission.Admission` the REST bodies count into; the request
deserializer (:func:`gateway.grpc.call_budget.budgeted`) keeps the message's own size of it and gives the
rest back at once.

A read the budget has no room for waits its turn (first come, first served among one caller's reads, the
callers in turn) while other reads hold room (they give most of it back as soon as their message is in), for
at most ``limits.body_timeout`` seconds;
so does a read of a caller that already holds its share of the room (a quarter of the same fraction of the
budget as its share of the calls in progress, :func:`~gateway.service.admission.caller_bytes`: a message
being received costs about four times its size, gateway/grpc/call_admission.py; always room for one read),
without holding up the reads of other callers behind it: one caller opening many calls and sending their
messages slowly holds at most its share of the room, and the others keep reading. When
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
    __slots__ = ("caller", "future", "limit", "share", "size")

    def __init__(self, size: int, limit: int, caller: str, share: int, future: asyncio.Future[None]) -> None:
        self.size = size
        self.limit = limit
        self.caller = caller
        self.share = share
        self.future = future


class ReadRoom:
    """Reservations of room for messages about to be read, in ``admission``'s publish bytes."""

    __slots__ = ("_admission", "_by_caller", "_taken", "_waiting")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        #: each caller's reads waiting for room, in the order they asked; the callers in turn (a caller that
        #: was granted a read and still waits goes last), so that handing out room looks at each caller's
        #: first read, never at the many waiting behind one that holds its share
        self._waiting: dict[str, deque[_Waiter]] = {}
        #: the room held by reads in progress (part of the admission's in-flight bytes)
        self._taken = 0
        #: of it, what each caller's reads hold
        self._by_caller: dict[str, int] = {}
        admission.watch_releases(self._wake)

    def __repr__(self) -> str:
        return (
            f"<ReadRoom taken={self._taken} callers={len(self._by_caller)} waiting={len(self._waiting)} "
            f"{self._admission!r}>"
        )

    @property
    def waiting(self) -> int:
        """Reads waiting for room."""
        return sum(len(queue) for queue in self._waiting.values())

    def held_by(self, caller: str) -> int:
        """The room ``caller``'s reads hold."""
        return self._by_caller.get(caller, 0)

    async def take(
        self, size: int, limit: int, patience: float, *, queue: bool = False, caller: str = "", share: int = 0
    ) -> None:
        """Reserve ``size`` bytes for a read of ``caller`` (``limit``: the budget's bound, 0 = none;
        ``share``: the room one caller's reads may hold at once, 0 = no bound; a caller holding none may
        always take one read's), waiting up to ``patience`` seconds behind the reads that asked first.
        Raises :class:`Unavailable` when no room came in time, or (unless ``queue``) at once when what is
        held besides the room of reads in progress leaves none. The read gives the room back with
        :meth:`give_back`."""
        admission = self._admission
        if not self._waiting and self._fits(caller, size, share) and admission.reserve(size, limit):
            self._grant(caller, size)
            return
        if not queue and limit and admission.inflight_bytes - self._taken + size > limit:
            raise self._full(limit, "")
        waiter = _Waiter(size, limit, caller, share, asyncio.get_running_loop().create_future())
        mine = self._waiting.get(caller)
        if mine is None:
            mine = self._waiting[caller] = deque()
        mine.append(waiter)
        self._wake()  # those ahead may all be waiting for their callers' shares, not for the budget
        granted = False
        try:
            async with asyncio.timeout(patience):
                await waiter.future
            granted = True
        except TimeoutError:
            if self._fits(caller, size, share):
                raise self._full(
                    limit, f" and no room came within {patience:g} s (limits.body_timeout)"
                ) from None
            raise Unavailable(
                f"this caller's messages being received hold its share of {share} bytes of this gateway's "
                f"publish requests, and none was received within {patience:g} s (limits.body_timeout): "
                "send fewer messages at once, or send them faster",
                retry_after=1.0,
            ) from None
        finally:
            if not granted:
                self._give_up(waiter)

    def give_back(self, room: int, kept: int, caller: str = "") -> None:
        """A read of ``caller`` that took ``room`` is over: ``kept`` bytes of it stay held (its message's),
        the rest is given back."""
        self._taken -= room
        held = self._by_caller.get(caller, 0) - room
        if held > 0:
            self._by_caller[caller] = held
        else:
            self._by_caller.pop(caller, None)
        if room > kept:
            self._admission.release(room - kept)  # wakes the reads waiting
        elif self._waiting:
            self._wake()  # the caller's share has room again

    def _fits(self, caller: str, size: int, share: int) -> bool:
        held = self._by_caller.get(caller, 0)
        return not share or not held or held + size <= share

    def _grant(self, caller: str, size: int) -> None:
        self._taken += size
        self._by_caller[caller] = self._by_caller.get(caller, 0) + size

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
            self.give_back(waiter.size, 0, waiter.caller)  # granted just as the wait ended
            return
        future.cancel()
        queue = self._waiting.get(waiter.caller)
        try:
            if queue is None:
                return
            queue.remove(waiter)
        except ValueError:
            return
        if not queue:
            del self._waiting[waiter.caller]
        self._wake()  # a read behind it may fit where it did not

    def _wake(self) -> None:
        """Hand the room given back to the reads waiting, caller by caller in turn and each caller's in its
        order: a caller that holds its share keeps its reads waiting without holding up the others; the
        first read that fits its caller's share and not the budget stops the handing out (nobody passes it
        to the budget's room)."""
        waiting = self._waiting
        if not waiting:
            return
        admission = self._admission
        for caller, queue in list(waiting.items()):
            granted = stop = False
            while queue:
                waiter = queue[0]
                if waiter.future.done():
                    queue.popleft()
                    continue
                if not self._fits(caller, waiter.size, waiter.share):
                    break  # its later reads wait for its share too
                if not admission.reserve(waiter.size, waiter.limit):
                    stop = True
                    break
                queue.popleft()
                self._grant(caller, waiter.size)
                waiter.future.set_result(None)
                granted = True
            if not queue:
                del waiting[caller]
            elif granted:  # its turn comes again after the others'
                del waiting[caller]
                waiting[caller] = queue
            if stop:
                break
