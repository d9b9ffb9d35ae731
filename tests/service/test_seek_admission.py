"""Seeks by time in a storm, against a served gateway on the embedded cluster: one seek at a time per
consumer instance (the others answered 409 / ABORTED with when to retry, never left to run into the 503 of
the search's time bound), and a bound on the searches one caller runs at once (429 / RESOURCE_EXHAUSTED),
REST and gRPC alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest

from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.consumer_support import Env
from tests.support.gateway_support import gateway
from tests.support.grpc_support import Gateway as GrpcGateway
from tests.support.grpc_support import consumer_gateway, detail_of
from tests.support.workers_support import start_workers

STORM = 24
SEEK_BY_TIME = {"position": "time", "time": "2026-11-27T01:20:00Z", "timeZone": "UTC"}


def _messages(count: int) -> list[dict[str, object]]:
    """``count`` messages a minute apart from 2026-11-27 00:00 (m80 is stamped 01:20)."""
    return [
        {"value": f"m{i}", "msgTime": f"202611{27 + i // 1440:02d}{i // 60 % 24:02d}{i % 60:02d}"}
        for i in range(count)
    ]


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = "storm:1"


async def _publish(http: httpx.AsyncClient, count: int) -> None:
    batch = _messages(count)
    for start in range(0, count, 500):
        answer = await http.post("/v1/topics/storm/messages", json={"messages": batch[start : start + 500]})
        assert answer.status_code == 200, answer.text


async def _instance(http: httpx.AsyncClient, group: str) -> str:
    created = await http.post(
        f"/v1/consumers/{group}", json={"topics": ["storm"], "startPosition": "earliest"}
    )
    assert created.status_code == 201, created.text
    base = f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"
    async with asyncio.timeout(20):  # the instance holds its partition once its first poll answers
        while not (await http.get(base)).json()["partitions"]:
            await http.get(f"{base}/messages", params={"timeout_ms": 200})
    return base


async def test_rest_one_seek_at_a_time_per_instance(env: Env) -> None:
    async with (
        gateway(env, lease=30.0) as served,
        httpx.AsyncClient(base_url=served.url, timeout=30.0) as http,
    ):
        await _publish(http, 3000)
        base = await _instance(http, "g-storm")
        clients = [httpx.AsyncClient(base_url=served.url, timeout=30.0) for _ in range(STORM)]
        try:
            answers = await asyncio.gather(*(c.post(f"{base}/seek", json=SEEK_BY_TIME) for c in clients))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) == {200, 409}, statuses
        busy = next(a for a in answers if a.status_code == 409)
        error = busy.json()["error"]
        assert error["code"] == "conflict" and "another seek is running" in error["message"]
        assert error["retryAfterSeconds"] > 0 and int(busy.headers["Retry-After"]) >= 1
        # the instance is free again once the seek ended: a seek now runs
        again = await http.post(f"{base}/seek", json=SEEK_BY_TIME)
        assert again.status_code == 200, again.text
        first = (await http.get(f"{base}/messages", params={"timeout_ms": 2000, "format": "utf8"})).json()
        assert first["messages"][0]["value"] == "m80"


async def test_rest_a_caller_runs_few_searches_at_once(env: Env) -> None:
    async with (
        gateway(env, lease=30.0, max_seek_searches=2) as served,
        httpx.AsyncClient(base_url=served.url, timeout=30.0) as http,
    ):
        await _publish(http, 3000)
        bases = [await _instance(http, f"g-caller-{i}") for i in range(8)]
        clients = [httpx.AsyncClient(base_url=served.url, timeout=30.0) for _ in bases]
        try:
            answers = await asyncio.gather(
                *(c.post(f"{b}/seek", json=SEEK_BY_TIME) for c, b in zip(clients, bases, strict=True))
            )
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) == {200, 429}, statuses
        limited = next(a for a in answers if a.status_code == 429)
        assert limited.json()["error"]["code"] == "rate_limited"
        assert "seeks by time at once" in limited.json()["error"]["message"]
        assert 'seek_searches";q=2' in limited.headers["RateLimit-Policy"]
        # a seek to offsets is no search: the caller's bound does not hold it
        offsets = await http.post(f"{bases[0]}/seek", json={"position": "earliest"})
        assert offsets.status_code == 200, offsets.text


@pytest.fixture
async def grpc_gw(tmp_path: Path) -> AsyncIterator[GrpcGateway]:
    async with consumer_gateway([TopicSpec("storm", 1, 1)], tmp_path / "data") as served:
        yield served


async def test_grpc_one_seek_at_a_time_per_instance(grpc_gw: GrpcGateway) -> None:
    gw = grpc_gw
    batch = [pb.Message(value=str(m["value"]).encode(), msg_time=str(m["msgTime"])) for m in _messages(3000)]
    for start in range(0, len(batch), 500):
        await gw.stub.Publish(pb.PublishRequest(topic="storm", messages=batch[start : start + 500]))
    created = await gw.stub.CreateConsumer(
        pb.CreateConsumerRequest(
            group="g-grpc-storm", topics=["storm"], start_position=pb.START_POSITION_EARLIEST
        )
    )
    group, instance = "g-grpc-storm", created.instance_id
    await gw.stub.Poll(pb.PollRequest(group=group, instance_id=instance, timeout_ms=2000, max_messages=1))
    request = pb.SeekRequest(
        group=group,
        instance_id=instance,
        position=pb.START_POSITION_TIME,
        time_ms=1_795_742_400_000,
        time_zone="UTC",
    )

    async def seek() -> grpc.StatusCode:
        try:
            await gw.stub.Seek(request)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.ABORTED:
                view = detail_of(exc)
                assert view.code == "conflict" and view.retry_after_seconds, view
            return exc.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(seek() for _ in range(STORM)))
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.ABORTED}, codes


async def test_one_seek_at_a_time_across_the_workers(tmp_path: Path) -> None:
    """``serve --workers 2``: seeks sent at once through the shared port land on both workers; those on the
    worker that does not hold the instance take the hop to the one that does, where one runs and the others
    are answered 409 with Retry-After, passed back over the hop."""
    gateway = start_workers(tmp_path, 2, "--embedded-topics", "storm:1")
    try:
        async with gateway.shared() as http:
            await _publish(http, 3000)
            base = await _instance(http, "g-workers-storm")
        clients = [gateway.shared() for _ in range(STORM)]
        try:
            answers = await asyncio.gather(*(c.post(f"{base}/seek", json=SEEK_BY_TIME) for c in clients))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) == {200, 409}, statuses
        assert all(int(a.headers["Retry-After"]) >= 1 for a in answers if a.status_code == 409)
        workers = {r.get("worker") for r in gateway.records() if r.get("route", "").endswith("/seek")}
        assert workers == {0, 1}, workers  # both workers took seeks: some came over the hop
    finally:
        gateway.stop()
