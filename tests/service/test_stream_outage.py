"""A stream tells its client what a poll would during a broker outage: the SSE stream sends an
``unavailable`` event with the poll's 503 error body (retry delay included) and stays open, resuming by
itself once the broker is back; gRPC Subscribe ends with UNAVAILABLE and the retry delay, as Poll does.
Real sockets against the embedded cluster, its broker stopped and started again."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest

from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.core_errors import OUTAGE_RETRY_AFTER
from tests.support.consumer_support import Env, environment
from tests.support.gateway_support import SseEvent, SseReader, gateway
from tests.support.grpc_support import detail_of, running_gateway
from tests.support.waiting import eventually


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with environment("od:2", data_dir=tmp_path / "data") as env:
        yield env


async def _read_until(reader: SseReader, wanted: str, timeout: float = 30.0) -> SseEvent:  # noqa: ASYNC109
    while True:
        (event,) = await reader.read(1, timeout=timeout)
        if event.event == wanted:
            return event


async def test_an_sse_stream_says_unavailable_in_an_outage_and_resumes(env: Env) -> None:
    async with gateway(env) as gw, httpx.AsyncClient(base_url=gw.url, timeout=30.0) as client:
        created = await client.post(
            "/v1/consumers/os", json={"topics": ["od"], "autoCommit": True, "startPosition": "earliest"}
        )
        path = f"/v1/consumers/os/instances/{created.json()['instanceId']}"
        async with client.stream("GET", f"{path}/stream", params={"format": "utf8"}) as stream:
            reader = SseReader(stream)
            published = await client.post("/v1/topics/od/messages", json={"messages": [{"value": "before"}]})
            assert published.status_code == 200, published.text
            first = await _read_until(reader, "message")
            assert json.loads(first.data)["value"] == "before"

            await env.cluster.stop_broker(1)
            told = await _read_until(reader, "unavailable")
            error = json.loads(told.data)["error"]
            assert error["code"] == "unavailable" and "offline" in error["message"], error
            assert error["retryAfterSeconds"] == OUTAGE_RETRY_AFTER
            # a poll says the same meanwhile
            polled = await client.get(f"{path}/messages", params={"timeout_ms": 0})
            assert polled.status_code in (409, 503), polled.text

            await env.cluster.start_broker(1)

            async def published_again() -> bool:
                answer = await client.post("/v1/topics/od/messages", json={"messages": [{"value": "back"}]})
                return answer.status_code == 200

            await eventually(published_again, timeout=30, what="a publish after the restart")
            # "before" may come again first: the outage rolled back its uncommitted batch (at least once)
            values = {json.loads((await _read_until(reader, "message")).data)["value"]}
            while "back" not in values:
                values.add(json.loads((await _read_until(reader, "message")).data)["value"])
            assert values <= {"before", "back"}, values


async def test_grpc_subscribe_ends_unavailable_in_an_outage(tmp_path: Path) -> None:
    async with EmbeddedCluster(
        [TopicSpec("og", 2)], data_dir=tmp_path / "data", balance_period=0.1
    ) as cluster:
        settings = Settings(
            masters=",".join(str(a) for a in cluster.master_addresses),
            producer={"heartbeat_interval": 0.2},
            consumers={"heartbeat_interval": 0.2, "empty_fetch_wait": 0.05, "assignment_wait": 10.0},
            grpc={"enabled": True, "port": 0},
        )
        async with running_gateway(cluster, settings, subscribe_step=0.1) as gw:
            created = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="osg", topics=["og"]))
            request = pb.SubscribeRequest(group="osg", instance_id=created.instance_id)
            first = await gw.stub.Poll(pb.PollRequest(group="osg", instance_id=created.instance_id))
            assert not first.messages  # the assignment is there
            await cluster.stop_broker(1)
            call = gw.stub.Subscribe(request, timeout=20.0)  # a silent stream would run on
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async for _ in call:
                    pass
            assert ended.value.code() is grpc.StatusCode.UNAVAILABLE, ended.value
            assert "offline" in (ended.value.details() or "")
            assert detail_of(ended.value).retry_after_seconds == OUTAGE_RETRY_AFTER
