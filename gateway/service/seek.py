"""Seek on a live consumer instance: which partitions go where, with the rules of ``startPosition``.

``earliest`` / ``latest`` / ``time`` apply to ``partitions`` (partition keys; default every partition the
instance holds, its retry topic's excepted); ``offsets`` names each partition's broker index offset. A seek
by ``time`` finds, per partition, where its messages' ``$msgTime$`` reaches the time's minute
(:mod:`gateway.tubemq.ranges.by_time`; the time rules are :mod:`gateway.service.seek_time`), reading with
private range-read groups beside the instance's own, then moves there like a seek to offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.service.errors import InvalidInput, Unavailable
from gateway.service.names import check_text
from gateway.service.seek_time import minute_text, parse_time
from gateway.tubemq.consumer import LATEST_OFFSET
from gateway.tubemq.net import ConnectionPool
from gateway.tubemq.ranges import RangeReader, find_time_offset
from gateway.tubemq.wire import Partition

if TYPE_CHECKING:
    from gateway.service.instance import ConsumerInstance

__all__ = [
    "MAX_OFFSET",
    "SEEK_GROUP_PREFIX",
    "SeekOrder",
    "SeekPlan",
    "SeekResult",
    "offsets_for_time",
    "plan_seek",
]

MAX_OFFSET = 2**63 - 1
#: the private groups a seek by time reads with (one per partition read at once, like range reads')
SEEK_GROUP_PREFIX = "tubemq_gateway_seek"
_POSITIONS = ("earliest", "latest", "offsets", "time")


@dataclass(frozen=True, slots=True)
class SeekOrder:
    """What a caller asks a seek to do, as the adapters received it (checked by :func:`plan_seek`):
    ``position`` is ``earliest``, ``latest`` or ``time`` (for ``partitions``, default every held partition;
    ``time`` is Unix ms or RFC 3339 text, read in ``time_zone``), or ``offsets`` (partition key -> broker
    index offset)."""

    position: str
    offsets: Mapping[str, int] | None = None
    partitions: Sequence[str] | None = None
    time: object = None
    time_zone: str | None = None


@dataclass(frozen=True, slots=True)
class SeekResult:
    """Where a seek left a partition: the broker's current and end offsets."""

    partition_key: str
    curr_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class SeekPlan:
    """The partitions to move: to ``offsets`` (partition key -> offset), or, with ``minute``, each of their
    keys to where its messages reach that ``yyyyMMddHHmm``."""

    offsets: dict[str, int]
    minute: str | None = None


def plan_seek(instance: ConsumerInstance, order: SeekOrder) -> SeekPlan:
    """Check a seek's parameters (InvalidInput naming the field) and say what moves where."""
    position, offsets, partitions = order.position, order.offsets, order.partitions
    time, time_zone = order.time, order.time_zone
    if position not in _POSITIONS:
        raise InvalidInput(f"position {position!r} is not one of {', '.join(_POSITIONS)}", field="position")
    if position != "time" and (time is not None or time_zone is not None):
        raise InvalidInput("time and timeZone are only used with position 'time'", field="time")
    if position == "offsets":
        if not offsets:
            raise InvalidInput("position 'offsets' needs offsets {partitionKey: offset}", field="offsets")
        if partitions:
            raise InvalidInput("partitions are only used with earliest, latest or time", field="partitions")
        for key, offset in offsets.items():
            check_text(key, "offsets", 300)
            if not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
                raise InvalidInput(f"offset of {key[:80]!r} must be 0-{MAX_OFFSET}", field="offsets")
        return SeekPlan(dict(offsets))
    if offsets:
        raise InvalidInput("offsets are only used with position 'offsets'", field="offsets")
    minute = None
    if position == "time":
        if time is None:
            raise InvalidInput("position 'time' needs time (Unix ms or RFC 3339 text)", field="time")
        minute = minute_text(parse_time(time), time_zone)
    retry = instance.policy.retry_topic
    keys = (
        list(partitions)
        if partitions
        else [p.partition_key for p in instance.consumer.assignment() if p.topic != retry]
    )
    for key in keys:
        check_text(key, "partitions", 300)
    target = 0 if position == "earliest" else LATEST_OFFSET
    return SeekPlan(dict.fromkeys(keys, target), minute)


async def offsets_for_time(
    instance: ConsumerInstance, plan: SeekPlan, pool: ConnectionPool, rpc_timeout: float
) -> dict[str, int]:
    """Per partition of ``plan``, the offset where its messages reach ``plan.minute`` (only those the
    instance's stream id filter lets through count); the whole search is bounded by ``2 * rpc_timeout``."""
    assert plan.minute is not None
    consumer = instance.consumer
    held: dict[str, Partition] = {}
    for key in plan.offsets:
        partition = consumer.held_partition(key)
        if partition is None or partition.topic == instance.policy.retry_topic:
            raise InvalidInput(
                f"this instance does not hold partition {key[:80]!r} (its partitions are listed by GET on "
                "the instance; the retry topic's cannot be moved)",
                field="partitions",
            )
        held[key] = partition
    reader = RangeReader(
        pool, group_prefix=SEEK_GROUP_PREFIX, visit_token=consumer.visit_token, rpc_timeout=rpc_timeout
    )
    filters = consumer.topics
    minute = plan.minute
    try:
        async with asyncio.timeout(2 * rpc_timeout):
            found = await asyncio.gather(
                *(
                    find_time_offset(reader, p, minute, stream_ids=filters.get(p.topic, ()))
                    for p in held.values()
                )
            )
    except TimeoutError:
        raise Unavailable(
            f"finding where the partitions reach {minute} took over {2 * rpc_timeout:g} s; seek again",
            retry_after=1.0,
        ) from None
    return {key: result.offset for key, result in zip(held, found, strict=True)}
