"""Publish rates hold per replica with ``serve --workers 2`` (real processes, gRPC on loopback, the embedded
cluster), whatever workers a client's connections reach (issue #26):

* one gRPC channel is one connection, so one worker: the client gets the replica's rate. Before, each worker
  enforced half of it, and a client whose connections had all reached one worker was refused
  RESOURCE_EXHAUSTED (RATE_LIMITED) at half its rate: the bench's 94 refused calls of 6,090 (61k msg/s on
  eight connections that had all reached one of two workers, against a replica limit of 100k);
* a client spread over both workers is still held to the replica's rate (no worker gives it a rate of its
  own): the workers share what it spent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.workers_support import WorkerGateway, start_workers

RATE = 200  # messages per second of the replica
BURST = 10  # seconds: a full bucket is 2000 messages, half of it 1000
BATCH = pb.PublishRequest(topic="demo", messages=[pb.Message(value=b"m")] * 100)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    env = {
        "TUBEMQ_GATEWAY_RATE_LIMITS__PUBLISH_MESSAGES_PER_SECOND": str(RATE),
        "TUBEMQ_GATEWAY_RATE_LIMITS__BURST_SECONDS": str(BURST),
    }
    gateway = start_workers(tmp_path_factory.mktemp("rates"), 2, env=env)
    try:
        yield gateway
    finally:
        gateway.stop()


async def publish(stub: gateway_pb2_grpc.GatewayServiceStub, calls: int) -> tuple[int, int]:
    """``calls`` Publish calls of 100 messages one after another: (admitted, refused RATE_LIMITED)."""
    admitted = refused = 0
    for _ in range(calls):
        try:
            await stub.Publish(BATCH)
            admitted += 1
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
            refused += 1
    return admitted, refused


async def channels_on_both_workers(port: int, each: int) -> list[grpc.aio.Channel]:
    """Channels (each one connection) until ``each`` of them reach each of the two workers: the worker is
    told by the prefix of the request id it makes (one per process). The kernel spreads connections
    unevenly: eight fresh ones all reach one worker now and then."""
    by_worker: dict[str, list[grpc.aio.Channel]] = {}
    spare: list[grpc.aio.Channel] = []
    for _ in range(64):
        # a subchannel pool of its own: channels to one address share one connection otherwise
        channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        call = gateway_pb2_grpc.GatewayServiceStub(channel).GetTopic(pb.GetTopicRequest(topic="demo"))
        await call
        request_id = dict(await call.trailing_metadata())["x-request-id"]
        reached = by_worker.setdefault(request_id[:16], [])
        (reached if len(reached) < each else spare).append(channel)
        if len(by_worker) == 2 and all(len(c) == each for c in by_worker.values()):
            break
    for channel in spare:
        await channel.close()
    assert len(by_worker) == 2, "64 connections all reached one worker"
    return [c for reached in by_worker.values() for c in reached]


async def test_one_channel_gets_the_replicas_rate(served: WorkerGateway) -> None:
    # 1800 messages at once: within the replica's bucket (2000), above half of it (1000, plus half the
    # rate for as long as the calls take: these take far less than the 8 s that would need)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        assert await publish(gateway_pb2_grpc.GatewayServiceStub(channel), 18) == (18, 0)
    # wait for the bucket to be full again before the next test: 1800 / 200 per second
    await asyncio.sleep(1800 / RATE + 0.5)


async def test_channels_on_both_workers_share_the_replicas_rate(served: WorkerGateway) -> None:
    channels = await channels_on_both_workers(served.grpc_port, 4)
    try:
        started = time.monotonic()
        stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in channels]
        results = await asyncio.gather(*(publish(stub, 6) for stub in stubs))
        elapsed = time.monotonic() - started
    finally:
        for channel in channels:
            await channel.close()
    admitted = sum(a for a, _ in results) * 100
    refused = sum(r for _, r in results)
    # 4800 messages asked on four connections to each worker: the replica's bucket and rate, passed by at
    # most half a bucket when every worker bursts at once (gateway/service/shared_spending.py); each worker
    # on its own would let through a whole bucket, 4000 in all
    assert refused > 0
    assert admitted <= 1.5 * RATE * (BURST + elapsed), (admitted, elapsed)
