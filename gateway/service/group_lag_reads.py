"""One group's offsets read from TubeMQ's web API for ``GET /v1/consumers/{group}/lag`` and gRPC
``GetGroupLag``, shared: a reading is kept for ``ttl`` seconds, concurrent requests for one group wait for one
reading (single flight), and each caller may start at most ``per_caller_rate`` readings a second.

A reading costs three web API calls (the master's broker list, each broker's ``admin_query_offset``, the
master's consumer count), so without sharing, a few clients polling one group's lag keep the master busy.
What is kept is the raw reading (every partition of the group, before any caller's access is applied), so
one reading serves every caller; a group holding no offset and a web API that cannot be read are kept too,
so a client asking about a group that never committed, or a master that is down, is not answered with a
new round of calls each time. At most :data:`MAX_KEPT` groups are kept (the least recently read go first).

A caller (:func:`~gateway.service.quotas.caller_key`) that starts readings faster than ``per_caller_rate``
a second (with a burst of as many) is refused with RateLimited; a request answered from what is kept, or
waiting for a reading another request started, costs nothing. With ``serve --workers N`` each worker keeps
its own readings and budgets: the kernel hands workers connections, not requests, so a rate split over the
workers would refuse a client whose connections all reached one of them at 1/N of its rate; a caller spread
over every worker can start at most N times ``per_caller_rate`` readings a second on the replica.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.service.errors import Quota, RateLimited
from gateway.service.group_offsets import GroupOffsetsReader, OffsetsUnavailable, PartitionOffsets
from gateway.service.quotas import caller_key

__all__ = ["MAX_KEPT", "GroupLagReads", "GroupReading"]

#: groups whose last reading is kept
MAX_KEPT = 4096
#: oldest unconsumed message times kept (one per partition and committed offset)
MAX_TIMES = 16_384
#: callers whose reading budget is kept (a budget left alone for a second is full again: dropping it is free)
MAX_CALLERS = 10_000


@dataclass(frozen=True, slots=True)
class GroupReading:
    """A group's partitions on every broker (empty: it holds no offset) and the master's count of its
    consumers (None: the master could not tell); ``read_at``: wall-clock time of the reading."""

    rows: tuple[PartitionOffsets, ...]
    consumers: int | None
    read_at: float


@dataclass(slots=True)
class _Kept:
    until: float
    reading: GroupReading | None
    error: OffsetsUnavailable | None


class GroupLagReads:
    """Shared readings of single groups (see the module docstring)."""

    def __init__(
        self,
        reader: GroupOffsetsReader,
        *,
        ttl: float = 2.0,
        per_caller_rate: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl < 0 or per_caller_rate < 0:
            raise ValueError("ttl and per_caller_rate must be >= 0")
        self.reader = reader
        self.ttl = ttl
        self.per_caller_rate = per_caller_rate
        self._clock = clock
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._flights: dict[str, asyncio.Future[GroupReading]] = {}
        self._budgets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # caller -> (tokens, at)
        self._tasks: set[asyncio.Task[None]] = set()
        self._times: OrderedDict[tuple[str, str, int], asyncio.Future[str | None]] = OrderedDict()
        #: readings started (each is a round of web API calls)
        self.readings = 0

    def __repr__(self) -> str:
        return (
            f"<GroupLagReads kept={len(self._kept)} ttl={self.ttl:g}s {self.per_caller_rate:g}/s per caller>"
        )

    async def read(self, group: str) -> GroupReading:
        """``group``'s reading: kept, in flight, or started now (charged to the current caller). Raises
        OffsetsUnavailable (kept like a reading) or RateLimited."""
        now = self._clock()
        kept = self._kept.get(group)
        if kept is not None and kept.until > now:
            self._kept.move_to_end(group)
            if kept.error is not None:
                raise kept.error
            assert kept.reading is not None
            return kept.reading
        flight = self._flights.get(group)
        if flight is None:
            self._charge(now)
            flight = asyncio.get_running_loop().create_future()
            self._flights[group] = flight
            task = asyncio.get_running_loop().create_task(
                self._fetch(group, flight), name="group lag reading"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # shielded: a request that goes away does not end the reading the others wait for
        return await asyncio.shield(flight)

    async def oldest_time(
        self, group: str, key: str, committed: int, read: Callable[[], Awaitable[str | None]]
    ) -> str | None:
        """The msgTime of the message at ``committed`` in partition ``key``: a fact while the offset
        stays, so read once (``read()``, concurrent requests share it) and kept. A read that fails
        (``read`` raises) is not kept: the next request reads again."""
        slot = (group, key, committed)
        found = self._times.get(slot)
        if found is None or (found.done() and (found.cancelled() or found.exception() is not None)):
            found = asyncio.ensure_future(read())
            found.add_done_callback(_retrieve)
            self._times[slot] = found
            while len(self._times) > MAX_TIMES:
                self._times.popitem(last=False)
        self._times.move_to_end(slot)
        return await asyncio.shield(found)

    async def close(self) -> None:
        """End the readings in progress (their requests are cancelled)."""
        tasks, self._tasks = set(self._tasks), set()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _fetch(self, group: str, flight: asyncio.Future[GroupReading]) -> None:
        self.readings += 1
        error: OffsetsUnavailable | None = None
        reading: GroupReading | None = None
        try:
            rows = (await self.reader.offsets([group])).get(group, [])
            consumers = await self.reader.consumers(group)
            reading = GroupReading(tuple(rows), consumers if consumers >= 0 else None, time.time())
        except OffsetsUnavailable as exc:
            error = exc
        except asyncio.CancelledError:  # the gateway stops
            self._flights.pop(group, None)
            flight.cancel()
            raise
        except Exception as exc:  # a bug: the waiting requests hear of it, nothing is kept
            self._flights.pop(group, None)
            flight.set_exception(exc)
            flight.exception()  # retrieved: no "never retrieved" warning when nobody waits any more
            return
        self._flights.pop(group, None)
        self._keep(group, _Kept(self._clock() + self.ttl, reading, error))
        if error is not None:
            flight.set_exception(error)
            flight.exception()
        else:
            assert reading is not None
            flight.set_result(reading)

    def _keep(self, group: str, kept: _Kept) -> None:
        if self.ttl <= 0:
            return
        self._kept[group] = kept
        self._kept.move_to_end(group)
        while len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)

    def _charge(self, now: float) -> None:
        """Take one reading from the current caller's budget, or refuse."""
        rate = self.per_caller_rate
        if not rate:
            return
        caller = caller_key()
        tokens, at = self._budgets.pop(caller, (rate, now))
        tokens = min(rate, tokens + (now - at) * rate)
        if tokens < 1:
            wait = (1 - tokens) / rate
            self._budgets[caller] = (tokens, now)
            self._trim()
            raise RateLimited(
                f"this caller asks for group lag readings faster than {rate:g} a second on this gateway; "
                f"retry in {wait:.2f} s (a group's lag is kept for {self.ttl:g} s, so asking more often "
                "gives the same figures)",
                retry_after=math.ceil(wait * 100) / 100,
                quota=Quota("lag-readings", max(1, int(rate)), 1.0, 0, "requests"),
            )
        self._budgets[caller] = (tokens - 1, now)
        self._trim()

    def _trim(self) -> None:
        while len(self._budgets) > MAX_CALLERS:
            self._budgets.popitem(last=False)


def _retrieve(future: asyncio.Future[str | None]) -> None:
    """Mark a failed read's exception as seen (whoever waited for it has it already)."""
    if not future.cancelled():
        future.exception()
