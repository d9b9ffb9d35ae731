"""Rebalance events (§5.3, §6.4) and the broker registrations they lead to (§6.5).

The master hands out one event at a time in its heartbeat answers. The :class:`Rebalancer` runs them one
after the other in its own task, so a slow broker never delays a heartbeat; a finished event waits in
``finished`` until the next master heartbeat acknowledges it (status DONE).

* DISCONNECT / ONLY_DISCONNECT: stop handing the partitions out, wait up to ``rebalance_confirm_wait`` for
  a delivered batch to be confirmed (a batch still out then is rolled back), forget the partitions and
  unregister them at their brokers with ``readStatus`` 0 (last batch consumed: commit) or 1 (roll back).
* CONNECT / ONLY_CONNECT: register every listed partition not yet held, with the ``readStatus`` of the start
  position (§6.8) and, in bound mode, the requested offset (§6.9). Failures are retried in rounds, except
  410 (held by another consumer) and 415 (certificate) which are given up at once; what still fails is
  left to the master, which learns it from the next subscription report.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.consumer.events import (
    PartitionRegistered,
    PartitionRegisterFailed,
    PartitionReleased,
    RebalanceEvent,
)
from gateway.tubemq.consumer.partition_registration import (
    build_partition_register_request,
    build_partition_unregister_request,
)
from gateway.tubemq.consumer.state import ConsumerContext
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.meta import MetaFormatError, Partition, parse_subscribe_info
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb

__all__ = ["EventType", "RebalanceTask", "Rebalancer"]

log = logging.getLogger(__name__)

STATUS_DONE = 2
#: errCodes after which a partition registration is not retried
_GIVE_UP = frozenset({410, 415})
_TRANSPORT = -1


class EventType(IntEnum):
    """``EventProto.opType`` values (§5.3)."""

    CONNECT = 1
    DISCONNECT = 2
    REPORT = 3
    REFRESH = 4
    STOPREBALANCE = 5
    ONLY_CONNECT = 10
    ONLY_DISCONNECT = 20
    UNKNOWN = -1

    @classmethod
    def of(cls, value: int) -> EventType:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class RebalanceTask:
    """One event from the master; ``subscribe_info`` is kept as received to echo it when acknowledging."""

    rebalance_id: int
    op_type: int
    subscribe_info: tuple[str, ...]
    partitions: tuple[Partition, ...]

    @property
    def event_type(self) -> EventType:
        return EventType.of(self.op_type)

    @classmethod
    def from_proto(cls, event: master_pb.EventProto) -> RebalanceTask:
        """Build a task from the master's event; unreadable subscribeInfo strings are skipped."""
        partitions: dict[str, Partition] = {}
        for text in event.subscribeInfo:
            try:
                partition = parse_subscribe_info(text).partition
            except MetaFormatError:
                continue
            partitions.setdefault(partition.partition_key, partition)
        return cls(event.rebalanceId, event.opType, tuple(event.subscribeInfo), tuple(partitions.values()))

    def done_proto(self) -> master_pb.EventProto:
        return master_pb.EventProto(
            rebalanceId=self.rebalance_id,
            opType=self.op_type,
            status=STATUS_DONE,
            subscribeInfo=list(self.subscribe_info),
        )


class Rebalancer:
    """Runs rebalance events one at a time and keeps the finished ones for the next heartbeat."""

    def __init__(self, ctx: ConsumerContext, on_finished: Callable[[], None] | None = None) -> None:
        self._ctx = ctx
        self._on_finished = on_finished
        self._pending: RebalanceTask | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.finished: deque[RebalanceTask] = deque()

    def __repr__(self) -> str:
        pending = self._pending.rebalance_id if self._pending else None
        return f"<Rebalancer pending={pending} busy={not self._idle.is_set()} finished={len(self.finished)}>"

    @property
    def busy(self) -> bool:
        return self._pending is not None or not self._idle.is_set()

    def submit(self, task: RebalanceTask) -> None:
        """Queue an event; one not started yet is replaced (Java runs only the newest queued event)."""
        self._pending = task
        self._idle.clear()
        self._wake.set()
        self._emit_event(task, done=False)

    async def wait_idle(self, seconds: float) -> bool:
        """Wait up to ``seconds`` until no event is queued or running; False if one still is."""
        # asyncio.timeout, not wait_for: in Python 3.11 wait_for could swallow a cancellation of its caller.
        try:
            async with asyncio.timeout(seconds):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """The worker loop; runs until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            task, self._pending = self._pending, None
            if task is not None and not self._ctx.closing:
                try:
                    await self.execute(task)
                except Exception:
                    # Still acknowledged: the master would otherwise hold back every further event, and
                    # the subscription report tells it what this consumer really holds.
                    log.exception(
                        "rebalance event failed: %s",
                        task,
                        extra={"client_id": self._ctx.client_id, "rebalance_id": task.rebalance_id},
                    )
                self.finished.append(task)
                self._emit_event(task, done=True)
                if self._on_finished is not None:
                    self._on_finished()
            if self._pending is None:
                self._idle.set()

    async def execute(self, task: RebalanceTask) -> None:
        kind = task.event_type
        if kind in (EventType.DISCONNECT, EventType.ONLY_DISCONNECT):
            await self.disconnect(task.partitions)
        elif kind in (EventType.CONNECT, EventType.ONLY_CONNECT):
            await self.connect(task.partitions)
        # Other types carry no work for a client (Java: REPORT is a no-op); they are acknowledged as done.

    # --- connect ------------------------------------------------------------------------------------

    async def connect(self, partitions: Iterable[Partition]) -> None:
        """Register every partition not held yet, in rounds; see the module docstring."""
        ctx = self._ctx
        remaining = [p for p in partitions if p.partition_key not in ctx.cache]
        for round_no in range(ctx.config.broker_register_rounds):
            if not remaining or ctx.closing:
                return
            if round_no:
                await asyncio.sleep(ctx.config.broker_register_retry_wait)
            codes = await asyncio.gather(*(self.register(p) for p in remaining))
            last_round = round_no == ctx.config.broker_register_rounds - 1
            retry: list[Partition] = []
            for partition, (code, message) in zip(remaining, codes, strict=True):
                if code == 200:
                    continue
                final = code in _GIVE_UP or last_round
                ctx.emit(
                    PartitionRegisterFailed(
                        ctx.client_id, ctx.group, partition.partition_key, code, message, final
                    )
                )
                if not final:
                    retry.append(partition)
            remaining = retry

    async def register(self, partition: Partition) -> tuple[int, str]:
        """Register one partition at its broker and hold it on success; returns (errCode, errMsg),
        errCode -1 for a transport failure."""
        ctx = self._ctx
        key = partition.partition_key
        if key in ctx.cache:
            return 200, "already held"
        # Booked on success only: a lost first answer must not turn LATEST into "from the stored offset or
        # the oldest message" on the retry, which is what Java's book-on-attempt does.
        first = not ctx.cache.registered_before(key)
        bound = ctx.config.bound
        position = ctx.config.start_position
        if partition.topic in ctx.config.earliest_topics:
            position = StartPosition.EARLIEST
        # Bound consumption forces the requested offset at the first registration only (§6.9).
        forced = bound.offsets.get(key) if bound is not None and first and ctx.not_allocated else None
        request = build_partition_register_request(
            ctx.client_id,
            ctx.group,
            partition,
            read_status=position.read_status(first),
            visit_token=ctx.visit_token,
            offset=forced,
            filters=ctx.filters.get(partition.topic, ()),
        )
        try:
            answer = await ctx.broker_call(partition, rpc.Method.CONSUMER_BROKER_REGISTER, request)
        except TubeMQError as exc:
            return _TRANSPORT, str(exc)
        assert isinstance(answer, broker_pb.RegisterResponseB2C)
        if not answer.success or answer.errCode != 200:
            return answer.errCode or 500, answer.errMsg
        if key in ctx.cache:
            return 200, "OK"
        # Held even while closing, so that close() unregisters it instead of leaving it to expire.
        curr = answer.currOffset if answer.HasField("currOffset") else -1
        max_offset = answer.maxOffset if answer.HasField("maxOffset") else -1
        ctx.cache.add(partition, curr, max_offset)
        ctx.emit(PartitionRegistered(ctx.client_id, ctx.group, key, curr, max_offset))
        return 200, answer.errMsg

    # --- disconnect ---------------------------------------------------------------------------------

    async def disconnect(self, partitions: Sequence[Partition]) -> None:
        """Release partitions for a DISCONNECT event; see the module docstring."""
        ctx = self._ctx
        keys = [p.partition_key for p in partitions if p.partition_key in ctx.cache]
        ctx.cache.leave(keys)
        await self.wait_returned(keys, ctx.config.rebalance_confirm_wait)
        await asyncio.gather(*(self.release(key, reason="rebalance") for key in keys))

    async def wait_returned(self, keys: Sequence[str], seconds: float) -> None:
        """Wait until none of ``keys`` is handed out, at most ``seconds``."""
        cache = self._ctx.cache
        deadline = self._ctx.clock() + seconds
        while cache.any_in_use(keys):
            remaining = deadline - self._ctx.clock()
            if remaining <= 0:
                return
            await cache.wait_changed(remaining)

    async def release(self, key: str, *, reason: str) -> None:
        """Forget a partition and unregister it at its broker; a batch still out is rolled back."""
        ctx = self._ctx
        state = ctx.cache.remove(key)
        if state is None:
            return
        consumed = state.last_consumed and not state.in_use
        await self.unregister(state.partition, consumed)
        ctx.emit(PartitionReleased(ctx.client_id, ctx.group, key, reason, consumed))

    async def unregister(self, partition: Partition, consumed: bool) -> None:
        ctx = self._ctx
        request = build_partition_unregister_request(
            ctx.client_id, ctx.group, partition, consumed=consumed, visit_token=ctx.visit_token
        )
        try:
            await ctx.broker_call(partition, rpc.Method.CONSUMER_BROKER_REGISTER, request)
        except TubeMQError:
            # The broker forgets the registration by itself after its timeout (and rolls the batch back).
            return

    def drop(self, key: str, reason: str) -> None:
        """Forget a partition the broker no longer accepts (no unregistration is sent)."""
        ctx = self._ctx
        if ctx.cache.remove(key) is not None:
            ctx.emit(PartitionReleased(ctx.client_id, ctx.group, key, reason, None))

    def _emit_event(self, task: RebalanceTask, *, done: bool) -> None:
        ctx = self._ctx
        ctx.emit(
            RebalanceEvent(
                ctx.client_id,
                ctx.group,
                task.rebalance_id,
                task.event_type.name,
                tuple(p.partition_key for p in task.partitions),
                done,
            )
        )
