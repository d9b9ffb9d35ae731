"""The consumer's partition cache: which partitions it holds and which one a poll may fetch next.

No I/O happens here. Every decision (hand a partition out, take it back, park it for a wait period, drop
it) is one synchronous method, so that concurrent polls, confirms, rebalance events and heartbeats, which
interleave only at ``await`` points, always see a consistent cache. Time is passed in (monotonic seconds).

A held partition is in exactly one of these places:

* ready: queued for the next poll; polls take partitions round-robin from the front of the queue;
* waiting: parked until a deadline after an outcome that asks for a pause (404, 403, ...);
* in use: handed out with a token, until the fetch fails or the delivered batch is confirmed;
* leaving: a DISCONNECT is releasing it; it is never handed out again.

The ``last_consumed`` flag of a partition is the outcome of its previous batch; it is read and reset when
the partition is handed out, and carried by the next GetMessage as ``lastPackConsumed`` (§6.7). A batch
confirmed in the consumer alone (``commit_due``, Java's ``pullConfirmInLocal``) has sent no CommitOffset:
its commit reaches the broker on the partition's next GetMessage, or on a CommitOffset sent for it later.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from gateway.tubemq.consumer.config import ConsumerConfig
from gateway.tubemq.net.outcomes import AnswersDecoder
from gateway.tubemq.wire.meta import BrokerInfo, Partition
from gateway.tubemq.wire.rpc import Method

if TYPE_CHECKING:
    from gateway.tubemq.events import EventBus
    from gateway.tubemq.net.pool import ConnectionPool

__all__ = ["ConsumerContext", "PartitionCache", "PartitionState", "Selection", "empty_fetch_wait"]


def empty_fetch_wait(empty_fetches: int, base: float, cap: float) -> float:
    """The wait after the ``empty_fetches``-th empty fetch in a row (counted from 0): ``base`` doubled each
    time, at most ``cap`` (never below ``base``). An idle partition then costs its broker one request per
    ``cap`` seconds instead of one per ``base``; data resets the count."""
    if empty_fetches <= 0 or cap <= base:
        return base
    return min(base * (1 << min(empty_fetches, 32)), cap)


# Broker calls without an authInfo field (§9.2): no credentials to stamp, so no look at the request.
_UNAUTHENTICATED = frozenset({Method.GET_MESSAGES, Method.CONSUMER_COMMIT})


@dataclass(slots=True)
class PartitionState:
    """What the consumer knows about one held partition. Offsets are broker index offsets (-1 = unknown)."""

    partition: Partition
    curr_offset: int = -1
    max_offset: int = -1
    last_consumed: bool = False
    token: int | None = None
    taken_at: float = 0.0
    leaving: bool = False
    #: a seek is moving its read position: not handed out meanwhile
    paused: bool = False
    #: GetMessage answers in a row that found nothing (404); the wait before the next fetch grows with it
    empty_fetches: int = 0
    #: the last batch was confirmed as consumed in the consumer alone; no request has carried it yet
    commit_due: bool = False

    @property
    def in_use(self) -> bool:
        return self.token is not None


@dataclass(frozen=True, slots=True)
class Selection:
    """A partition handed out to one poll; ``last_consumed`` goes into the GetMessage request;
    ``commit_due``: that flag carries a commit no CommitOffset sent (see ``PartitionState.commit_due``)."""

    state: PartitionState
    token: int
    last_consumed: bool
    commit_due: bool = False

    @property
    def partition(self) -> Partition:
        return self.state.partition


@dataclass(slots=True)
class PartitionCache:
    """Held partitions, their round-robin queue, wait periods and in-use tokens."""

    _states: dict[str, PartitionState] = field(default_factory=dict)
    _ready: deque[str] = field(default_factory=deque)
    _waiting: dict[str, float] = field(default_factory=dict)
    _booked: set[str] = field(default_factory=set)
    _tokens: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: bumped whenever the set of held partitions changes
    version: int = 0

    def __repr__(self) -> str:
        in_use = sum(1 for s in self._states.values() if s.in_use)
        leaving = sum(1 for s in self._states.values() if s.leaving)
        return (
            f"<PartitionCache held={len(self._states)} ready={len(self._ready)} "
            f"waiting={len(self._waiting)} in_use={in_use} leaving={leaving}>"
        )

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def get(self, key: str) -> PartitionState | None:
        return self._states.get(key)

    def held(self) -> list[PartitionState]:
        """Every held partition, in the order they were added."""
        return list(self._states.values())

    def by_broker(self) -> dict[BrokerInfo, list[Partition]]:
        """Held partitions grouped by the broker they are registered at."""
        groups: dict[BrokerInfo, list[Partition]] = {}
        for state in self._states.values():
            groups.setdefault(state.partition.broker, []).append(state.partition)
        return groups

    def registered_before(self, key: str) -> bool:
        """True once this consumer instance has held the partition (the start position then no longer
        applies, §6.8)."""
        return key in self._booked

    # --- membership ------------------------------------------------------------------------------

    def add(self, partition: Partition, curr_offset: int = -1, max_offset: int = -1) -> bool:
        """Hold a newly registered partition (queued as ready); False if it is already held."""
        if partition.partition_key in self._states:
            return False
        self._states[partition.partition_key] = PartitionState(partition, curr_offset, max_offset)
        self._booked.add(partition.partition_key)
        self._ready.append(partition.partition_key)
        self.version += 1
        self._notify()
        return True

    def remove(self, key: str) -> PartitionState | None:
        """Stop holding a partition at once; a batch still out for it can no longer be confirmed."""
        state = self._states.pop(key, None)
        if state is None:
            return None
        self._discard_queued(key)
        state.token = None
        self.version += 1
        self._notify()
        return state

    def leave(self, keys: Iterable[str]) -> None:
        """Stop handing these partitions out; any batch out for them may still be confirmed."""
        for key in keys:
            state = self._states.get(key)
            if state is not None:
                state.leaving = True
                self._discard_queued(key)

    def pause(self, key: str) -> PartitionState | None:
        """Stop handing a partition out until ``resume`` (a seek); a batch out for it may still be
        confirmed. None when it is not held or leaving."""
        state = self._states.get(key)
        if state is None or state.leaving:
            return None
        state.paused = True
        self._discard_queued(key)
        return state

    def resume(self, key: str, *, forget_batch: bool) -> None:
        """Hand a paused partition out again. ``forget_batch``: a batch still out for it can no longer be
        confirmed (the broker forgot it) and the next fetch carries no outcome of it."""
        state = self._states.get(key)
        if state is None or not state.paused:
            return
        state.paused = False
        if forget_batch:
            state.token = None
            state.last_consumed = state.commit_due = False
        if not state.in_use and not state.leaving:
            self._ready.append(key)
        self._notify()

    def any_in_use(self, keys: Iterable[str]) -> bool:
        return any((s := self._states.get(k)) is not None and s.in_use for k in keys)

    def update_offsets(self, key: str, curr_offset: int, max_offset: int) -> None:
        """Record offsets reported by the broker; negative values (unknown) are ignored."""
        state = self._states.get(key)
        if state is None:
            return
        if curr_offset >= 0:
            state.curr_offset = curr_offset
        if max_offset >= 0:
            state.max_offset = max_offset

    # --- handing out and taking back ---------------------------------------------------------------

    def select(self, now: float) -> Selection | None:
        """Hand out the next ready partition (round-robin), or None if none is ready now."""
        self._promote(now)
        while self._ready:
            key = self._ready.popleft()
            state = self._states.get(key)
            if state is None or state.in_use or state.leaving or state.paused:
                continue
            return self._hand_out(state, now)
        return None

    def take(self, key: str, now: float) -> Selection | None:
        """Hand out partition ``key`` if it is queued as ready now (not in use, parked, leaving or paused)."""
        state = self._states.get(key)
        if state is None or state.in_use or state.leaving or state.paused or key not in self._ready:
            return None
        self._ready.remove(key)
        return self._hand_out(state, now)

    def _hand_out(self, state: PartitionState, now: float) -> Selection:
        state.token = next(self._tokens)
        state.taken_at = now
        last_consumed, state.last_consumed = state.last_consumed, False
        commit_due, state.commit_due = state.commit_due, False
        return Selection(state, state.token, last_consumed, commit_due)

    def ready_now(self, now: float) -> int:
        """How many partitions ``select`` would hand out now, one after another."""
        self._promote(now)
        states = self._states
        return sum(
            1
            for key in self._ready
            if (s := states.get(key)) is not None and not (s.in_use or s.leaving or s.paused)
        )

    def is_in_use(self, key: str, token: int) -> bool:
        state = self._states.get(key)
        return state is not None and state.token == token

    def release(
        self, key: str, token: int, *, consumed: bool, wait: float, now: float, commit_due: bool = False
    ) -> bool:
        """Take a handed-out partition back: record the batch outcome and queue it after ``wait`` seconds.
        ``commit_due`` (with ``consumed``): no request has carried that commit yet.

        Returns False (and changes nothing) when the token is stale: the partition was dropped, expired
        or handed out again since.
        """
        state = self._states.get(key)
        if state is None or state.token != token:
            return False
        state.token = None
        state.last_consumed = consumed
        state.commit_due = consumed and commit_due
        if not state.leaving and not state.paused:
            if wait > 0:
                self._waiting[key] = now + wait
            else:
                self._ready.append(key)
        self._notify()
        return True

    def expire_unconfirmed(self, now: float, timeout: float) -> list[str]:
        """Release, as not consumed, partitions handed out more than ``timeout`` seconds ago."""
        expired = [
            key for key, s in self._states.items() if s.token is not None and now - s.taken_at > timeout
        ]
        for key in expired:
            state = self._states[key]
            assert state.token is not None
            self.release(key, state.token, consumed=False, wait=0.0, now=now)
        return expired

    # --- waiting for changes ---------------------------------------------------------------------

    def next_ready_in(self, now: float) -> float | None:
        """Seconds until the earliest parked partition becomes ready; None if none is parked."""
        if not self._waiting:
            return None
        return max(0.0, min(self._waiting.values()) - now)

    def status(self) -> str:
        """Why nothing can be handed out (Java's 405-408 pull statuses, as words)."""
        if not self._states:
            return "no partition assigned"
        if self._ready:
            return "ready"
        if self._waiting:
            return "all partitions waiting"
        if any(s.in_use for s in self._states.values()):
            return "all partitions in use"
        return "all partitions leaving"

    async def wait_changed(self, seconds: float) -> None:
        """Return when a partition was added, released or removed, or after ``seconds``."""
        event = self._changed
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return

    def wake(self) -> None:
        """Wake every waiter (used on close)."""
        self._notify()

    # --- internals --------------------------------------------------------------------------------

    def _promote(self, now: float) -> None:
        due = [(deadline, key) for key, deadline in self._waiting.items() if deadline <= now]
        heapq.heapify(due)
        while due:
            _, key = heapq.heappop(due)
            del self._waiting[key]
            self._ready.append(key)

    def _discard_queued(self, key: str) -> None:
        self._waiting.pop(key, None)
        if key in self._ready:
            self._ready.remove(key)

    def _notify(self) -> None:
        # Swap the event so that waiters of this change wake and later waiters wait for the next one.
        self._changed.set()
        self._changed = asyncio.Event()


@dataclass(slots=True)
class ConsumerContext:
    """What the consumer's parts share: identity, subscription, settings, links and the partition cache.

    ``filters`` maps each subscribed topic to its filter items (empty = no filter). ``visit_token`` is the
    last ``visitAuthorizedToken`` from the master (-2 before the first answer, like Java);
    ``not_allocated`` stays true until the master reports the bound allocation done (§6.9).
    """

    client_id: str
    group: str
    host_name: str
    filters: dict[str, frozenset[str]]
    config: ConsumerConfig
    pool: ConnectionPool
    events: EventBus | None
    cache: PartitionCache = field(default_factory=PartitionCache)
    clock: Callable[[], float] = time.monotonic
    visit_token: int = -2
    not_allocated: bool = True
    closing: bool = False

    def emit(self, event: object) -> None:
        if self.events is not None:
            self.events.emit(event)

    async def broker_call(self, partition: Partition, method: int, request: Message) -> Message:
        """Send one request to the broker of ``partition`` with the configured deadline (and the broker
        token in its ``authInfo`` when the pool carries credentials, §9)."""
        answer = await self.broker_call_decoded(partition, method, request, None)
        assert isinstance(answer, Message)
        return answer

    async def broker_call_decoded(
        self, partition: Partition, method: int, request: Message, decode: AnswersDecoder | None
    ) -> object:
        """:meth:`broker_call` with its answer read by ``decode`` when given
        (``ConnectionPool.request_decoded``): its value, or the parsed response where it gives None."""
        credentials = self.pool.credentials
        if credentials is not None and method not in _UNAUTHENTICATED:
            credentials.stamp_broker_request(request)
        address, timeout = partition.broker.address, self.config.rpc_timeout
        return await self.pool.request_decoded(address, method, request, timeout, decode=decode)
