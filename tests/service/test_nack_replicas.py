"""Nacks across two replicas (gRPC, API keys): a Nack relayed from the replica a call landed on to the owner
of the instance is charged to the caller's publish rate there, and a retry copy one replica signed is
delivered by an instance of the group on the other one (the replicas share the retry key through
consumers.id_secret)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.auth_support import AuthFiles, write_auth_files
from tests.support.replica_support import replica
from tests.support.serving import free_port

RATE = 20


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    cluster = EmbeddedCluster([TopicSpec("nrs", 1), TopicSpec("nrr", 1)])
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def test_relayed_nacks_are_charged_and_copies_cross_replicas(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    files: AuthFiles = write_auth_files(tmp_path)
    https, grpcs = [free_port(), free_port()], [free_port(), free_port()]
    allow: dict[str, Any] = {"forward_allow": ["127.0.0.1"], "forward_ports": https + grpcs}
    limits = {"publish_messages_per_second": RATE, "burst_seconds": 1}
    alice = files.metadata("alice")
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(
            replica(cluster, files, https[0], grpcs[0], rate_limits=limits, **allow)
        )
        two = await stack.enter_async_context(
            replica(cluster, files, https[1], grpcs[1], rate_limits=limits, **allow)
        )
        create = pb.CreateConsumerRequest(
            group="nrg", topics=["nrs"], start_position=pb.START_POSITION_EARLIEST, retry_topic="nrr"
        )
        key = {
            "group": "nrg",
            "instance_id": (await one.stub.CreateConsumer(create, metadata=alice)).instance_id,
        }
        await two.stub.Publish(
            pb.PublishRequest(topic="nrs", messages=[pb.Message(value=f"v{i}".encode()) for i in range(10)]),
            metadata=alice,
        )
        await asyncio.sleep(1.1)  # the bucket is full again after the publish of the ten
        retried = 0
        refused: list[grpc.aio.AioRpcError] = []
        start = time.monotonic()
        while time.monotonic() - start < 3.0:
            polled = await two.stub.Poll(
                pb.PollRequest(**key, timeout_ms=300, max_messages=10), metadata=alice
            )
            tokens = [m.token for m in polled.messages]
            if not tokens:
                continue
            try:
                nacked = await two.stub.Nack(pb.NackRequest(**key, tokens=tokens, delay_ms=0), metadata=alice)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                refused.append(exc)
                await two.stub.Commit(pb.CommitRequest(**key, tokens=tokens, rollback=True), metadata=alice)
                continue
            retried += nacked.retried
        elapsed = time.monotonic() - start
        assert retried <= RATE * (elapsed + 1) + RATE, (retried, elapsed)
        assert refused and "publish limit of 20 messages per second" in (refused[0].details() or "")

        # the group's second instance, on the other replica, takes the retry partition once the first is gone
        await one.stub.DeleteConsumer(pb.DeleteConsumerRequest(**key), metadata=alice)
        other = {
            "group": "nrg",
            "instance_id": (await two.stub.CreateConsumer(create, metadata=alice)).instance_id,
        }
        values: set[bytes] = set()
        async with asyncio.timeout(30):
            while values != {f"v{i}".encode() for i in range(10)}:
                polled = await two.stub.Poll(pb.PollRequest(**other, timeout_ms=500), metadata=alice)
                values |= {m.value for m in polled.messages}
                if polled.messages:
                    await two.stub.Commit(pb.CommitRequest(**other, all_delivered=True), metadata=alice)
