"""The publish key travels through TubeMQ as the reserved attribute ``$msgKey$`` and comes back to every
consumer: REST poll, SSE, range reads, gRPC Poll and Subscribe, the Spark rows. A user attribute of that
name is refused (400 / INVALID_ARGUMENT), so a client cannot pass one off as the key. Real sockets against
the embedded cluster."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.tubemq.consumer.batch import ConsumedMessage
from gateway.tubemq.wire.payload import TOKEN_MSG_KEY
from tests.support.consumer_support import Env
from tests.support.gateway_support import Gateway, SseReader
from tests.support.grpc_support import gateway_settings, message, running_gateway

# keys a client may send: the usual, and one with every character the attribute text reserves
KEYS = ["customer-42", "a,b=c%d$msgTime$ ü"]


@pytest.fixture
async def http(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as client:
        yield client


def stored_attribute_text(env: Env, topic: str) -> list[str]:
    """The attribute text of every stored message, as a Java consumer's ``getAttribute()`` shows it."""
    out = []
    for m in env.cluster.brokers[0].store(topic).read(0, 0).messages:
        length = int.from_bytes(m.data[:4], "big") if m.flag & 1 else 0
        out.append(m.data[4 : 4 + length].decode() if length else "")
    return out


async def test_rest_poll_sse_and_range_reads_return_the_key(env: Env, http: httpx.AsyncClient) -> None:
    body = {
        "messages": [
            {"value": "k0", "key": KEYS[0], "attributes": {"region": "eu"}},
            {"value": "k1", "key": KEYS[1]},
            {"value": "plain"},
        ]
    }
    answer = await http.post("/v1/topics/solo/messages", json=body)
    assert answer.status_code == 200, answer.text
    raw = await http.post(
        "/v1/topics/solo/messages",
        content=b"raw",
        headers={"content-type": "application/octet-stream", "x-tubemq-key": "hdr-key"},
    )
    assert raw.status_code == 200, raw.text
    # what a Java consumer sees: getAttrValue("$msgKey$") gives the key (separators escaped)
    assert stored_attribute_text(env, "solo") == [
        "$msgKey$=customer-42,region=eu",
        "$msgKey$=a%2Cb%3Dc%25d%24msgTime%24 ü",
        "",
        "$msgKey$=hdr-key",
    ]
    expected = [
        ("k0", KEYS[0], {"region": "eu"}),
        ("k1", KEYS[1], {}),
        ("plain", None, {}),
        ("raw", "hdr-key", {}),
    ]

    created = await http.post("/v1/consumers/key-g", json={"topics": ["solo"], "startPosition": "earliest"})
    base = created.json()["baseUrl"]
    polled = (await http.get(f"{base}/messages", params={"format": "utf8", "timeout_ms": 3000})).json()
    assert [(m["value"], m["key"], m["attributes"]) for m in polled["messages"]] == expected
    await http.post(f"{base}/commits", json={"consumed": False})  # roll back: the stream gets them again
    async with http.stream("GET", f"{base}/stream", params={"format": "utf8"}) as response:
        events = await SseReader(response).read(4)
    streamed = [json.loads(e.data) for e in events]
    assert [(m["value"], m["key"], m["attributes"]) for m in streamed] == expected

    ranged = await http.get("/v1/topics/solo/partitions/1:solo:0/messages", params={"from": 0, "to": 112})
    assert ranged.status_code == 200, ranged.text
    rows = ranged.json()["messages"]
    assert [(base64.b64decode(m["value"]).decode(), m["key"]) for m in rows] == [
        (v, k) for v, k, _ in expected
    ]


@pytest.mark.parametrize("name", [TOKEN_MSG_KEY, "x$msgKey$"])
async def test_rest_refuses_a_user_attribute_named_like_the_key(http: httpx.AsyncClient, name: str) -> None:
    spoof = {"messages": [{"value": "v", "attributes": {name: "spoofed"}}]}
    answer = await http.post("/v1/topics/solo/messages", json=spoof)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["field"] == "messages[0].attributes" and "$msgKey$" in error["message"]
    header = await http.post(
        "/v1/topics/solo/messages",
        content=b"v",
        headers={"content-type": "application/octet-stream", "x-tubemq-attributes": f"{name}=spoofed"},
    )
    assert header.status_code == 400, header.text
    assert "$msgKey$" in header.json()["error"]["message"]


async def test_grpc_poll_and_subscribe_return_the_key() -> None:
    async with (
        EmbeddedCluster([TopicSpec("solo", 1)], balance_period=0.1) as cluster,
        running_gateway(
            cluster,
            gateway_settings(
                cluster,
                consumers={"heartbeat_interval": 0.1, "empty_fetch_wait": 0.05, "assignment_wait": 5.0},
            ),
            subscribe_step=0.1,
        ) as gw,
    ):
        sent = [message("g0", key=KEYS[0]), message("g1", key=KEYS[1]), message("g2")]
        published = await gw.stub.Publish(pb.PublishRequest(topic="solo", messages=sent))
        assert published.failed == 0
        created = await gw.stub.CreateConsumer(
            pb.CreateConsumerRequest(
                group="key-grpc", topics=["solo"], start_position=pb.START_POSITION_EARLIEST
            )
        )
        polled = await gw.stub.Poll(
            pb.PollRequest(group="key-grpc", instance_id=created.instance_id, timeout_ms=3000)
        )
        got = [(m.value, m.key if m.HasField("key") else None) for m in polled.messages]
        assert got == [(b"g0", KEYS[0]), (b"g1", KEYS[1]), (b"g2", None)]
        assert all(TOKEN_MSG_KEY not in m.attributes for m in polled.messages)
        await gw.stub.Commit(
            pb.CommitRequest(
                group="key-grpc", instance_id=created.instance_id, all_delivered=True, rollback=True
            )
        )
        call = gw.stub.Subscribe(pb.SubscribeRequest(group="key-grpc", instance_id=created.instance_id))
        pushed: list[pb.ConsumedMessage] = []
        async with asyncio.timeout(10):
            while len(pushed) < 3:
                response = await call.read()
                assert response is not grpc.aio.EOF
                pushed.extend(response.messages)
        call.cancel()
        assert [(m.value, m.key if m.HasField("key") else None) for m in pushed] == got

        spoof = pb.PublishRequest(topic="solo", messages=[message("v", attributes={TOKEN_MSG_KEY: "x"})])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gw.stub.Publish(spoof)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "$msgKey$" in (refused.value.details() or "")


def test_spark_rows_carry_the_key() -> None:
    pytest.importorskip("pyarrow")
    from gateway.spark.arrow import ARROW_SCHEMA, from_messages

    rows = [
        ConsumedMessage(1, b"a", {}, None, None, 1, 0, 0, KEYS[1]),
        ConsumedMessage(2, b"b", {}, None, None, 0, 1, 28),
    ]
    batch = from_messages("solo", "1:solo:0", rows)
    assert batch.schema == ARROW_SCHEMA
    assert batch.column("key").to_pylist() == [KEYS[1], None]
