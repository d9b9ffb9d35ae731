"""Shared pieces of the consumer tests: for the core's Consumer (``FAST`` timings, ``running_cluster``,
``publish`` straight to a broker, ``drain``), and for the consumer service, REST and forwarding tests (an
embedded cluster with fast timings and a producer: ``environment``), and a pool that records what it sends
(``RecordingPool``). Waiting is ``waiting.eventually``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from google.protobuf.message import Message

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.listen import tcp_server
from gateway.embedded.topics import TopicSpec, parse_topic_specs
from gateway.service.consumers import ConsumerService
from gateway.service.delivered import DeliveredMessage
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.batch import ConsumedBatch
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import ConsumerConfig
from gateway.tubemq.net import MemoryNetwork
from gateway.tubemq.net.outcomes import AnswersDecoder
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.send import SendResult
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire.payload import encode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import Method

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
        await self.producer.register_topic(topic)
        return [
            await self.producer.send(topic, body, stream_id=stream_id, partition=partition) for body in bodies
        ]


@asynccontextmanager
async def environment(topics: str = TOPICS, **cluster_options: Any) -> AsyncIterator[Env]:
    """``cluster_options`` go to the cluster (e.g. ``id_clock``)."""
    async with EmbeddedCluster(parse_topic_specs(topics), balance_period=0.1, **cluster_options) as cluster:
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


def values(messages: Iterable[DeliveredMessage]) -> list[bytes]:
    """The bodies of delivered messages, in order."""
    return [m.message.body for m in messages]


def bodies(prefix: str, count: int, size: int = 0) -> list[bytes]:
    """Distinct bodies ``prefix-i``, padded with dots to ``size`` bytes when given."""
    return [f"{prefix}-{i}".encode().ljust(size, b".") for i in range(count)]


# --- the core consumer tests: a cluster, raw sends to a broker, polling a Consumer ---------------------

FAST = ConsumerConfig(
    heartbeat_interval=0.1,
    broker_heartbeat_interval=0.2,
    rpc_timeout=2.0,
    register_retry_wait=0.05,
    broker_register_retry_wait=0.05,
    rebalance_confirm_wait=0.3,
    close_rebalance_wait=1.0,
    not_found_wait=0.02,
    forbidden_wait=0.05,
    moved_wait=0.02,
    unavailable_wait=0.02,
    error_wait=0.02,
    transport_error_wait=0.02,
    heartbeat_interval_after_fail=0.5,
)


def fast(**changes: Any) -> ConsumerConfig:
    return replace(FAST, **changes)


@asynccontextmanager
async def running_cluster(
    topics: Iterable[TopicSpec],
    *,
    brokers: int = 1,
    consumer_timeout: float = 30.0,
    standby: bool = False,
    network: MemoryNetwork | None = None,
) -> AsyncIterator[EmbeddedCluster]:
    """An embedded cluster whose master balances every 0.1 s: on ``network`` when given, else on loopback."""
    cluster = EmbeddedCluster(
        list(topics),
        brokers=brokers,
        balance_period=0.1,
        consumer_timeout=consumer_timeout,
        standby_master=standby,
        start_server=network.start_server if network is not None else tcp_server,
    )
    async with cluster:
        yield cluster


async def publish(
    pool: ConnectionPool,
    cluster: EmbeddedCluster,
    topic: str,
    bodies: Iterable[bytes],
    *,
    partition_ids: Iterable[int] | None = None,
    broker_id: int = 1,
    msg_type: str | None = None,
) -> list[int]:
    """Send each body to the next partition (round-robin); returns the append offsets."""
    broker = cluster.broker(broker_id)
    pids = list(partition_ids) if partition_ids is not None else broker.topics[topic].partition_ids()
    offsets = []
    template = SendRequestTemplate("test-producer", topic, sent_addr=0, visit_token=-2)
    for i, body in enumerate(bodies):
        data, flag = encode_payload(body, None, msg_type, "202401311530" if msg_type else None)
        request = template.encode(pids[i % len(pids)], data, flag, msg_type, None)
        answer = await pool.request(broker.address, Method.SEND_MESSAGE, request, 2.0)
        assert isinstance(answer, broker_pb.SendMessageResponseB2P)
        assert answer.errCode == 200, answer.errMsg
        offsets.append(answer.appendOffset)
    return offsets


async def drain(
    consumer: Consumer, want: int, *, seconds: float = 5.0, confirm: bool = True
) -> list[ConsumedBatch]:
    """Poll (and confirm) until ``want`` messages arrived or ``seconds`` passed."""
    batches: list[ConsumedBatch] = []
    got = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while got < want and loop.time() < deadline:
        batch = await consumer.poll(max(0.01, deadline - loop.time()))
        if batch is None:
            continue
        batches.append(batch)
        got += len(batch.messages)
        if confirm:
            await consumer.confirm(batch.confirm_context, consumed=True)
    return batches


def bodies_of(batches: Iterable[ConsumedBatch]) -> list[bytes]:
    return [m.body for b in batches for m in b.messages]


class RecordingPool(ConnectionPool):
    """A real pool on ``network`` that keeps a copy of every request message it sends, in order (``sent``:
    method and message; the producer's pre-encoded SendMessage frames are bytes and not kept), and the most
    GetMessage requests it had out at once (``most_fetching``)."""

    def __init__(self, network: MemoryNetwork) -> None:
        super().__init__(connector=network.create_connection)
        self.sent: list[tuple[int, Message]] = []
        self.fetching = 0
        self.most_fetching = 0

    async def request_decoded(
        self,
        address: NodeAddress,
        method: int,
        request: Message | bytes,
        timeout: float,  # noqa: ASYNC109 - the pool API
        service: int | None = None,
        decode: AnswersDecoder | None = None,
    ) -> object:
        """Every request of the pool (``request`` too) comes through here."""
        if isinstance(request, Message):
            copy = type(request)()
            copy.CopyFrom(request)
            self.sent.append((method, copy))
        if method != Method.GET_MESSAGES:
            return await super().request_decoded(address, method, request, timeout, service, decode)
        self.fetching += 1
        self.most_fetching = max(self.most_fetching, self.fetching)
        try:
            return await super().request_decoded(address, method, request, timeout, service, decode)
        finally:
            self.fetching -= 1
