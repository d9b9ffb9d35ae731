"""What the gateway holds, seen by one caller: topics with their brokers, consumer instances with their lag.

:func:`topic_overview` lists the topics this gateway knows (those it publishes to, consumes, or was told of,
like the embedded cluster's) that the caller may ``describe``, with their partitions as the producer routes
them, the publish counters the adapter read from the gateway's own metrics, and the brokers they live on with
their shielding (addresses only for a caller allowed ``describe_cluster``).

The web console's groups page (and any client) lists the consumer instances of this process through
:func:`visible_instances`. A caller sees the instances it created; a caller allowed ``admin`` (operators)
sees every instance. In open mode every caller is allowed everything, so every instance is listed.

:func:`visible_group_lags` lists the lag read from TubeMQ's own offsets (the broker's committed offsets of the
groups this gateway has served, :class:`~gateway.service.group_lag.LagMonitor`), which stays true when the
consumers leave: a group's partitions of the topics the caller may ``consume`` with that group (all with
``admin``).

Lag has one definition everywhere (:func:`~gateway.observability.lag_events.lag_entries` per partition,
:func:`~gateway.observability.lag_events.topic_lags` per topic, as in the metrics and the lag endpoint): the
index entries (28 bytes each) from the group's read position to the end of the partition's store. For an
instance's partition the positions are the newest known: the later of what the broker said at the
instance's last fetch (``currOffset``, ``maxOffset``) and what the last reading of TubeMQ's offsets says
(the group's committed offset and the store's end), so an idle instance's end still moves, and when nothing
moves an instance and its group's reading show the same lag. Partitions of a store share one index, so
each partition's figure counts the store's entries past its own position: a store counts once in a total,
with its slowest partition. -1 offsets (nothing known yet) give no lag (None).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.observability.lag_events import GroupLagRead, lag_entries, store_of, topic_lags
from gateway.observability.lag_events import PartitionLag as ReadPartition
from gateway.service.access import ADMIN, CONSUME, DESCRIBE, DESCRIBE_CLUSTER, AccessPolicy
from gateway.service.consumers import ConsumerService
from gateway.service.group_lag import LagMonitor
from gateway.service.principal import current_principal
from gateway.tubemq.consumer import AssignedPartition
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.net import BreakerState
from gateway.tubemq.producer import Producer

__all__ = [
    "BrokerOverview",
    "GroupLagOverview",
    "InstanceOverview",
    "PartitionLag",
    "PublishCounts",
    "TopicOverview",
    "TopicsOverview",
    "partition_lag",
    "route_topics",
    "store_key",
    "topic_overview",
    "visible_group_lags",
    "visible_instances",
]


@dataclass(frozen=True, slots=True)
class PublishCounts:
    """A topic's publish counters since the gateway started (every worker of the replica)."""

    messages: int = 0
    bytes: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class TopicOverview:
    topic: str
    partitions: int | None  # None: not routed by this process yet (open the topic to route it)
    broker_ids: list[int]
    shielded_brokers: list[int]
    published: PublishCounts


@dataclass(frozen=True, slots=True)
class BrokerOverview:
    broker_id: int
    address: str | None  # None for a caller not allowed describe_cluster
    state: str  # closed (in use), open (shielded), half_open (on trial)
    reason: str | None
    shielded_for: float  # seconds of shielding left
    consecutive_failures: int
    sends: int
    successes: int
    partitions: int  # partitions of the listed topics on it


@dataclass(slots=True)
class TopicsOverview:
    topics: list[TopicOverview] = field(default_factory=list)
    brokers: list[BrokerOverview] = field(default_factory=list)


async def route_topics(producer: Producer, topics: Iterable[str]) -> None:
    """Route those of ``topics`` the producer has no route for yet (one master call each, at once), as
    describing a topic does, so that a listing shows their partitions before anything was published to them.
    A topic the master cannot route now stays unrouted: its listing says ``partitions`` null."""
    missing = sorted({t for t in topics if producer.topic_route(t) is None})
    if missing:
        await asyncio.gather(*(_route(producer, topic) for topic in missing))


async def _route(producer: Producer, topic: str) -> None:
    with contextlib.suppress(TubeMQError):
        await producer.register_topic(topic)


def topic_overview(
    producer: Producer,
    access: AccessPolicy,
    names: Iterable[str],
    counts: Mapping[str, PublishCounts],
) -> TopicsOverview:
    """The topics among ``names`` the caller may describe, and the brokers of their partitions."""
    principal = current_principal()
    addresses = access.allows(principal, DESCRIBE_CLUSTER)
    health = {h.broker_id: h for h in producer.broker_health()}
    shielded = {b for b, h in health.items() if h.state is not BreakerState.CLOSED}
    overview = TopicsOverview()
    broker_partitions: dict[int, int] = {}
    broker_addresses: dict[int, str] = {}
    for topic in sorted(set(names)):
        if not access.allows(principal, DESCRIBE, topic=topic):
            continue
        route = producer.topic_route(topic)
        broker_ids: list[int] = []
        if route is not None:
            for p in route.partitions:
                broker_partitions[p.broker_id] = broker_partitions.get(p.broker_id, 0) + 1
                broker_addresses[p.broker_id] = str(p.broker_address)
            broker_ids = sorted({p.broker_id for p in route.partitions})
        overview.topics.append(
            TopicOverview(
                topic=topic,
                partitions=len(route.partitions) if route is not None else None,
                broker_ids=broker_ids,
                shielded_brokers=[b for b in broker_ids if b in shielded],
                published=counts.get(topic, PublishCounts()),
            )
        )
    for broker_id in sorted(broker_partitions):
        h = health.get(broker_id)
        overview.brokers.append(
            BrokerOverview(
                broker_id=broker_id,
                address=broker_addresses[broker_id] if addresses else None,
                state=str(h.state) if h is not None else str(BreakerState.CLOSED),
                reason=str(h.reason) if h is not None and h.reason is not None else None,
                shielded_for=round(h.open_for, 3) if h is not None else 0.0,
                consecutive_failures=h.consecutive_failures if h is not None else 0,
                sends=h.sends if h is not None else 0,
                successes=h.successes if h is not None else 0,
                partitions=broker_partitions[broker_id],
            )
        )
    return overview


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One held partition with its newest known read position and end, and its lag (messages; None until
    both are known); ``store``: ``brokerId:topic:store``, shared by the partitions of one store."""

    partition: AssignedPartition
    lag: int | None
    position: int = -1
    end: int = -1
    store: str = ""
    #: just past the last message the instance delivered (committed or not), where known; else ``position``
    delivered: int = -1


@dataclass(frozen=True, slots=True)
class InstanceOverview:
    instance_id: str
    group: str
    owner: str
    topics: dict[str, list[str]]  # topic -> stream id filter (empty: every message)
    auto_commit: bool
    partitions: list[PartitionLag]
    pending: int
    buffered: int
    idle_seconds: float
    #: the instance's lag: each store once, with its slowest partition
    lag: int = 0


def store_key(topic: str, broker_id: int, partition_id: int) -> str:
    return f"{broker_id}:{topic}:{store_of(partition_id)}"


def partition_lag(
    p: AssignedPartition, read: ReadPartition | None = None, delivered: int = -1
) -> PartitionLag:
    """``p`` with its newest known read position and end (the instance's last fetch, or ``read``, the
    last reading of the group's offsets at the broker, whichever is further on) and the lag between;
    ``delivered``: just past the last message delivered and not committed (-1: none known)."""
    position, end = p.curr_offset, p.max_offset
    if read is not None:
        position, end = max(position, read.committed), max(end, read.end)
    store = store_key(p.topic, p.broker_id, p.partition_id)
    return PartitionLag(p, lag_entries(position, end), position, end, store, max(position, delivered))


def visible_instances(
    service: ConsumerService,
    access: AccessPolicy,
    now: float,
    readings: Mapping[str, tuple[float, GroupLagRead]] | None = None,
) -> list[InstanceOverview]:
    """The instances of ``service`` the current caller may see (its own; all with ``admin``), sorted by
    group then id. ``now`` is the service clock's time (for idle seconds); ``readings``: the last reading
    of each watched group's offsets (:attr:`LagMonitor.readings`)."""
    principal = current_principal()
    everything = access.allows(principal, ADMIN)
    found: list[InstanceOverview] = []
    for instance in service.held():
        if not everything and instance.owner != principal.identity:
            continue
        consumer = instance.consumer
        reading = (readings or {}).get(instance.group)
        reads = {(p.topic, p.broker_id, p.partition_id): p for p in reading[1].partitions} if reading else {}
        delivered = instance.delivered_to()
        partitions = [
            partition_lag(
                p, reads.get((p.topic, p.broker_id, p.partition_id)), delivered.get(p.partition_key, -1)
            )
            for p in consumer.assignment()
        ]
        total = topic_lags(
            ReadPartition(p.partition.topic, p.partition.broker_id, p.partition.partition_id, p.lag)
            for p in partitions
            if p.lag is not None
        )
        found.append(
            InstanceOverview(
                instance_id=instance.instance_id,
                group=instance.group,
                owner=instance.owner,
                topics={t: sorted(items) for t, items in consumer.topics.items()},
                auto_commit=instance.auto_commit,
                partitions=partitions,
                pending=instance.pending_count,
                buffered=instance.buffered_count,
                idle_seconds=max(0.0, now - instance.last_used),
                lag=sum(total.values()),
            )
        )
    found.sort(key=lambda o: (o.group, o.instance_id))
    return found


@dataclass(frozen=True, slots=True)
class GroupLagOverview:
    """A group's lag as TubeMQ's offsets tell it: ``partitions`` (sorted), each with the group's committed
    offset, the store's end and the lag in messages; ``lag`` the total (each store once);
    ``consumers`` the clients the master lists in the group (-1: unknown); ``read_at`` the reading's
    wall-clock time (seconds)."""

    group: str
    consumers: int
    read_at: float
    partitions: list[ReadPartition]
    lag: int = 0


def visible_group_lags(monitor: LagMonitor | None, access: AccessPolicy) -> list[GroupLagOverview]:
    """The last reading of every watched group, cut to the partitions the caller may see."""
    if monitor is None:
        return []
    principal = current_principal()
    everything = access.allows(principal, ADMIN)
    found: list[GroupLagOverview] = []
    for group, (read_at, reading) in sorted(monitor.readings.items()):
        partitions = sorted(
            (
                p
                for p in reading.partitions
                if everything or access.allows(principal, CONSUME, topic=p.topic, group=group)
            ),
            key=lambda p: (p.topic, p.broker_id, p.partition_id),
        )
        if partitions:
            total = sum(topic_lags(partitions).values())
            found.append(GroupLagOverview(group, reading.consumers, read_at, partitions, total))
    return found
