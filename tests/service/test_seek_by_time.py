"""Seek by time against the embedded cluster: per partition (four partitions sharing one store, messages of
each interleaved with the others') the instance lands on the first message whose msgTime is at or after the
time's minute, with untimed messages going with the next timed one; a time before every message lands on
the oldest, after every message on the end. The service, REST (RFC 3339 text and timeZone) and gRPC
(time_ms)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import InvalidInput
from gateway.service.seek import SeekOrder
from tests.support.consumer_support import Env
from tests.support.gateway_support import gateway
from tests.support.grpc_support import Gateway as GrpcGateway
from tests.support.grpc_support import consumer_gateway

#: one store, four partitions: each partition's offsets step over its siblings' entries
TOPICS = "multi:4:1,solo:1"


def _ms(minute: str) -> int:
    """Unix ms of a UTC ``yyyyMMddHHmm`` plus 30 s (inside the minute: the seek truncates)."""
    when = datetime.strptime(minute, "%Y%m%d%H%M").replace(tzinfo=UTC)
    return int(when.timestamp() * 1000) + 30_000


#: (partition index, minute) per message, in publish order: times rise per partition, partitions interleave
PLAN = [(i % 4, f"2026112701{i // 3:02d}") for i in range(24)]


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = TOPICS


async def _drain(service: ConsumerService, group: str, instance: str, quiet: float = 0.6) -> list[bytes]:
    """Everything the instance delivers until a poll of ``quiet`` seconds finds nothing; commits it."""
    got: list[DeliveredMessage] = []
    async with asyncio.timeout(20):
        while True:
            answer = await service.poll(group, instance, timeout=quiet)
            if not answer:
                if got:
                    return [m.message.body for m in got]
                continue
            got.extend(answer)
            await service.commit(group, instance, [m.token for m in answer])


async def test_a_seek_by_time_lands_each_partition_on_its_first_message_at_or_after_it(env: Env) -> None:
    await env.producer.register_topic("multi")
    last: dict[str, int] = {}  # partition key -> append offset of its last message
    for i, (partition, minute) in enumerate(PLAN):
        sent = await env.producer.send("multi", f"m{i}".encode(), partition=partition, msg_time=minute)
        last[sent.partition_key] = sent.append_offset
    service = await env.service()
    created = await service.create("g-time", InstanceSpec({"multi": None}, start_position="earliest"))
    group, instance = "g-time", created.instance_id
    assert sorted(await _drain(service, group, instance)) == sorted(f"m{i}".encode() for i in range(24))

    moved = await service.seek(group, instance, SeekOrder("time", time=_ms("202611270103"), time_zone="UTC"))
    assert len(moved) == 4
    expected = sorted(f"m{i}".encode() for i, (_, minute) in enumerate(PLAN) if minute >= "202611270103")
    assert sorted(await _drain(service, group, instance)) == expected
    # RFC 3339 text in another offset names the same instant; the partitions default to every held one
    await service.seek(group, instance, SeekOrder("time", time="2026-11-27T02:06:59+01:00", time_zone="UTC"))
    expected = sorted(f"m{i}".encode() for i, (_, minute) in enumerate(PLAN) if minute >= "202611270106")
    assert sorted(await _drain(service, group, instance)) == expected
    # before every message: the oldest; after every message: the end (only what comes later)
    await service.seek(group, instance, SeekOrder("time", time=_ms("202601010000"), time_zone="UTC"))
    assert len(await _drain(service, group, instance)) == 24
    ends = await service.seek(group, instance, SeekOrder("time", time=_ms("202612010000"), time_zone="UTC"))
    # past each partition's last message (its siblings' later entries are no message of its own)
    assert {m.partition_key: m.curr_offset for m in ends} == {k: o + 28 for k, o in last.items()}
    await env.producer.send("multi", b"later", partition=0, msg_time="202611270100")
    assert await _drain(service, group, instance) == [b"later"]


async def test_untimed_messages_go_with_the_next_timed_one(env: Env) -> None:
    await env.producer.register_topic("solo")
    stamps = ["202611270100", None, "202611270101", None, None, "202611270102", None]
    for i, stamp in enumerate(stamps):
        await env.producer.send("solo", f"u{i}".encode(), msg_time=stamp)
    service = await env.service()
    created = await service.create("g-untimed", InstanceSpec({"solo": None}, start_position="earliest"))
    group, instance = "g-untimed", created.instance_id
    assert len(await _drain(service, group, instance)) == 7
    await service.seek(group, instance, SeekOrder("time", time=_ms("202611270102"), time_zone="UTC"))
    assert await _drain(service, group, instance) == [b"u3", b"u4", b"u5", b"u6"]
    await service.seek(group, instance, SeekOrder("time", time=_ms("202611270101"), time_zone="UTC"))
    assert await _drain(service, group, instance) == [b"u1", b"u2", b"u3", b"u4", b"u5", b"u6"]


async def test_a_seek_by_time_refuses_what_it_cannot_do(env: Env) -> None:
    await env.publish("solo", [b"x"])
    service = await env.service()
    created = await service.create("g-time-bad", InstanceSpec({"solo": None}, start_position="earliest"))
    group, instance = "g-time-bad", created.instance_id
    await _drain(service, group, instance)
    for options, field in (
        ({}, "time"),
        ({"time": "2026-11-27T01:30:00"}, "time"),
        ({"time": "yesterday"}, "time"),
        ({"time": 0, "time_zone": "Mars/Olympus"}, "time_zone"),
        ({"time": 0, "partitions": ["9:solo:0"]}, "partitions"),
        ({"time": 0, "offsets": {"1:solo:0": 0}}, "offsets"),
    ):
        with pytest.raises(InvalidInput) as bad:
            await service.seek(group, instance, SeekOrder("time", **options))
        assert bad.value.field == field, options
    with pytest.raises(InvalidInput) as bad:
        await service.seek(group, instance, SeekOrder("earliest", time=0))
    assert bad.value.field == "time"


# --- REST and gRPC ----------------------------------------------------------------------------------


async def test_rest_seek_by_time_in_the_producers_zone(env: Env) -> None:
    async with (
        gateway(env, lease=10.0) as served,
        httpx.AsyncClient(base_url=served.url, timeout=10.0) as http,
    ):
        # stamped on a Shanghai wall clock: 09:00 ... 09:05 there is 01:00 ... 01:05 UTC
        messages = [{"value": f"r{i}", "msgTime": f"2026112709{i:02d}", "partition": i % 4} for i in range(6)]
        answer = await http.post("/v1/topics/multi/messages", json={"messages": messages})
        assert answer.status_code == 200, answer.text
        created = await http.post(
            "/v1/consumers/g-rest-time", json={"topics": ["multi"], "startPosition": "earliest"}
        )
        base = f"/v1/consumers/g-rest-time/instances/{created.json()['instanceId']}"
        got = await _rest_drain(http, base)
        assert sorted(got) == [f"r{i}" for i in range(6)]
        body: dict[str, Any] = {
            "position": "time",
            "time": "2026-11-27T01:03:10Z",
            "timeZone": "Asia/Shanghai",
        }
        moved = await http.post(f"{base}/seek", json=body)
        assert moved.status_code == 200, moved.text
        assert len(moved.json()["partitions"]) == 4
        assert sorted(await _rest_drain(http, base)) == ["r3", "r4", "r5"]
        for bad, field in (
            ({"position": "time"}, "time"),
            ({"position": "time", "time": "01:03"}, "time"),
            ({"position": "time", "time": 1, "timeZone": "Nowhere/Land"}, "timeZone"),
            ({"position": "latest", "time": 1}, "time"),
        ):
            answer = await http.post(f"{base}/seek", json=bad)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["field"] == field, bad


async def _rest_drain(http: httpx.AsyncClient, base: str) -> list[str]:
    got: list[str] = []
    async with asyncio.timeout(20):
        while True:
            answer = await http.get(f"{base}/messages", params={"timeout_ms": 600, "format": "utf8"})
            assert answer.status_code == 200, answer.text
            messages = answer.json()["messages"]
            if not messages and got:
                return got
            got += [m["value"] for m in messages]
            if messages:
                await http.post(f"{base}/commits", json={"tokens": [m["token"] for m in messages]})


@pytest.fixture
async def grpc_gw(tmp_path: Path) -> AsyncIterator[GrpcGateway]:
    async with consumer_gateway([TopicSpec("multi", 4, 1)], tmp_path / "data") as served:
        yield served


async def test_grpc_seek_by_time(grpc_gw: GrpcGateway) -> None:
    gw = grpc_gw
    messages = [
        pb.Message(value=f"g{i}".encode(), partition=i % 4, msg_time=f"2026112701{i:02d}") for i in range(8)
    ]
    await gw.stub.Publish(pb.PublishRequest(topic="multi", messages=messages))
    created = await gw.stub.CreateConsumer(
        pb.CreateConsumerRequest(
            group="g-grpc-time", topics=["multi"], start_position=pb.START_POSITION_EARLIEST
        )
    )
    group, instance = "g-grpc-time", created.instance_id
    assert sorted(await _grpc_drain(gw, group, instance)) == [f"g{i}".encode() for i in range(8)]
    moved = await gw.stub.Seek(
        pb.SeekRequest(
            group=group,
            instance_id=instance,
            position=pb.START_POSITION_TIME,
            time_ms=_ms("202611270105"),
            time_zone="UTC",
        )
    )
    assert len(moved.partitions) == 4
    assert sorted(await _grpc_drain(gw, group, instance)) == [b"g5", b"g6", b"g7"]
    for request, field in (
        (pb.SeekRequest(group=group, instance_id=instance, position=pb.START_POSITION_TIME), "timeMs"),
        (
            pb.SeekRequest(
                group=group, instance_id=instance, position=pb.START_POSITION_TIME, time_ms=1, time_zone="x/y"
            ),
            "timeZone",
        ),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await gw.stub.Seek(request)
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert field in (bad.value.details() or ""), bad.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await gw.stub.CreateConsumer(
            pb.CreateConsumerRequest(
                group="g-grpc-time2", topics=["multi"], start_position=pb.START_POSITION_TIME
            )
        )
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def _grpc_drain(gw: GrpcGateway, group: str, instance: str) -> list[bytes]:
    got: list[bytes] = []
    async with asyncio.timeout(20):
        while True:
            answer = await gw.stub.Poll(pb.PollRequest(group=group, instance_id=instance, timeout_ms=600))
            if not answer.messages and got:
                return got
            got += [m.value for m in answer.messages]
            if answer.messages:
                await gw.stub.Commit(
                    pb.CommitRequest(
                        group=group, instance_id=instance, tokens=[m.token for m in answer.messages]
                    )
                )
