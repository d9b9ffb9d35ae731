"""Shared pieces of the consumer service, REST and forwarding tests: an embedded cluster with fast timings,
a producer to publish with, and helpers that poll until a condition holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import parse_topic_specs
from gateway.service.consumers import ConsumerService
from gateway.tubemq.consumer_config import ConsumerConfig
from gateway.tubemq.pool import ConnectionPool
from gateway.tubemq.producer import Producer, ProducerConfig
from gateway.tubemq.producer_send import SendResult

#: ``demo``: 8 partitions sharing one store; ``solo``: one partition (dense offsets)
TOPICS = "demo:8,solo:1"

FAST_CONSUMER = ConsumerConfig(
    heartbeat_interval=0.1,
    broker_heartbeat_interval=0.3,
    rebalance_confirm_wait=0.3,
    not_found_wait=0.05,
    register_retry_wait=0.1,
    broker_register_retry_wait=0.1,
    close_rebalance_wait=2.0,
    rpc_timeout=3.0,
)


@dataclass
class Env:
    cluster: EmbeddedCluster
    pool: ConnectionPool
    producer: Producer
    services: list[ConsumerService] = field(default_factory=list)

    async def service(self, **options: Any) -> ConsumerService:
        """A started ConsumerService with fast timings; closed by the fixture."""
        options.setdefault("advertised_url", "http://127.0.0.1:9")
        options.setdefault("consumer_config", FAST_CONSUMER)
        options.setdefault("assignment_wait", 5.0)
        service = ConsumerService(self.cluster.master_addresses, self.pool, **options)
        await service.start()
        self.services.append(service)
        return service

    async def publish(
        self, topic: str, bodies: list[bytes], *, stream_id: str | None = None, partition: int | None = None
    ) -> list[SendResult]:
        await self.producer.publish(topic)
        return [
            await self.producer.send(topic, body, stream_id=stream_id, partition=partition) for body in bodies
        ]


@asynccontextmanager
async def environment(topics: str = TOPICS) -> AsyncIterator[Env]:
    async with EmbeddedCluster(parse_topic_specs(topics), balance_period=0.1) as cluster:
        pool = ConnectionPool()
        producer = Producer(
            cluster.master_addresses, pool=pool, config=ProducerConfig(heartbeat_interval=0.5)
        )
        await producer.start()
        env = Env(cluster, pool, producer)
        try:
            yield env
        finally:
            for service in env.services:
                await service.close()
            await producer.close()
            await pool.close()


async def eventually(
    check: Callable[[], Awaitable[bool]],
    timeout: float = 10.0,  # noqa: ASYNC109 - bounds the retries, not one call
    what: str = "condition",
) -> None:
    """Run ``check`` until it returns True; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(0.02)


def bodies(prefix: str, count: int, size: int = 0) -> list[bytes]:
    """Distinct bodies ``prefix-i``, padded with dots to ``size`` bytes when given."""
    return [f"{prefix}-{i}".encode().ljust(size, b".") for i in range(count)]
