"""Events the consumer emits on its :class:`~gateway.tubemq.events.EventBus` (metrics and logs subscribe).

Every event names the consumer (``client_id``) and its ``group``. Partition keys are
``brokerId:topic:partitionId``; durations are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tubemq.events import Event

__all__ = [
    "ConsumerClosed",
    "ConsumerHeartbeatFailed",
    "ConsumerRegistered",
    "FetchOutcome",
    "OffsetCommitted",
    "PartitionRegisterFailed",
    "PartitionRegistered",
    "PartitionReleased",
    "RebalanceEvent",
]


@dataclass(frozen=True, slots=True)
class ConsumerRegistered(Event):
    """The master accepted the consumer; ``again`` is true for a re-registration (after a 411)."""

    client_id: str
    group: str
    again: bool
    held: int


@dataclass(frozen=True, slots=True)
class RebalanceEvent(Event):
    """A rebalance event from the master, emitted when received and again when done (``done``)."""

    client_id: str
    group: str
    rebalance_id: int
    event_type: str
    partitions: tuple[str, ...]
    done: bool


@dataclass(frozen=True, slots=True)
class PartitionRegistered(Event):
    """A partition was registered at its broker; consumption starts at ``curr_offset``."""

    client_id: str
    group: str
    partition_key: str
    curr_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class PartitionRegisterFailed(Event):
    """Registering a partition at its broker failed; ``final`` when it was given up."""

    client_id: str
    group: str
    partition_key: str
    errcode: int
    message: str
    final: bool


@dataclass(frozen=True, slots=True)
class PartitionReleased(Event):
    """The consumer stopped holding a partition.

    ``reason``: ``rebalance`` (DISCONNECT event), ``close``, ``broker`` (the broker dropped it: fetch or
    heartbeat answered 411/412/415, or the broker heartbeat failed). ``consumed`` is the outcome sent with the
    unregistration (false rolls the last batch back); None when nothing was sent to the broker.
    """

    client_id: str
    group: str
    partition_key: str
    reason: str
    consumed: bool | None


@dataclass(frozen=True, slots=True)
class FetchOutcome(Event):
    """One GetMessage: ``outcome`` is ``ok``, ``empty``, ``not_found``, ``speed_limit``, ``forbidden``,
    ``moved``, ``unavailable``, ``dropped`` (411/412/415), ``error`` (other codes) or ``transport``.
    ``lag_messages``: index entries of the partition's store still unread behind its read position after
    this read, from the broker's offsets (an upper bound: entries of sibling partitions in the same store
    count too); 0 for ``not_found`` (the read position is at the end), -1 when unknown."""

    client_id: str
    group: str
    topic: str
    partition_key: str
    outcome: str
    errcode: int
    messages: int
    bytes: int
    duration: float
    lag_messages: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitted(Event):
    """A confirm: ``consumed`` false rolls the batch back; ``offset`` is the committed offset (-1 unknown),
    ``errcode`` 200 on success (-1 for a transport failure)."""

    client_id: str
    group: str
    topic: str
    partition_key: str
    consumed: bool
    offset: int
    errcode: int


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatFailed(Event):
    """A consumer's heartbeat failed; ``target`` is ``master`` or ``broker:<address>``, ``consecutive`` the
    failures in a row to it."""

    client_id: str
    group: str
    target: str
    error: str
    consecutive: int


@dataclass(frozen=True, slots=True)
class ConsumerClosed(Event):
    """close() finished; ``released`` partitions were unregistered."""

    client_id: str
    group: str
    released: int
