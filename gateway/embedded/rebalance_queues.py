"""The per-consumer rebalance event queues of the embedded master (§5.3, §6.3).

Everything here is synchronous and does no I/O: the master's handlers and its balancer call it from the event
loop thread, so no locking is needed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from gateway.tubemq.wire.meta import Partition


class EventType(IntEnum):
    """``EventProto.opType`` values the master hands out (§5.3)."""

    CONNECT = 1
    DISCONNECT = 2
    ONLY_CONNECT = 10
    ONLY_DISCONNECT = 20


@dataclass(slots=True)
class ConsumerEvent:
    """A rebalance instruction for one consumer; ``processing`` once handed out, until acknowledged."""

    rebalance_id: int
    op_type: EventType
    partitions: tuple[Partition, ...]
    processing: bool = False

    @property
    def is_disconnect(self) -> bool:
        return self.op_type in (EventType.DISCONNECT, EventType.ONLY_DISCONNECT)


@dataclass(slots=True)
class EventQueues:
    """Pending rebalance events per consumer, disconnects and connects kept apart.

    While any member of a group still has a disconnect pending, every member of that group is served from its
    disconnect queue only, so partitions are released before anyone is told to take them.
    """

    disconnects: dict[str, deque[ConsumerEvent]] = field(default_factory=dict)
    connects: dict[str, deque[ConsumerEvent]] = field(default_factory=dict)
    # group -> number of consecutive balance rounds the group was found with unfinished events
    unfinished_rounds: dict[str, int] = field(default_factory=dict)

    def add(self, consumer_id: str, event: ConsumerEvent) -> None:
        queues = self.disconnects if event.is_disconnect else self.connects
        queues.setdefault(consumer_id, deque()).append(event)

    def has_disconnect(self, members: Iterable[str]) -> bool:
        return any(self.disconnects.get(member) for member in members)

    def _queue_for(self, members: Collection[str]) -> dict[str, deque[ConsumerEvent]]:
        return self.disconnects if self.has_disconnect(members) else self.connects

    def peek(self, consumer_id: str, members: Collection[str]) -> ConsumerEvent | None:
        """The consumer's oldest event from the queue its group is currently served from."""
        queue = self._queue_for(members).get(consumer_id)
        return queue[0] if queue else None

    def remove_first(self, consumer_id: str, members: Collection[str]) -> ConsumerEvent | None:
        """Drop the consumer's oldest event (from the same queue ``peek`` would use); return it."""
        queues = self._queue_for(members)
        queue = queues.get(consumer_id)
        if not queue:
            return None
        event = queue.popleft()
        if not queue:
            del queues[consumer_id]
        return event

    def remove_all(self, consumer_id: str) -> None:
        self.disconnects.pop(consumer_id, None)
        self.connects.pop(consumer_id, None)

    def pending(self, consumer_id: str) -> list[ConsumerEvent]:
        """Every event still queued for a consumer, disconnects first (for tests and ``__repr__``)."""
        return [*self.disconnects.get(consumer_id, ()), *self.connects.get(consumer_id, ())]

    def consumers_with_events(self) -> set[str]:
        return {cid for cid, q in self.disconnects.items() if q} | {
            cid for cid, q in self.connects.items() if q
        }

    def count_unfinished_round(self, groups: set[str]) -> None:
        """Record one more round for each group that still has unfinished events; forget the others."""
        self.unfinished_rounds = {group: self.unfinished_rounds.get(group, 0) + 1 for group in groups}

    def __repr__(self) -> str:
        return (
            f"EventQueues(disconnects={ {k: len(v) for k, v in self.disconnects.items()} }, "
            f"connects={ {k: len(v) for k, v in self.connects.items()} })"
        )
