"""A consumer group's lag as TubeMQ itself keeps it (``GET /v1/consumers/{group}/lag``, gRPC ``GetGroupLag``):
right whether or not anyone consumes, since it comes from the brokers' committed offsets
(:class:`~gateway.service.group_offsets.GroupOffsetsReader`), not from this gateway's consumers. Readings are
shared between requests for a short while (:class:`~gateway.service.group_lag_reads.GroupLagReads`).

While no broker holds an offset of a group that exists (this gateway holds instances in it, the master lists
consumers in it, or this replica watches it): the real broker keeps a group's offsets in memory and writes
what its web API shows every few seconds, so right after a group's first commit it has none to show. The
answer is then the gateway's own view, ``source`` ``gateway``: the read position and end of each partition
its instances here hold (nothing when they are on another worker or replica), never a 404. A group nobody
knows is a 404.

Per partition: the committed offset, the end, the lag in messages (index entries, 28 bytes each) and, where
it can be known, the ``msgTime`` of the oldest unconsumed message (a range read of its first entry: the
time its producer stamped, minute precision; TubeMQ keeps no store time a client can read). Per topic: the
sum over its stores of the store's slowest partition (:func:`~gateway.observability.lag_events.topic_lags`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass

from gateway.observability.lag_events import PartitionLag, topic_lags
from gateway.service.access import CONSUME, READ_RANGES, AccessPolicy
from gateway.service.consumers import ConsumerService
from gateway.service.errors import NotFound, ServiceError, Unavailable
from gateway.service.group_lag_reads import GroupLagReads
from gateway.service.group_offsets import OffsetsUnavailable, PartitionOffsets
from gateway.service.names import validate_group
from gateway.service.principal import current_principal
from gateway.service.ranges import RangeService

__all__ = [
    "GATEWAY",
    "TUBEMQ",
    "GroupLagView",
    "PartitionLagView",
    "TopicLagView",
    "held_offsets",
    "read_group_lag",
]

#: partitions whose oldest unconsumed message is looked at (one range read each), and how many at once
MAX_TIMED_PARTITIONS = 64
_TIME_READS = 8


@dataclass(frozen=True, slots=True)
class PartitionLagView:
    partition_key: str
    topic: str
    broker_id: int
    partition_id: int
    committed_offset: int
    end_offset: int
    lag: int
    oldest_msg_time: str | None


@dataclass(frozen=True, slots=True)
class TopicLagView:
    topic: str
    lag: int
    partitions: list[PartitionLagView]


#: where a lag answer's figures come from: the brokers' committed offsets, or this gateway's instances
TUBEMQ, GATEWAY = "tubemq", "gateway"


@dataclass(frozen=True, slots=True)
class GroupLagView:
    """``consumers``: the clients the master lists in the group (any client), None when it could not tell;
    ``source``: :data:`TUBEMQ` or :data:`GATEWAY` (see the module docstring)."""

    group: str
    consumers: int | None
    lag: int
    topics: list[TopicLagView]
    source: str = TUBEMQ


async def read_group_lag(
    reads: GroupLagReads | None,
    group: str,
    *,
    access: AccessPolicy,
    ranges: RangeService | None = None,
    consumers: ConsumerService | None = None,
    watched: Collection[str] = (),
) -> GroupLagView:
    """The group's lag now; the gateway's own view (``consumers``: this process's instances) while no
    broker holds an offset of a group that exists; NotFound for a group nobody knows (or whose topics the
    caller may not consume), Unavailable when TubeMQ's web API cannot be read. ``watched``: the groups
    this replica watches."""
    validate_group(group)
    principal = current_principal()
    if access.enforcing:
        access.check(principal, CONSUME, group=group)
    if reads is None:
        raise Unavailable(
            "the group lag is read from TubeMQ's web API, which this gateway does not reach: set "
            "tubemq.master_web_port to the master's web port",
            retry_after=30.0,
        )
    try:
        reading = await reads.read(group)
    except OffsetsUnavailable as exc:
        raise Unavailable(
            f"TubeMQ's web API could not be read ({exc}); retry, and check that the master's and brokers' "
            "web ports are reachable from the gateway",
            retry_after=5.0,
        ) from None
    rows = list(reading.rows)
    source = TUBEMQ
    if not rows:
        rows = held_offsets(consumers, group)
        source = GATEWAY
    exists = bool(rows) or (reading.consumers or 0) > 0 or group in watched
    if access.enforcing:
        rows = [r for r in rows if access.allows(principal, CONSUME, topic=r.topic, group=group)]
    if not exists or (source == TUBEMQ and not rows):
        raise NotFound(
            f"consumer group {group!r} holds no offset on any broker: it never committed, its offsets "
            "were removed, or the topics it consumes are not yours to see",
            field="group",
            resource_name=group,
        )
    rows.sort(key=lambda r: (r.topic, r.broker_id, r.partition_id))
    timed = ranges is not None and (not access.enforcing or access.allows(principal, READ_RANGES))
    if timed and ranges is not None:
        if access.enforcing:
            timed_rows = [r for r in rows if access.allows(principal, READ_RANGES, topic=r.topic)]
        else:
            timed_rows = rows
        times = await _oldest_times(reads, ranges, group, timed_rows)
    else:
        times = {}
    totals = topic_lags(PartitionLag(r.topic, r.broker_id, r.partition_id, r.lag_messages) for r in rows)
    topics: dict[str, list[PartitionLagView]] = {}
    for r in rows:
        key = f"{r.broker_id}:{r.topic}:{r.partition_id}"
        topics.setdefault(r.topic, []).append(
            PartitionLagView(
                key,
                r.topic,
                r.broker_id,
                r.partition_id,
                r.committed,
                r.max_offset,
                r.lag_messages,
                times.get(key),
            )
        )
    views = [TopicLagView(topic, totals[topic], parts) for topic, parts in topics.items()]
    return GroupLagView(group, reading.consumers, sum(totals.values()), views, source)


def held_offsets(consumers: ConsumerService | None, group: str) -> list[PartitionOffsets]:
    """The read position and end of each partition this process's instances of ``group`` hold (those
    the broker told both of)."""
    if consumers is None:
        return []
    found: dict[tuple[str, int, int], PartitionOffsets] = {}
    for instance in consumers.held():
        if instance.group != group:
            continue
        for p in instance.consumer.assignment():
            if p.curr_offset >= 0 and p.max_offset >= 0:
                key = (p.topic, p.broker_id, p.partition_id)
                found[key] = PartitionOffsets(
                    group, p.topic, p.broker_id, p.partition_id, p.curr_offset, p.max_offset
                )
    return list(found.values())


async def _oldest_times(
    reads: GroupLagReads, ranges: RangeService, group: str, rows: list[PartitionOffsets]
) -> dict[str, str | None]:
    """The msgTime of each lagging partition's oldest unconsumed message (at most MAX_TIMED_PARTITIONS),
    each read once per committed offset (:meth:`GroupLagReads.oldest_time`)."""
    gate = asyncio.Semaphore(_TIME_READS)
    lagging = [r for r in rows if r.lag_messages > 0][:MAX_TIMED_PARTITIONS]

    async def one(r: PartitionOffsets) -> tuple[str, str | None]:
        key = f"{r.broker_id}:{r.topic}:{r.partition_id}"

        async def read() -> str | None:
            async with gate:
                page = await ranges.read(r.topic, key, r.committed, r.max_offset, 1)
            return page.messages[0].msg_time if page.messages else None

        try:
            return key, await reads.oldest_time(group, key, r.committed, read)
        except ServiceError:
            return key, None

    return dict(await asyncio.gather(*(one(r) for r in lagging)))
