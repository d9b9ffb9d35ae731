"""Events of the group lag read from TubeMQ's own offsets (published by
:class:`gateway.service.group_lag.LagMonitor`, turned into gauges by
:class:`gateway.observability.metrics_lag.GroupLagMetrics`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupLagGone", "GroupLagRead", "PartitionLag"]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Messages a group has not consumed in partition ``partition_id`` of ``topic`` on broker ``broker_id``
    (the store's index entries past the group's committed offset, as the broker reports them)."""

    topic: str
    broker_id: int
    partition_id: int
    lag_messages: int


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
