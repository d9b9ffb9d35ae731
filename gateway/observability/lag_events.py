"""Events of the group lag read from TubeMQ's own offsets (published by
:class:`gateway.service.group_lag.LagMonitor`, turned into gauges by
:class:`gateway.observability.metrics_lag.GroupLagMetrics`), and the one definition of lag the metrics, the
lag endpoint and the console's overview share: a partition's lag is the index entries between a position
and the end of its store (:func:`lag_entries`), a topic's the sum over its stores of each store's slowest
partition (:func:`topic_lags`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.tubemq.consumer import INDEX_ENTRY_SIZE

__all__ = [
    "INDEX_ENTRY_BYTES",
    "GroupLagGone",
    "GroupLagRead",
    "PartitionLag",
    "lag_entries",
    "store_of",
    "topic_lags",
]

#: TubeMQ numbers a broker's partitions store * 10000 + index within the store
_STORE_PARTITION_BASE = 10000
#: bytes of one index entry: offsets count index bytes, lags count entries (messages)
INDEX_ENTRY_BYTES = INDEX_ENTRY_SIZE


def lag_entries(position: int, end: int) -> int | None:
    """Index entries (messages) from ``position`` to ``end`` (index offsets); None when either is unknown
    (negative)."""
    if position < 0 or end < 0:
        return None
    return max(0, end - position) // INDEX_ENTRY_BYTES


def store_of(partition_id: int) -> int:
    """The store (within its broker) that partition ``partition_id`` lives in."""
    return partition_id // _STORE_PARTITION_BASE


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Messages a group has not consumed in partition ``partition_id`` of ``topic`` on broker ``broker_id``
    (the store's index entries past the group's committed offset, as the broker reports them)."""

    topic: str
    broker_id: int
    partition_id: int
    lag_messages: int
    #: the group's committed index offset and the store's end, as the broker reported them (-1: unknown)
    committed: int = -1
    end: int = -1


@dataclass(frozen=True, slots=True)
class GroupLagRead:
    """One reading of ``group``'s offsets on every broker; ``consumers``: the clients the master lists in
    the group (any client, not only this gateway's), -1 when the master could not tell."""

    group: str
    partitions: tuple[PartitionLag, ...]
    consumers: int


@dataclass(frozen=True, slots=True)
class GroupLagGone:
    """``group`` holds no offset on any broker any more (or is no longer watched): its series go."""

    group: str


def topic_lags(partitions: Iterable[PartitionLag]) -> dict[str, int]:
    """Each topic's lag in messages: the sum over its stores of the store's slowest partition. Partitions of
    one store share its index, so each partition's figure counts every entry of the store past its own read
    position; the slowest one's figure is the store's unconsumed entries (exact when the store has one
    partition, else at most the unconsumed messages of its partitions together)."""
    stores: dict[tuple[str, int, int], int] = defaultdict(int)
    for p in partitions:
        key = (p.topic, p.broker_id, store_of(p.partition_id))
        stores[key] = max(stores[key], p.lag_messages)
    totals: dict[str, int] = defaultdict(int)
    for (topic, _, _), lag in stores.items():
        totals[topic] += lag
    return dict(totals)
