"""Two gateway replicas (real uvicorn servers on two loopback ports, one embedded cluster): a consumer created
on one is served through either port, its stream is relayed, and a stopped owner yields 410."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from consumer_support import Env, environment
from gateway_support import Gateway, SseReader, bound_socket, gateway, peer_settings

from gateway.api.forwarding import FORWARDED_HEADER


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with environment() as env:
        yield env


@pytest.fixture
async def pair(env: Env) -> AsyncIterator[tuple[Gateway, Gateway]]:
    first, second = bound_socket(), bound_socket()
    peers = peer_settings(first, second)
    async with gateway(env, first, **peers) as owner, gateway(env, second, **peers) as other:
        yield owner, other


async def test_either_replica_serves_the_consumer(pair: tuple[Gateway, Gateway]) -> None:
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await b.post("/v1/consumers/f-g", json={"topics": ["solo"], "startPosition": "earliest"})
        # Created through ``other``: that replica owns it, and says so in baseUrl.
        assert created.status_code == 201
        instance, base_url = created.json()["instanceId"], created.json()["baseUrl"]
        assert base_url.startswith(other.url)
        assert other.consumers.instance_count == 1 and owner.consumers.instance_count == 0
        path = f"/v1/consumers/f-g/instances/{instance}"

        await a.post("/v1/topics/solo/messages", json={"messages": [{"value": f"v{i}"} for i in range(5)]})
        polled = await a.get(f"{path}/messages", params={"format": "utf8", "timeout_ms": 2000})
        assert polled.status_code == 200 and polled.headers["content-type"] == "application/json"
        messages: list[dict[str, Any]] = polled.json()["messages"]
        assert [m["value"] for m in messages] == [f"v{i}" for i in range(5)]

        committed = await a.post(f"{path}/commits", json={"tokens": [m["token"] for m in messages[:2]]})
        assert committed.json() == {"committed": 2, "rolledBack": 0, "stale": [], "pending": 3}
        described = await a.get(path)
        assert described.json()["pendingMessages"] == 3 and described.json()["baseUrl"] == base_url
        bad = await a.post(f"{path}/commits", json={"tokens": ["x"]})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "tokens[0]"
        malformed = await a.get(f"{path[:-2]}/messages")
        assert malformed.status_code == 404

        async with a.stream("GET", f"{path}/stream", params={"format": "utf8"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            reader = SseReader(stream)
            resent = await reader.read(3)
            assert [json.loads(e.data)["value"] for e in resent] == ["v2", "v3", "v4"]
            await b.post(f"{path}/commits", json={})
            await a.post("/v1/topics/solo/messages", json={"messages": [{"value": "live"}]})
            (live,) = await reader.read(1)
            assert json.loads(live.data)["value"] == "live"

        assert (await a.delete(path)).status_code == 204
        gone = await a.get(f"{path}/messages")
        assert gone.status_code == 410 and gone.json()["error"]["code"] == "gone"


async def test_a_header_that_cannot_cross_the_hop_is_refused_on_either_replica(
    pair: tuple[Gateway, Gateway],
) -> None:
    """A non-ASCII Last-Event-ID (or another passed header) gets the same 400 naming the header from the
    owner and from the replica that would forward it (issue #23 row 3)."""
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await b.post("/v1/consumers/h-g", json={"topics": ["solo"]})
        path = f"/v1/consumers/h-g/instances/{created.json()['instanceId']}"
        answers = []
        for client in (a, b):
            for name, value in (("Last-Event-ID", "caf\u00e9".encode()), ("X-Request-ID", b"r\xe9q")):
                got = await client.get(f"{path}/stream", headers={name: value})
                answers.append(got)
                assert got.status_code == 400, got.text
                assert got.json()["error"]["field"] == name
                assert name in got.json()["error"]["message"]
            got = await client.get(
                f"{path}/messages", headers={"X-TubeMQ-Anything": "\u00ff".encode("latin-1")}
            )
            assert got.status_code == 400 and got.json()["error"]["field"] == "x-tubemq-anything"
        assert answers[0].json()["error"]["message"] == answers[2].json()["error"]["message"]
        # an ASCII value still crosses: the owner answers the poll
        ok = await a.get(f"{path}/messages", params={"timeout_ms": 0}, headers={"X-Request-ID": "r-1"})
        assert ok.status_code == 200, ok.text


async def test_a_stopped_owner_yields_410(pair: tuple[Gateway, Gateway]) -> None:
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await a.post("/v1/consumers/f-dead", json={"topics": ["solo"]})
        instance = created.json()["instanceId"]
        path = f"/v1/consumers/f-dead/instances/{instance}"
        assert (await b.get(f"{path}/messages", params={"timeout_ms": 0})).status_code == 200
        await owner.stop()
        for answer in [
            await b.get(f"{path}/messages", params={"timeout_ms": 0}),
            await b.post(f"{path}/commits", json={}),
            await b.get(f"{path}/stream"),
            await b.delete(path),
        ]:
            assert answer.status_code == 410, answer.text
            error = answer.json()["error"]
            assert error["code"] == "gone" and owner.url in error["message"]
            assert "POST /v1/consumers/f-dead" in error["message"]


async def test_a_forwarded_request_is_not_forwarded_again(pair: tuple[Gateway, Gateway]) -> None:
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        instance = (await a.post("/v1/consumers/f-loop", json={"topics": ["solo"]})).json()["instanceId"]
        path = f"/v1/consumers/f-loop/instances/{instance}"
        looped = await b.get(f"{path}/messages", headers={FORWARDED_HEADER: "http://127.0.0.1:1"})
        assert looped.status_code == 410
        assert (await b.get(f"{path}/messages", params={"timeout_ms": 0})).status_code == 200
