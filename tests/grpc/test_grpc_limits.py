"""Abuse limits over gRPC with a real client on loopback: RESOURCE_EXHAUSTED with retry info for Publish and
CreateConsumer, per-message acks for PublishStream, and the caller's address keying anonymous quotas."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.convert import peer_host
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.grpc_support import (
    TOPICS,
    Gateway,
    describe,
    detail_of,
    gateway_settings,
    message,
    running_gateway,
    trailer,
)

RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as c:
        yield c


@pytest.fixture
async def gw(cluster: EmbeddedCluster) -> AsyncIterator[Gateway]:
    settings = gateway_settings(
        cluster,
        rate_limits={
            "publish_messages_per_second": 4,
            "burst_seconds": 1,
            "max_instances_per_principal": 1,
        },
        consumers={"heartbeat_interval": 0.2, "assignment_wait": 1.0},
    )
    async with running_gateway(cluster, settings) as gateway:
        yield gateway


def batch(count: int) -> pb.PublishRequest:
    return pb.PublishRequest(topic="demo", messages=[message(f"m{i}") for i in range(count)])


async def test_publish_above_the_rate_is_resource_exhausted_with_retry_info(gw: Gateway) -> None:
    response = await gw.stub.Publish(batch(4))
    assert response.failed == 0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(batch(1))
    error = caught.value
    assert error.code() is RESOURCE_EXHAUSTED
    assert "client 127.0.0.1" in error.details() and "4 messages per second" in error.details()
    detail = detail_of(error)
    assert detail.code == "rate_limited" and 0 < detail.retry_after_seconds <= 0.25
    assert detail.grpc_code == RESOURCE_EXHAUSTED.value[0]
    assert trailer(error, "retry-after") == "1"
    # RetryInfo has it in nanoseconds, the metadata as REST's body (retryAfterSeconds) has it
    assert float(detail.metadata["retryAfterSeconds"]) == pytest.approx(detail.retry_after_seconds, abs=1e-9)


async def test_publish_stream_acks_a_refused_batch_with_the_retry_delay(gw: Gateway) -> None:
    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        # One key: the second batch waits for the first, so which one is refused is certain.
        yield pb.PublishStreamRequest(topic="demo", messages=[message(v, key="k") for v in "abc"])
        yield pb.PublishStreamRequest(messages=[message(v, key="k") for v in "de"])

    acks = [ack async for response in gw.stub.PublishStream(requests()) for ack in response.acks]
    assert [a.sequence for a in acks] == [0, 1, 2, 3, 4]
    assert [a.WhichOneof("outcome") for a in acks] == ["stored"] * 3 + ["error"] * 2
    for ack in acks[3:]:
        error = describe(ack.error)
        assert error.code == "rate_limited" and error.grpc_code == RESOURCE_EXHAUSTED.value[0]
        assert error.retry_after_seconds is not None and error.retry_after_seconds > 0


async def test_create_consumer_above_the_cap_is_resource_exhausted(gw: Gateway) -> None:
    created = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-cap", topics=["demo"]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-cap", topics=["demo"]))
    assert caught.value.code() is RESOURCE_EXHAUSTED
    assert "maximum of 1 consumer instances" in caught.value.details()
    assert detail_of(caught.value).code == "rate_limited"
    await gw.stub.DeleteConsumer(pb.DeleteConsumerRequest(group="g-cap", instance_id=created.instance_id))
    again = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-cap", topics=["demo"]))
    assert again.instance_id != created.instance_id


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:50123", "127.0.0.1"),
        ("ipv6:[::1]:50123", "::1"),
        ("unix:/tmp/gateway.sock", "unix:/tmp/gateway.sock"),
        ("", None),
        (None, None),
    ],
)
def test_peer_host(peer: str | None, host: str | None) -> None:
    assert peer_host(peer) == host
