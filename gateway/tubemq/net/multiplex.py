"""The reader's side of a multiplexed TubeMQ link: :class:`Multiplexed`.

A :class:`Multiplexed` link (a :class:`~gateway.tubemq.net.link.Link`) keeps who waits for which serial
number: a future per lone request in ``pending``, a :class:`~gateway.tubemq.net.outcomes.BatchWait` per
``request_many`` batch in ``_waits``. It hands out serial numbers, files every answer the link reads with
its waiter (``_dispatch``), in whatever order the node sends them (§1.1, §1.6), fails a lone request's
future with ``TimeoutError`` at its deadline (``_watch``), and fails every waiter when the link closes
(``_fail_pending``).

Deadlines of lone requests share one timer per link (a heap of them, the timer armed at the earliest):
a loop timer per request costs more to arm and cancel than the rest of the request's
bookkeeping, and almost every request is answered long before its deadline. An answered request leaves
the heap when it reaches the top, at the next request or at the timer. Sending, and what a timeout or
any other outcome makes of a call, are :class:`~gateway.tubemq.net.connection.Connection`'s.

The usual success answer (compiled path: ``rpc.usual_answer``) is filed as its frame, read later by its
caller (with its batch, or by a decoder: ``Connection.request_decoded``); any other answer is decoded here,
so a failure or garbage acts at once: an RPC exception answer fails its request with the matching
``RemoteException``, and for the Java IOException types (standby master, server not ready, unknown
protocol) the link is closed right after delivering it, as the Java client does.
"""

from __future__ import annotations

import asyncio
import math
import ssl as _ssl
import time
from collections.abc import Callable, Sequence
from heapq import heappop, heappush

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.link import CloseReason, ConnectionState, Connector, Link
from gateway.tubemq.net.outcomes import BatchWait
from gateway.tubemq.wire.frame import DEFAULT_MAX_FRAME_BYTES, Frame
from gateway.tubemq.wire.rpc import SUCCESS_PREFIX, RpcFailure, RpcResponse, decode_response, usual_answer

__all__ = ["Multiplexed"]

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_CLOCK_SLACK = 0.001  # seconds: a deadline this close is due (the loops' timers fire to the millisecond)


class Multiplexed(Link):
    """A link whose requests wait for their answers by serial number (see the module docstring).

    The options are the :class:`~gateway.tubemq.net.link.Link`'s (``max_frame_bytes`` bounds one answer).
    """

    def __init__(
        self,
        address: NodeAddress,
        *,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        events: EventBus | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        connector: Connector | None = None,
    ) -> None:
        super().__init__(
            address,
            ssl=ssl,
            server_hostname=server_hostname,
            events=events,
            clock=clock,
            max_frame_bytes=max_frame_bytes,
            connector=connector,
        )
        self._serial = 0
        self._wrapped = False  # the serial counter went past int32's end once: serials may be pending ahead
        self.pending: dict[int, asyncio.Future[RpcResponse | Frame]] = {}
        self._waits: dict[int, BatchWait] = {}  # serial -> its request_many batch (until answered)
        self.unknown_answers = 0
        """Answers whose serial number was not pending (expired, cancelled or never sent)."""
        self.requests_sent = 0
        # (deadline, order, future) of lone requests; the timer fires at the earliest (_watch, _sweep)
        self._deadlines: list[tuple[float, int, asyncio.Future[RpcResponse | Frame]]] = []
        self._watched = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf

    # --- state questions (the pool asks, the connection answers) --------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self.pending) + len(self._waits)

    def is_idle(self, now: float, idle_timeout: float) -> bool:
        """True when open, nothing is in flight and no traffic happened for ``idle_timeout`` seconds."""
        if self._state is not ConnectionState.OPEN or self.pending or self._waits or self.idle_since is None:
            return False
        return now - max(self.idle_since, self.last_activity) >= idle_timeout

    def _next_serials(self, count: int) -> Sequence[int]:
        """``count`` serial numbers for a batch: the next ones in a row while the counter has not wrapped
        around (nothing pending can hold them), else one by one (``_next_serial``)."""
        start = self._serial + 1
        if not self._wrapped and start + count - 1 <= _INT32_MAX:
            self._serial = start + count - 1
            return range(start, start + count)
        return [self._next_serial() for _ in range(count)]

    def _next_serial(self) -> int:
        if self._serial < _INT32_MAX:
            serial = self._serial + 1
        else:
            serial = _INT32_MIN
            self._wrapped = True
        # A wrapped counter could meet a request still pending after 2**32 others; skip it.
        while serial in self.pending or serial in self._waits:
            serial = serial + 1 if serial < _INT32_MAX else _INT32_MIN
        self._serial = serial
        return serial

    def _dispatch(self, frame: Frame) -> None:
        batch = self._waits.pop(frame.serial, None)  # answered: no longer in flight
        if batch is not None:
            self._file(frame, batch, batch.slot_of(frame.serial))
            return
        future = self.pending.get(frame.serial)
        if future is None or future.done():
            self.unknown_answers += 1
            return
        if usual_answer(frame.payload, SUCCESS_PREFIX):
            future.set_result(frame)  # read by its caller (Connection.request_decoded)
            return
        answer = decode_response(frame)
        if isinstance(answer, RpcFailure):
            exc = answer.to_exception()
            future.set_exception(exc)
            if exc.is_io_exception:
                self._terminate(CloseReason.REMOTE_IO_EXCEPTION, exc)
        else:
            future.set_result(answer)

    def _file(self, frame: Frame, batch: BatchWait, i: int) -> None:
        """File an answer of a ``request_many`` batch in its slot; the batch's waiter wakes with the last.
        The usual success answer is filed as its frame (compiled path: ``rpc.usual_answer``), decoded with
        its batch; any other is decoded here, so a failure or garbage acts at once as for a lone request."""
        if batch.waiter.done():  # the batch timed out (or its link closed) before this answer came
            self.unknown_answers += 1
            return
        if usual_answer(frame.payload, SUCCESS_PREFIX):
            batch.slots[i] = frame
            batch.answered()
            return
        answer = decode_response(frame)
        if isinstance(answer, RpcFailure):
            exc = answer.to_exception()
            batch.slots[i] = exc
            batch.answered()
            if exc.is_io_exception:
                self._terminate(CloseReason.REMOTE_IO_EXCEPTION, exc)
        else:
            batch.slots[i] = answer
            batch.answered()

    def _watch(
        self, loop: asyncio.AbstractEventLoop, deadline: float, future: asyncio.Future[RpcResponse | Frame]
    ) -> None:
        """Fail ``future`` with ``TimeoutError`` at the loop time ``deadline`` unless it is done by then."""
        heap = self._deadlines
        while heap and heap[0][2].done():  # answered (or cancelled) at the top: gone
            heappop(heap)
        self._watched += 1
        heappush(heap, (deadline, self._watched, future))
        if deadline < self._sweep_at:
            if self._sweeper is not None:
                self._sweeper.cancel()
            self._sweeper = loop.call_at(deadline, self._sweep, loop)
            self._sweep_at = deadline

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer: fail what is past its deadline (within the loop's clock resolution, as the loop itself
        runs timers), drop what is done, and arm for the next deadline."""
        self._sweeper, self._sweep_at = None, math.inf
        heap = self._deadlines
        due = loop.time() + _CLOCK_SLACK
        while heap and (heap[0][0] <= due or heap[0][2].done()):
            future = heappop(heap)[2]
            if not future.done():
                future.set_exception(TimeoutError())
        if heap:
            self._sweep_at = heap[0][0]
            self._sweeper = loop.call_at(self._sweep_at, self._sweep, loop)

    def _fail_pending(self) -> int:
        if self._sweeper is not None:  # every lone request fails now: no deadline left to watch
            self._sweeper.cancel()
            self._sweeper, self._sweep_at = None, math.inf
        self._deadlines.clear()
        failed = 0
        for future in self.pending.values():
            if not future.done():
                future.set_exception(self._closed_error())
                failed += 1
        for serial, batch in self._waits.items():
            i = batch.slot_of(serial)
            if not batch.waiter.done() and batch.slots[i] is None:
                batch.slots[i] = self._closed_error()
                failed += 1
        for batch in self._waits.values():
            batch.wake()
        self._waits.clear()
        return failed
