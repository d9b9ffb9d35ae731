"""Whether a consumer's topics are in a broker outage: what an empty poll answers while partitions are away.

A consumer instance that held partitions and holds none now, whose poll found nothing, is either one member
too many in its group (the others hold every partition: an empty 200 is right) or in an outage: a broker
stopped cleanly makes the master drop its partitions from every group while the topic stays deployed on it.
The master's partition metadata tells the two apart (``topicMetaInfo``: each broker the topic is deployed
on, with ``statusId`` 0 while its partitions cannot be subscribed, the answer the master gives any
client-balance consumer): when no subscribed topic has a subscribable partition and each lists an offline
broker, the poll is answered 503 with Retry-After, like a publish to such a topic. The answer is cached
``ttl`` seconds per topic, so an outage costs the master a few calls per topic, not one per poll.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Collection, Sequence

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.net import ConnectionPool, MasterClient
from gateway.tubemq.ranges import discover_partitions
from gateway.tubemq.wire import consumer_id, local_ipv4

__all__ = ["PartitionOutages"]


class PartitionOutages:
    """The outage check of the module docstring, for one gateway process."""

    def __init__(
        self,
        pool: ConnectionPool,
        masters: Sequence[NodeAddress],
        *,
        ttl: float = 5.0,
        rpc_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._master = MasterClient(masters, pool, timeout=rpc_timeout)
        self._group = f"tubemq_gateway_outage_{secrets.token_hex(4)}"
        self._ttl = ttl
        self._clock = clock
        self._known: dict[str, tuple[float, tuple[int, ...]]] = {}
        self._lock = asyncio.Lock()

    async def _offline(self, topic: str) -> tuple[int, ...]:
        """The offline brokers of ``topic`` when it has no subscribable partition, else ()."""
        now = self._clock()
        cached = self._known.get(topic)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        async with self._lock:
            try:
                layout = await discover_partitions(
                    self._master,
                    topic,
                    client_id=consumer_id(self._group),
                    group=self._group,
                    host_name=local_ipv4(),
                )
                away = () if layout.partitions else layout.offline_brokers
            except TubeMQError:
                away = ()  # the master cannot say: not known to be an outage
            self._known[topic] = (self._clock(), away)
            return away

    async def away(self, topics: Collection[str]) -> dict[str, tuple[int, ...]]:
        """Topic -> offline brokers when every topic of ``topics`` is in an outage; else empty."""
        found: dict[str, tuple[int, ...]] = {}
        for topic in sorted(topics):
            offline = await self._offline(topic)
            if not offline:
                return {}
            found[topic] = offline
        return found
