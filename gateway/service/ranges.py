"""Offset ranges over the gateway: a topic's partitions with their offset bounds, and exact range reads.

For clients that cannot reach the brokers themselves (e.g. Spark executors, ``option("gateway", ...)``). It
wraps :func:`gateway.tubemq.ranges.partitions.discover_partitions` and
:class:`gateway.tubemq.ranges.reader.RangeReader`: a page of a range read ends at a broker batch boundary,
``next``, so that the client continues exactly there (``next == to`` when the range is done).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from gateway.service.access import ALLOW_ALL, DESCRIBE_CLUSTER, READ_RANGES, AccessPolicy
from gateway.service.core_errors import Doing, service_error
from gateway.service.errors import InvalidInput, NotFound
from gateway.service.names import validate_topic
from gateway.service.principal import current_principal
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer import ConsumedMessage
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.net import ConnectionPool, MasterClient
from gateway.tubemq.ranges import OffsetBounds, RangeReader, TopicLayout, discover_partitions
from gateway.tubemq.wire import Partition, consumer_id, local_ipv4

__all__ = ["PartitionOffsets", "RangePage", "RangeService"]


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    partition: Partition
    bounds: OffsetBounds
    broker: str | None  # host:port; None for a caller not allowed describe_cluster


@dataclass(frozen=True, slots=True)
class RangePage:
    """Messages of ``[start, next)``; ``next`` is where to continue (``== end`` when the range is done)."""

    start: int
    end: int
    next: int
    messages: list[ConsumedMessage]


class RangeService:
    """Partition offsets and range reads for one gateway process. Times are seconds."""

    def __init__(
        self,
        pool: ConnectionPool,
        masters: Sequence[NodeAddress],
        *,
        group_prefix: str = "tubemq_gateway_range",
        rpc_timeout: float = 10.0,
        access: AccessPolicy = ALLOW_ALL,
    ) -> None:
        self._access = access
        self._master = MasterClient(masters, pool, timeout=rpc_timeout)
        self._reader = RangeReader(pool, group_prefix=group_prefix, rpc_timeout=rpc_timeout)
        self._group = f"{group_prefix}_meta_{secrets.token_hex(4)}"
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<RangeService {self._master!r} {self._reader!r}>"

    async def _layout(self, topic: str) -> TopicLayout:
        async with self._lock, _mapped(topic):
            layout = await discover_partitions(
                self._master,
                topic,
                client_id=consumer_id(self._group),
                group=self._group,
                host_name=local_ipv4(),
            )
        self._reader.visit_token = layout.visit_token
        return layout

    async def partitions(self, topic: str) -> list[PartitionOffsets]:
        """Every subscribable partition of ``topic`` with its store's bounds."""
        validate_topic(topic)
        principal = current_principal()
        self._access.check(principal, READ_RANGES, topic=topic)
        addresses = self._access.allows(principal, DESCRIBE_CLUSTER)
        layout = await self._layout(topic)
        if not layout.partitions:
            raise NotFound(
                f"topic {topic!r} has no subscribable partition now", field="topic", resource_name=topic
            )
        async with _mapped(topic):
            found = await asyncio.gather(*(self._reader.bounds(p) for p in layout.partitions))
        return [
            PartitionOffsets(p, b, str(p.broker.address) if addresses else None)
            for p, b in zip(layout.partitions, found, strict=True)
        ]

    async def read(self, topic: str, key: str, start: int, end: int, max_messages: int) -> RangePage:
        """Read ``[start, end)`` of partition ``key``, stopping after the batch that reaches
        ``max_messages``."""
        validate_topic(topic)
        self._access.check(current_principal(), READ_RANGES, topic=topic)
        if start < 0 or end < start:
            raise InvalidInput("need 0 <= from <= to", field="from")
        if max_messages < 1:
            raise InvalidInput("limit must be >= 1", field="limit")
        partition = (await self._layout(topic)).by_key().get(key)
        if partition is None:
            raise NotFound(
                f"topic {topic!r} has no partition {key!r} now", field="partitionKey", resource_name=key
            )
        messages: list[ConsumedMessage] = []
        position = start
        async with _mapped(topic), contextlib.aclosing(self._reader.read(partition, start, end)) as batches:
            async for batch in batches:
                messages.extend(batch.messages)
                position = batch.end
                if len(messages) >= max_messages:
                    break
            else:
                position = end
        return RangePage(start, end, position, messages)


@contextlib.asynccontextmanager
async def _mapped(topic: str) -> AsyncIterator[None]:
    """Client-core errors of reading ``topic`` as service errors (:mod:`gateway.service.core_errors`)."""
    try:
        yield
    except TubeMQError as exc:
        raise service_error(exc, Doing.READ, topic=topic) from exc
