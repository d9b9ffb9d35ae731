"""The consumer REST API over a real uvicorn server on the embedded cluster: group splitting, takeover after
delete and lease expiry, start offsets, filters, value formats, error bodies, and SSE with resumption."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.consumer_support import Env
from tests.support.gateway_support import Gateway, SseReader, gateway
from tests.support.waiting import eventually


@pytest.fixture
async def gw(env: Env) -> AsyncIterator[Gateway]:
    # A lease no poll gap on a busy machine reaches; the expiry test ends b's lease on purpose.
    async with gateway(env, lease=10.0) as served:
        yield served


@pytest.fixture
async def http(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as client:
        yield client


async def publish(
    http: httpx.AsyncClient, topic: str, values: list[str], **fields: Any
) -> list[dict[str, Any]]:
    messages = [{"value": v, **fields} for v in values]
    answer = await http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


async def create(http: httpx.AsyncClient, group: str, **body: Any) -> str:
    body.setdefault("topics", ["demo"])
    answer = await http.post(f"/v1/consumers/{group}", json=body)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert answer.headers["location"] == created["baseUrl"]
    assert created["baseUrl"].endswith(f"/v1/consumers/{group}/instances/{created['instanceId']}")
    instance_id: str = created["instanceId"]
    return instance_id


async def poll(http: httpx.AsyncClient, group: str, instance: str, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("timeout_ms", 50)
    answer = await http.get(f"/v1/consumers/{group}/instances/{instance}/messages", params=params)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


async def commit(http: httpx.AsyncClient, group: str, instance: str, **body: Any) -> dict[str, Any]:
    answer = await http.post(f"/v1/consumers/{group}/instances/{instance}/commits", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def held(http: httpx.AsyncClient, group: str, instance: str) -> set[str]:
    answer = await http.get(f"/v1/consumers/{group}/instances/{instance}")
    assert answer.status_code == 200, answer.text
    return {p["partitionKey"] for p in answer.json()["partitions"]}


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["value"] for m in messages]


async def split(http: httpx.AsyncClient, group: str, ids: list[str]) -> None:
    async def even() -> bool:
        for instance in ids:
            await poll(http, group, instance)
        counts = [len(await held(http, group, i)) for i in ids]
        return sum(counts) == 8 and max(counts) - min(counts) <= 1

    await eventually(even, what="an even split")


async def test_two_consumers_split_partitions_and_get_every_message_once(http: httpx.AsyncClient) -> None:
    ids = [await create(http, "r-split"), await create(http, "r-split")]
    await split(http, "r-split", ids)
    assert not (await held(http, "r-split", ids[0])) & (await held(http, "r-split", ids[1]))
    sent = [f"m{i}" for i in range(120)]
    await publish(http, "demo", sent)
    got: dict[str, list[str]] = {i: [] for i in ids}

    async def drain() -> bool:
        for instance in ids:
            messages = await poll(http, "r-split", instance, format="utf8", max_messages=25)
            got[instance] += texts(messages)
            if messages:
                result = await commit(http, "r-split", instance, tokens=[m["token"] for m in messages])
                assert result["committed"] == len(messages) and result["stale"] == []
        return sum(map(len, got.values())) >= len(sent)

    await eventually(drain, what="every message")
    assert sorted(got[ids[0]] + got[ids[1]]) == sorted(sent)
    assert got[ids[0]] and got[ids[1]]


@pytest.mark.parametrize("leave", ["delete", "expire"])
async def test_takeover_redelivers_uncommitted_messages(
    http: httpx.AsyncClient, gw: Gateway, leave: str
) -> None:
    group = f"r-take-{leave}"
    a, b = await create(http, group), await create(http, group)
    await split(http, group, [a, b])
    sent = [f"{leave}{i}" for i in range(60)]
    await publish(http, "demo", sent)
    given_to_b: list[str] = []

    async def b_has_some() -> bool:
        given_to_b.extend(texts(await poll(http, group, b, format="utf8")))
        return bool(given_to_b)

    await eventually(b_has_some, what="a delivery to b")
    if leave == "delete":
        deleted = await http.delete(f"/v1/consumers/{group}/instances/{b}")
        assert deleted.status_code == 204
    else:
        # b stays idle from now on and its lease runs out (as if 10 s passed for b alone); a keeps polling
        gw.consumers.instance(group, b).last_used -= gw.consumers.lease
    got_a: list[str] = []

    async def a_has_all() -> bool:
        got_a.extend(texts(await poll(http, group, a, format="utf8")))
        await commit(http, group, a)
        return set(got_a) >= set(sent)

    await eventually(a_has_all, what="a taking over")
    assert set(given_to_b) <= set(got_a)
    gone = await http.get(f"/v1/consumers/{group}/instances/{b}/messages")
    assert gone.status_code == 410
    error = gone.json()["error"]
    assert error["code"] == "gone" and f"POST /v1/consumers/{group}" in error["message"]


async def test_offsets_start_where_requested(http: httpx.AsyncClient) -> None:
    results = await publish(http, "solo", [f"o{i}" for i in range(8)])
    key, offset = results[3]["partitionKey"], results[3]["offset"]
    instance = await create(
        http, "r-offsets", topics=["solo"], startPosition="offsets", offsets={key: offset}
    )
    messages = await poll(http, "r-offsets", instance, format="utf8", timeout_ms=2000)
    assert texts(messages) == [f"o{i}" for i in range(3, 8)]
    assert messages[0]["offset"] == offset and messages[0]["partitionKey"] == key


async def test_stream_id_filter(http: httpx.AsyncClient) -> None:
    await publish(http, "demo", [f"a{i}" for i in range(10)], streamId="alpha")
    await publish(http, "demo", [f"b{i}" for i in range(10)], streamId="beta")
    instance = await create(
        http, "r-filter", filters={"demo": ["beta"]}, startPosition="earliest", autoCommit=True
    )
    got: list[dict[str, Any]] = []

    async def all_beta() -> bool:
        got.extend(await poll(http, "r-filter", instance, format="utf8"))
        return len(got) >= 10

    await eventually(all_beta, what="every beta message")
    got.extend(await poll(http, "r-filter", instance, format="utf8", timeout_ms=300))
    assert sorted(texts(got)) == sorted(f"b{i}" for i in range(10))
    assert {m["streamId"] for m in got} == {"beta"}


async def test_value_formats_and_message_fields(http: httpx.AsyncClient) -> None:
    raw = base64.b64encode(b"\xff\xfe").decode()
    await publish(http, "solo", ['{"n": 1}'], attributes={"k": "v"}, msgTime="202401311530")
    await http.post("/v1/topics/solo/messages", json={"messages": [{"value": raw, "encoding": "base64"}]})
    instance = await create(http, "r-fmt", topics=["solo"], startPosition="earliest")
    messages = await poll(http, "r-fmt", instance, format="json", timeout_ms=2000)
    assert [(m["value"], m["encoding"]) for m in messages] == [({"n": 1}, "json"), (raw, "base64")]
    first = messages[0]
    assert first["attributes"] == {"k": "v"} and first["msgTime"] == "202401311530"
    assert first["topic"] == "solo" and first["partitionKey"] == "1:solo:0" and first["partitionId"] == 0
    assert int(first["messageId"]) >= 0 and first["token"] == "1"
    rolled = await commit(http, "r-fmt", instance, tokens=[first["token"]], consumed=False)
    assert rolled["rolledBack"] == 2 and rolled["pending"] == 0
    again = await poll(http, "r-fmt", instance, format="base64", timeout_ms=2000)
    assert [m["value"] for m in again] == [base64.b64encode(b'{"n": 1}').decode(), raw]
    utf8 = await commit(http, "r-fmt", instance, tokens=[again[0]["token"]], consumed=False)
    assert utf8["rolledBack"] == 2
    third = await poll(http, "r-fmt", instance, format="utf8", timeout_ms=2000)
    assert [(m["value"], m["encoding"]) for m in third] == [('{"n": 1}', "utf8"), (raw, "base64")]


CREATE_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("r-err", {"topics": []}, "topics"),
    ("r-err", {"topics": ["solo"], "filters": {"demo": ["x"]}}, "filters.demo"),
    ("r-err", {"topics": ["solo"], "startPosition": "middle"}, "startPosition"),
    ("r-err", {"topics": ["solo"], "startPosition": "offsets"}, "offsets"),
    ("r-err", {"topics": ["solo"], "unknown": 1}, "unknown"),
    ("r,err", {"topics": ["solo"]}, "group"),
]


async def test_create_errors_name_the_field(http: httpx.AsyncClient) -> None:
    for group, body, field in CREATE_ERRORS:
        answer = await http.post(f"/v1/consumers/{group}", json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["field"] == field
    missing = await http.post("/v1/consumers/r-err", json={"topics": ["nosuchtopic"]})
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "topics"


async def test_instance_errors(http: httpx.AsyncClient) -> None:
    instance = await create(http, "r-inst", topics=["solo"])
    base = f"/v1/consumers/r-inst/instances/{instance}"
    malformed = await http.get(f"/v1/consumers/r-inst/instances/{instance[:-3]}/messages")
    assert malformed.status_code == 404 and malformed.json()["error"]["field"] == "instanceId"
    other_group = await http.get(f"/v1/consumers/r-other/instances/{instance}/messages")
    assert other_group.status_code == 404
    too_long = await http.get(f"{base}/messages", params={"timeout_ms": 10_000_000})
    assert too_long.status_code == 400 and too_long.json()["error"]["field"] == "timeout_ms"
    by_header = await http.get(f"{base}/stream", headers={"Last-Event-ID": "x1"})
    by_query = await http.get(f"{base}/stream", params={"last_event_id": "x1"})
    for bad_resume in (by_header, by_query):
        assert bad_resume.status_code == 400 and bad_resume.json()["error"]["field"] == "Last-Event-ID"
    bad_token = await http.post(f"{base}/commits", json={"tokens": ["nope"]})
    assert bad_token.status_code == 400 and bad_token.json()["error"]["field"] == "tokens[0]"
    stale = await commit(http, "r-inst", instance, tokens=["99"])
    assert stale == {"committed": 0, "rolledBack": 0, "stale": ["99"], "pending": 0, "awaitingBatch": 0}
    empty_body = await http.post(f"{base}/commits")
    assert empty_body.status_code == 200
    assert (await http.delete(base)).status_code == 204
    assert (await http.delete(base)).status_code == 410


async def test_sse_delivers_as_published_and_resumes_with_last_event_id(http: httpx.AsyncClient) -> None:
    instance = await create(http, "r-sse")
    stream_url = f"/v1/consumers/r-sse/instances/{instance}/stream"
    await poll(http, "r-sse", instance)  # joined: latest starts at the current end
    sent = [f"s{i}" for i in range(60)]
    received: list[dict[str, Any]] = []

    async def take(response: httpx.Response, count: int) -> str:
        """Read ``count`` events, committing each; returns the last event id."""
        last = ""
        reader = SseReader(response)
        for _ in range(count):
            (event,) = await reader.read(1)
            message = json.loads(event.data)
            assert event.id == message["token"]
            received.append(message)
            await commit(http, "r-sse", instance, tokens=[message["token"]])
            last = event.id
        return last

    async with http.stream("GET", stream_url, params={"format": "utf8"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        await publish(http, "demo", sent[:40])
        last_id = await take(response, 30)
    # Dropped after 30 events: messages delivered to the dead connection are pending, not lost.
    await publish(http, "demo", sent[40:])
    headers = {"Last-Event-ID": last_id}
    async with http.stream("GET", stream_url, params={"format": "utf8"}, headers=headers) as response:
        await take(response, 30)
    assert sorted(texts(received)) == sorted(sent)
    by_partition: dict[str, list[int]] = {}
    for message in received:
        by_partition.setdefault(message["partitionKey"], []).append(int(message["value"][1:]))
    assert len(by_partition) == 8
    assert all(values == sorted(values) for values in by_partition.values())


async def test_sse_auto_commit_and_gone_event(http: httpx.AsyncClient, gw: Gateway) -> None:
    instance = await create(http, "r-sse-auto", topics=["solo"], autoCommit=True)
    await poll(http, "r-sse-auto", instance)
    url = f"/v1/consumers/r-sse-auto/instances/{instance}/stream"
    async with http.stream("GET", url, params={"format": "utf8"}) as response:
        reader = SseReader(response)
        await publish(http, "solo", ["x1", "x2"])
        events = await reader.read(2)
        assert [json.loads(e.data)["value"] for e in events] == ["x1", "x2"]
        await publish(http, "solo", ["x3"])
        assert json.loads((await reader.read(1))[0].data)["value"] == "x3"
        closing = asyncio.create_task(gw.consumers.delete("r-sse-auto", instance))
        gone = await reader.read(1)
        await closing
    assert gone[0].event == "gone" and json.loads(gone[0].data)["error"]["code"] == "gone"


async def test_draining_refuses_new_instances_and_ends_streams(http: httpx.AsyncClient, gw: Gateway) -> None:
    instance = await create(http, "r-drain", topics=["solo"])
    url = f"/v1/consumers/r-drain/instances/{instance}/stream"
    async with http.stream("GET", url) as response:
        gw.runtime.draining = True
        body = await asyncio.wait_for(response.aread(), 5.0)
    assert body.startswith(b"retry: ")
    refused = await http.post("/v1/consumers/r-drain", json={"topics": ["solo"]})
    assert refused.status_code == 503 and "another replica" in refused.json()["error"]["message"]
    assert refused.headers["retry-after"] == "1"
    assert (await http.get(f"/v1/consumers/r-drain/instances/{instance}")).status_code == 200


@pytest.mark.parametrize("prefetch", [True, False])
async def test_sse_finds_its_batches_fetched_ahead(env: Env, prefetch: bool) -> None:
    """An SSE stream of an auto-commit instance: after its first step, each step's batch was fetched ahead
    while the last one went out (broker fetches a step had to start and wait for: 1, not one a step)."""
    async with gateway(env, lease=10.0, prefetch_bytes=2**20 if prefetch else 0) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10.0) as http:
            sent = [f"p{p}-{i}" for p in range(8) for i in range(10)]
            for p in range(8):
                await publish(http, "demo", [v for v in sent if v.startswith(f"p{p}-")], partition=p)
            instance = await create(http, "r-ahead", startPosition="earliest", autoCommit=True)
            url = f"/v1/consumers/r-ahead/instances/{instance}/stream"
            async with http.stream("GET", url, params={"format": "utf8", "max_messages": 10}) as response:
                events = await SseReader(response).read(len(sent))
        assert sorted(json.loads(e.data)["value"] for e in events) == sorted(sent)
        held = served.consumers.instance("r-ahead", instance)
        assert (held.poll_fetches == 1) is prefetch
        assert (held.fetches_ahead >= 7) is prefetch
