"""Nack, delivery attempts, dead letters, deadlines and seek end to end on REST (polls and SSE) and gRPC
(Poll, Subscribe, Nack, ExtendDeadlines, Seek) over loopback against the embedded cluster."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.consumer_support import Env
from tests.support.gateway_support import SseReader, gateway
from tests.support.grpc_support import Gateway as GrpcGateway
from tests.support.grpc_support import consumer_gateway, message

TOPICS = "solo:1,retry:2,dlq:1"


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = TOPICS


@pytest.fixture
async def http(env: Env) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        gateway(env, lease=10.0) as served,
        httpx.AsyncClient(base_url=served.url, timeout=10.0) as client,
    ):
        yield client


async def _create(http: httpx.AsyncClient, group: str, **body: Any) -> str:
    body = {"topics": ["solo"], "startPosition": "earliest", "retryTopic": "retry", **body}
    answer = await http.post(f"/v1/consumers/{group}", json=body)
    assert answer.status_code == 201, answer.text
    return f"/v1/consumers/{group}/instances/{answer.json()['instanceId']}"


async def _poll_until(http: httpx.AsyncClient, base: str, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(15):
        while len(got) < count:
            answer = await http.get(f"{base}/messages", params={"timeout_ms": 500, "format": "utf8"})
            assert answer.status_code == 200, answer.text
            got += answer.json()["messages"]
    return got


async def test_rest_nack_of_one_of_ten_redelivers_it_alone_after_its_delay(http: httpx.AsyncClient) -> None:
    sent = [f"m{i}" for i in range(10)]
    answer = await http.post("/v1/topics/solo/messages", json={"messages": [{"value": v} for v in sent]})
    assert answer.status_code == 200
    base = await _create(http, "g-rest-nack")
    first = await _poll_until(http, base, 10)
    assert [m["value"] for m in first] == sent
    assert {m["deliveryAttempt"] for m in first} == {1}
    assert all(m["deadline"] > time.time() * 1000 for m in first)
    nacked = first[3]
    started = time.monotonic()
    answer = await http.post(f"{base}/nacks", json={"tokens": [nacked["token"]], "delayMs": 700})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "retried": 1,
        "deadLettered": 0,
        "stale": [],
        "failed": [],
        "error": None,
        "pending": 9,
    }
    others = [m["token"] for m in first if m is not nacked]
    assert (await http.post(f"{base}/commits", json={"tokens": others})).json()["committed"] == 9
    [back] = await _poll_until(http, base, 1)
    assert time.monotonic() - started >= 0.7
    assert back["value"] == "m3" and back["deliveryAttempt"] == 2
    assert {k: back[k] for k in ("topic", "partitionKey", "offset", "messageId", "attributes")} == {
        k: nacked[k] for k in ("topic", "partitionKey", "offset", "messageId", "attributes")
    }
    assert (await http.post(f"{base}/commits", json={"tokens": [back["token"]]})).json()["committed"] == 1
    answer = await http.get(f"{base}/messages", params={"timeout_ms": 800})
    assert answer.json() == {"messages": []}


async def test_rest_dead_letter_and_deadline_extension(http: httpx.AsyncClient) -> None:
    await http.post("/v1/topics/solo/messages", json={"messages": [{"value": "poison"}]})
    base = await _create(http, "g-rest-dead", deadLetterTopic="dlq", maxDeliveryAttempts=1, ackDeadlineMs=300)
    [m] = await _poll_until(http, base, 1)
    extended = await http.post(f"{base}/deadlines", json={"tokens": [m["token"], "77"], "extendMs": 5000})
    assert extended.status_code == 200, extended.text
    body = extended.json()
    assert body["extended"] == 1 and body["stale"] == ["77"] and body["deadline"] >= time.time() * 1000 + 4000
    answer = await http.get(f"{base}/messages", params={"timeout_ms": 800})
    assert answer.json() == {"messages": []}  # past the 300 ms deadline, held by the extension
    answer = await http.post(f"{base}/nacks", json={"tokens": [m["token"]]})
    assert answer.json()["deadLettered"] == 1 and answer.json()["retried"] == 0
    reader = await http.post(
        "/v1/consumers/g-rest-dlq", json={"topics": ["dlq"], "startPosition": "earliest"}
    )
    reader_base = f"/v1/consumers/g-rest-dlq/instances/{reader.json()['instanceId']}"
    [letter] = await _poll_until(http, reader_base, 1)
    assert letter["value"] == "poison"
    assert letter["attributes"]["gateway.reason"] == "maxDeliveryAttemptsExceeded"
    assert letter["attributes"]["gateway.group"] == "g-rest-dead"
    assert letter["attributes"]["gateway.partitionKey"] == m["partitionKey"]


async def test_rest_bad_nack_and_deadline_bodies_name_the_field(http: httpx.AsyncClient) -> None:
    base = await _create(http, "g-rest-bad")
    for path, body, field in (
        ("nacks", {"tokens": ["1"], "delayMs": 10_000_000}, "delayMs"),
        ("deadlines", {"tokens": ["1"], "extendMs": 10_000_000}, "extendMs"),
        ("nacks", {"tokens": ["x"]}, "tokens[0]"),
    ):
        answer = await http.post(f"{base}/{path}", json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["field"] == field
    answer = await http.post("/v1/consumers/g-rest-bad", json={"topics": ["solo"], "retryTopic": "nosuch"})
    assert answer.status_code == 404 and answer.json()["error"]["field"] == "retryTopic"
    assert "nosuch" in answer.json()["error"]["message"]


async def test_sse_carries_the_delivery_attempt_of_a_retried_message(http: httpx.AsyncClient) -> None:
    await http.post("/v1/topics/solo/messages", json={"messages": [{"value": "again"}]})
    base = await _create(http, "g-sse-nack")
    async with http.stream("GET", f"{base}/stream", params={"format": "utf8"}) as response:
        reader = SseReader(response)
        [event] = await reader.read(1)
        first = json.loads(event.data)
        assert first["deliveryAttempt"] == 1 and event.id == first["token"]
        answer = await http.post(f"{base}/nacks", json={"tokens": [first["token"]]})
        assert answer.json()["retried"] == 1
        [event] = await reader.read(1)
        back = json.loads(event.data)
        assert back["value"] == "again" and back["deliveryAttempt"] == 2 and back["token"] != first["token"]


# --- gRPC -------------------------------------------------------------------------------------------


@pytest.fixture
async def grpc_gw(tmp_path: Path) -> AsyncIterator[GrpcGateway]:
    topics = [TopicSpec("solo", 1), TopicSpec("retry", 2), TopicSpec("dlq", 1)]
    async with consumer_gateway(topics, tmp_path / "data") as served:
        yield served


async def _grpc_poll(gw: GrpcGateway, group: str, instance: str, count: int) -> list[pb.ConsumedMessage]:
    got: list[pb.ConsumedMessage] = []
    async with asyncio.timeout(15):
        while len(got) < count:
            answer = await gw.stub.Poll(pb.PollRequest(group=group, instance_id=instance, timeout_ms=500))
            got.extend(answer.messages)
    return got


async def test_grpc_nack_dead_letter_and_deadlines(grpc_gw: GrpcGateway) -> None:
    gw = grpc_gw
    await gw.stub.Publish(pb.PublishRequest(topic="solo", messages=[message(f"g{i}") for i in range(3)]))
    created = await gw.stub.CreateConsumer(
        pb.CreateConsumerRequest(
            group="g-grpc-nack",
            topics=["solo"],
            start_position=pb.START_POSITION_EARLIEST,
            retry_topic="retry",
            dead_letter_topic="dlq",
            max_delivery_attempts=2,
            ack_deadline_ms=60_000,
        )
    )
    group, instance = "g-grpc-nack", created.instance_id
    first = await _grpc_poll(gw, group, instance, 3)
    assert [m.delivery_attempt for m in first] == [1, 1, 1]
    assert all(m.deadline > time.time() * 1000 + 50_000 for m in first)
    extended = await gw.stub.ExtendDeadlines(
        pb.ExtendDeadlinesRequest(
            group=group, instance_id=instance, tokens=[first[0].token], extend_ms=120_000
        )
    )
    assert extended.extended == 1 and extended.deadline > time.time() * 1000 + 100_000
    nacked = await gw.stub.Nack(
        pb.NackRequest(group=group, instance_id=instance, tokens=[first[1].token], delay_ms=100)
    )
    assert (nacked.retried, nacked.dead_lettered, nacked.pending) == (1, 0, 2)
    await gw.stub.Commit(
        pb.CommitRequest(group=group, instance_id=instance, tokens=[first[0].token, first[2].token])
    )
    [back] = await _grpc_poll(gw, group, instance, 1)
    assert back.value == b"g1" and back.delivery_attempt == 2
    assert (back.topic, back.partition_key, back.message_id) == (
        "solo",
        first[1].partition_key,
        first[1].message_id,
    )
    nacked = await gw.stub.Nack(pb.NackRequest(group=group, instance_id=instance, tokens=[back.token]))
    assert (nacked.retried, nacked.dead_lettered) == (0, 1)
    reader = await gw.stub.CreateConsumer(
        pb.CreateConsumerRequest(
            group="g-grpc-dlq", topics=["dlq"], start_position=pb.START_POSITION_EARLIEST
        )
    )
    [letter] = await _grpc_poll(gw, "g-grpc-dlq", reader.instance_id, 1)
    assert letter.value == b"g1" and letter.attributes["gateway.deliveryAttempts"] == "2"
    # Subscribe carries the attempt too
    await gw.stub.Publish(pb.PublishRequest(topic="solo", messages=[message("sub")]))
    stream = gw.stub.Subscribe(pb.SubscribeRequest(group=group, instance_id=instance))
    async with asyncio.timeout(10):
        response = await stream.read()
    stream.cancel()
    assert [m.delivery_attempt for m in response.messages] == [1]
    assert base64.b64encode(response.messages[0].value) == base64.b64encode(b"sub")


async def test_rest_seek_moves_back_and_names_bad_fields(http: httpx.AsyncClient) -> None:
    answer = await http.post(
        "/v1/topics/solo/messages", json={"messages": [{"value": f"s{i}"} for i in range(3)]}
    )
    results = answer.json()["results"]
    base = await _create(http, "g-rest-seek")
    first = await _poll_until(http, base, 3)
    await http.post(f"{base}/commits", json={})
    key = results[1]["partitionKey"]
    body = {"position": "offsets", "offsets": {key: results[1]["offset"]}}
    moved = await http.post(f"{base}/seek", json=body)
    assert moved.status_code == 200, moved.text
    assert moved.json() == {
        "partitions": [
            {
                "partitionKey": key,
                "currOffset": results[1]["offset"],
                "maxOffset": moved.json()["partitions"][0]["maxOffset"],
            }
        ]
    }
    again = await _poll_until(http, base, 2)
    assert [m["value"] for m in again] == [m["value"] for m in first[1:]]
    bad = await http.post(f"{base}/seek", json={"position": "offsets", "offsets": {"7:solo:0": 0}})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "offsets"
    bad = await http.post(f"{base}/seek", json={"position": "sideways"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "position"


async def test_grpc_seek_to_earliest(grpc_gw: GrpcGateway) -> None:
    gw = grpc_gw
    await gw.stub.Publish(pb.PublishRequest(topic="solo", messages=[message(f"e{i}") for i in range(2)]))
    created = await gw.stub.CreateConsumer(
        pb.CreateConsumerRequest(
            group="g-grpc-seek", topics=["solo"], start_position=pb.START_POSITION_EARLIEST
        )
    )
    first = await _grpc_poll(gw, "g-grpc-seek", created.instance_id, 2)
    await gw.stub.Commit(
        pb.CommitRequest(group="g-grpc-seek", instance_id=created.instance_id, all_delivered=True)
    )
    moved = await gw.stub.Seek(
        pb.SeekRequest(
            group="g-grpc-seek", instance_id=created.instance_id, position=pb.START_POSITION_EARLIEST
        )
    )
    assert [p.partition_key for p in moved.partitions] == [first[0].partition_key]
    again = await _grpc_poll(gw, "g-grpc-seek", created.instance_id, 2)
    assert [m.value for m in again] == [m.value for m in first]
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await gw.stub.Seek(pb.SeekRequest(group="g-grpc-seek", instance_id=created.instance_id))
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
