"""Every refused gRPC call leaves one structured ``gRPC call refused`` line naming its cause (a real client on
loopback, the embedded cluster): what the client got (code, reason, message), the request id to find it by,
the limit or retry delay when there is one; WARNING for refusals a correct call can meet, INFO for a call at
fault; consumer instance ids redacted."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.instance_id import redact
from tests.support.grpc_support import (
    TOPICS,
    Gateway,
    detail_of,
    gateway_settings,
    message,
    running_gateway,
    trailer,
)

REFUSED = "gRPC call refused"
PUBLISH = "/tubemq.gateway.v1.GatewayService/Publish"


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data", balance_period=0.1) as cluster:
        settings = gateway_settings(
            cluster,
            # 3 messages at once, then one every 2 s: the next call meets the limit even on a loaded machine
            rate_limits={"publish_messages_per_second": 0.5, "burst_seconds": 6},
            consumers={"heartbeat_interval": 0.1, "assignment_wait": 1.0},
        )
        async with running_gateway(cluster, settings) as gateway:
            yield gateway


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.grpc" and r.getMessage() == REFUSED]


async def test_a_message_above_the_topic_limit(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.grpc")
    big = pb.PublishRequest(topic="demo", messages=[message(b"x" * (1024 * 1024 + 1))])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(big, metadata=(("x-request-id", "too-big-1"),))
    error = caught.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    [line] = refusals(caplog)
    assert line.levelno == logging.WARNING
    fields = vars(line)
    assert fields["method"] == PUBLISH
    assert fields["grpc_code"] == "RESOURCE_EXHAUSTED"
    assert fields["reason"] == "PAYLOAD_TOO_LARGE"
    assert fields["detail"] == error.details()  # what the client was told, word for word
    assert fields["field"] == detail_of(error).field == "messages[0].value"
    assert fields["limit"] == detail_of(error).limit == 1024 * 1024
    assert fields["request_id"] == trailer(error, "x-request-id") == "too-big-1"


async def test_above_the_rate_limit(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.grpc")
    await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message(f"m{i}") for i in range(3)]))
    assert refusals(caplog) == []  # an answered call leaves no such line
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("one more")]))
    error = caught.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    [line] = refusals(caplog)
    fields = vars(line)
    assert line.levelno == logging.WARNING
    assert (fields["grpc_code"], fields["reason"]) == ("RESOURCE_EXHAUSTED", "RATE_LIMITED")
    assert fields["detail"] == error.details() and "0.5 messages per second" in fields["detail"]
    assert fields["retry_after_seconds"] == pytest.approx(detail_of(error).retry_after_seconds)
    assert fields["request_id"] == trailer(error, "x-request-id")


async def test_a_call_at_fault_is_info(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.grpc")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(pb.PublishRequest(topic="no_such_topic", messages=[message("m")]))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    [line] = refusals(caplog)
    assert line.levelno == logging.INFO
    assert (vars(line)["grpc_code"], vars(line)["reason"]) == ("NOT_FOUND", "NOT_FOUND")
    assert vars(line)["detail"] == caught.value.details()


async def test_instance_ids_are_redacted(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.grpc")
    created = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-log", topics=["demo"]))
    instance = created.instance_id
    await gw.stub.DeleteConsumer(pb.DeleteConsumerRequest(group="g-log", instance_id=instance))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Poll(pb.PollRequest(group="g-log", instance_id=instance, timeout_ms=0))
    assert caught.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert instance in caught.value.details()  # the client is told which instance
    [line] = refusals(caplog)
    assert instance not in line.getMessage() and instance not in str(vars(line))
    assert vars(line)["detail"] == caught.value.details().replace(instance, redact(instance))


async def test_a_refusal_below_info_level_is_not_built(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.grpc")
    with pytest.raises(grpc.aio.AioRpcError):
        await gw.stub.Publish(pb.PublishRequest(topic="no_such_topic", messages=[message("m")]))
    assert refusals(caplog) == []
