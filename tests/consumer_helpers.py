"""Shared pieces of the consumer tests: fast timings, a cluster fixture body, publishing, draining."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer import Consumer
from gateway.tubemq.consumer_batch import ConsumedBatch
from gateway.tubemq.consumer_config import ConsumerConfig
from gateway.tubemq.payload import encode_payload
from gateway.tubemq.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.pool import ConnectionPool
from gateway.tubemq.producer_requests import build_send_request
from gateway.tubemq.rpc import Method

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
    topics: Iterable[TopicSpec], *, brokers: int = 1, consumer_timeout: float = 30.0, standby: bool = False
) -> AsyncIterator[EmbeddedCluster]:
    """An embedded cluster on loopback whose master balances every 0.1 s."""
    cluster = EmbeddedCluster(
        list(topics),
        brokers=brokers,
        balance_period=0.1,
        consumer_timeout=consumer_timeout,
        standby_master=standby,
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
    for i, body in enumerate(bodies):
        data, flag = encode_payload(body, None, msg_type, "202401311530" if msg_type else None)
        request = build_send_request(
            "test-producer",
            topic,
            pids[i % len(pids)],
            data,
            flag,
            sent_addr=0,
            visit_token=-2,
            msg_type=msg_type,
        )
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
