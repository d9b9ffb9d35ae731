"""REST publish against the embedded cluster: every message answered 200 is stored by a broker."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.api.app import create_app
from gateway.embedded.cluster import EmbeddedCluster
from gateway.runtime import Runtime
from tests.support.grpc_support import TOPICS, gateway_settings
from tests.support.tubemq_readback import StoredMessage, read_topic

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins(
    "gateway.api._publish_parse",
    "gateway.api._publish_render",
    "gateway.tubemq.wire._slots",
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=2, data_dir=tmp_path / "data") as c:
        yield c


@pytest.fixture
async def gateway(cluster: EmbeddedCluster) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    runtime = Runtime(gateway_settings(cluster, limits={"max_batch_messages": 200}))
    await runtime.start()
    app = create_app(runtime=runtime)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            yield client, runtime
    finally:
        await runtime.stop()


async def stored(cluster: EmbeddedCluster, runtime: Runtime, topic: str, group: str) -> list[StoredMessage]:
    assert runtime.pool is not None
    spec = next(t for t in TOPICS if t.name == topic)
    brokers = {b.broker_id: b.address for b in cluster.brokers if b.is_serving}
    return await read_topic(runtime.pool, brokers, topic, spec.partition_ids(), group)


async def test_batches_are_stored_with_their_fields(
    gateway: tuple[httpx.AsyncClient, Runtime], cluster: EmbeddedCluster
) -> None:
    client, runtime = gateway
    sent: dict[str, dict[str, Any]] = {}
    for batch in range(10):
        messages = []
        for j in range(100):
            i = batch * 100 + j
            messages.append(
                {
                    "value": f"message-{i}",
                    "attributes": {"i": str(i), "region": "eu"},
                    "streamId": f"s{i % 3}",
                    "msgTime": "202611221200",
                }
            )
        r = await client.post("/v1/topics/demo/messages", json={"messages": messages})
        assert r.status_code == 200, r.text
        for result in r.json()["results"]:
            assert result["status"] == 200
            sent[str(batch * 100 + result["index"])] = result
    rows = await stored(cluster, runtime, "demo", "readback-1")
    assert len(rows) == 1000
    by_index = {row.attributes["i"]: row for row in rows}
    assert len(by_index) == 1000
    for i, result in sent.items():
        row = by_index[i]
        assert row.body == f"message-{i}".encode()
        assert row.attributes == {"i": i, "region": "eu"}
        assert row.stream_id == f"s{int(i) % 3}"
        assert row.msg_time == "202611221200"
        assert (row.broker_id, row.partition_id) == (result["brokerId"], result["partitionId"])
        assert row.message_id == int(result["messageId"])
    # round-robin spreads unkeyed messages over every partition of both brokers
    assert len({(r.broker_id, r.partition_id) for r in rows}) == 8


async def test_one_key_one_partition_in_order(
    gateway: tuple[httpx.AsyncClient, Runtime], cluster: EmbeddedCluster
) -> None:
    client, runtime = gateway
    messages = [{"value": str(i), "key": "customer-42"} for i in range(60)]
    r = await client.post("/v1/topics/demo/messages", json={"messages": messages})
    assert r.status_code == 200, r.text
    keys = {res["partitionKey"] for res in r.json()["results"]}
    assert len(keys) == 1
    rows = await stored(cluster, runtime, "demo", "readback-2")
    assert [row.body for row in rows] == [str(i).encode() for i in range(60)]


async def test_batch_wider_than_the_publish_concurrency(cluster: EmbeddedCluster) -> None:
    # More independent units (free messages and key chains) than sends allowed in flight: they queue for
    # the limit, and each key still goes out in batch order.
    runtime = Runtime(gateway_settings(cluster, limits={"publish_concurrency": 2}))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        messages: list[dict[str, str]] = []
        for i in range(5):
            messages += [{"value": f"a{i}", "key": "k-a"}, {"value": f"f{i}"}]
            messages.append({"value": f"b{i}", "key": "k-b"})
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            r = await client.post("/v1/topics/demo/messages", json={"messages": messages})
        assert r.status_code == 200, r.text
        assert [res["index"] for res in r.json()["results"]] == list(range(15))
        rows = [row.body for row in await stored(cluster, runtime, "demo", "readback-wide")]
        assert sorted(rows) == sorted(m["value"].encode() for m in messages)
        for prefix in (b"a", b"b"):
            in_order = [prefix + str(i).encode() for i in range(5)]
            assert [body for body in rows if body.startswith(prefix)] == in_order
    finally:
        await runtime.stop()


async def test_explicit_partition_and_topic_view(gateway: tuple[httpx.AsyncClient, Runtime]) -> None:
    client, _ = gateway
    topic = (await client.get("/v1/topics/demo")).json()
    assert len(topic["partitions"]) == 8
    assert topic["maxMessageSize"] > 0
    target = topic["partitions"][5]
    r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "x", "partition": 5}]})
    assert r.status_code == 200
    assert r.json()["results"][0]["partitionKey"] == target["partitionKey"]
    assert r.json()["results"][0]["partition"] == 5


async def test_every_result_names_its_partition_index(gateway: tuple[httpx.AsyncClient, Runtime]) -> None:
    # `partition` is the index into GET /v1/topics/{topic} partitions: the one naming the same partition.
    client, _ = gateway
    by_key = {
        p["partitionKey"]: p["index"] for p in (await client.get("/v1/topics/demo")).json()["partitions"]
    }
    r = await client.post(
        "/v1/topics/demo/messages", json={"messages": [{"value": str(i)} for i in range(40)]}
    )
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert all(res["partition"] == by_key[res["partitionKey"]] for res in results)
    assert {res["partition"] for res in results} == set(range(8))
    keyed = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "k", "key": "c-7"}]})
    assert keyed.json()["results"][0]["partition"] == by_key[keyed.json()["results"][0]["partitionKey"]]
    raw = await client.post(
        "/v1/topics/demo/messages",
        content=b"raw",
        headers={"content-type": "application/octet-stream", "x-tubemq-partition": "3"},
    )
    assert raw.status_code == 200, raw.text
    assert raw.json()["results"][0]["partition"] == 3


async def test_encodings_and_raw_body(
    gateway: tuple[httpx.AsyncClient, Runtime], cluster: EmbeddedCluster
) -> None:
    client, runtime = gateway
    payload = bytes(range(256))
    r = await client.post(
        "/v1/topics/small/messages",
        json={
            "messages": [
                {"value": base64.b64encode(payload).decode(), "encoding": "base64", "attributes": {"n": "0"}},
                {"value": {"a": [1, 2]}, "encoding": "json", "attributes": {"n": "1"}},
            ]
        },
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        "/v1/topics/small/messages",
        content=b"\x00raw\xff",
        headers={
            "content-type": "application/octet-stream",
            "x-tubemq-attributes": "n=2,kind=raw",
            "x-tubemq-stream-id": "bin",
            "x-tubemq-key": "k",
        },
    )
    assert r.status_code == 200, r.text
    rows = {row.attributes["n"]: row for row in await stored(cluster, runtime, "small", "readback-3")}
    assert rows["0"].body == payload
    assert json.loads(rows["1"].body) == {"a": [1, 2]}
    assert rows["2"].body == b"\x00raw\xff"
    assert rows["2"].attributes == {"n": "2", "kind": "raw"}
    assert rows["2"].stream_id == "bin"


@pytest.mark.parametrize(
    ("body", "field", "index"),
    [
        (b"not json", "body", None),
        (b'{"other": 1}', "messages", None),
        (b'{"messages": []}', "messages", None),
        (b'{"messages": [{"value": "a"}, {"encoding": "utf8"}]}', "messages[1].value", 1),
        (b'{"messages": [{"value": "a", "encoding": "rot13"}]}', "messages[0].encoding", 0),
        (b'{"messages": [{"value": "***", "encoding": "base64"}]}', "messages[0].value", 0),
        (b'{"messages": [{"value": 5}]}', "messages[0].value", 0),
        (b'{"messages": [{"value": "a", "attributes": {"k": "x,y"}}]}', "messages[0].attributes.k", 0),
        (b'{"messages": [{"value": "a", "attributes": {"k=": "v"}}]}', "messages[0].attributes", 0),
        (b'{"messages": [{"value": "a", "attributes": {"k": 1}}]}', "messages[0].attributes", 0),
        (b'{"messages": [{"value": "a", "msgTime": "2026-11-22"}]}', "messages[0].msgTime", 0),
        (b'{"messages": [{"value": "a", "streamId": "a=b"}]}', "messages[0].streamId", 0),
        (b'{"messages": [{"value": "a", "partition": "x"}]}', "messages[0].partition", 0),
        (b'{"messages": [{"value": "a", "partition": -1}]}', "messages[0].partition", 0),
        (b'{"messages": [{"value": ""}]}', "messages[0].value", 0),
        (b'{"messages": [{"value": "a", "colour": "red"}]}', "messages[0].colour", 0),
    ],
)
async def test_bad_requests_name_the_field(
    gateway: tuple[httpx.AsyncClient, Runtime], body: bytes, field: str, index: int | None
) -> None:
    client, _ = gateway
    r = await client.post(
        "/v1/topics/demo/messages", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_argument"
    assert error["field"] == field
    assert error.get("index") == index
    assert error["message"]


async def test_partition_out_of_range_and_bad_topic(gateway: tuple[httpx.AsyncClient, Runtime]) -> None:
    client, _ = gateway
    r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a", "partition": 99}]})
    assert r.status_code == 400, r.text
    r = await client.post("/v1/topics/9bad/messages", json={"messages": [{"value": "a"}]})
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "topic"
    r = await client.post("/v1/topics/nosuchtopic/messages", json={"messages": [{"value": "a"}]})
    assert r.status_code == 404, r.text
    r = await client.get("/v1/topics/nosuchtopic")
    assert r.status_code == 404


async def test_too_many_messages_and_unsupported_type(gateway: tuple[httpx.AsyncClient, Runtime]) -> None:
    client, _ = gateway
    r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a"}] * 201})
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "messages"
    r = await client.post("/v1/topics/demo/messages", content=b"a", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert r.json()["error"]["field"] == "Content-Type"
    r = await client.post(
        "/v1/topics/demo/messages",
        content=b"a",
        headers={"content-type": "application/octet-stream", "x-tubemq-partition": "two"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "X-TubeMQ-Partition"


async def test_oversize_message_is_413_with_the_limit(gateway: tuple[httpx.AsyncClient, Runtime]) -> None:
    client, _ = gateway
    limit = (await client.get("/v1/topics/demo")).json()["maxMessageSize"]
    big = "x" * (limit + 1)
    r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "ok"}, {"value": big}]})
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["limit"] == limit
    assert error["index"] == 1
    assert error["field"] == "messages[1].value"
    r = await client.post(
        "/v1/topics/demo/messages", content=big.encode(), headers={"content-type": "application/octet-stream"}
    )
    assert r.status_code == 413
    assert r.json()["error"]["field"] == "message.value"


async def test_request_body_limit_is_413(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(gateway_settings(cluster, limits={"max_request_bytes": 2048}))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "y" * 4096}]})
            assert r.status_code == 413
            assert r.json()["error"]["limit"] == 2048
    finally:
        await runtime.stop()


async def test_no_broker_is_503_with_retry_after(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(gateway_settings(cluster, producer={"send_timeout": 2.0, "rpc_timeout": 0.5}))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a"}]})
            assert r.status_code == 200
            await cluster.stop_broker(1)
            await cluster.stop_broker(2)
            r = await client.post(
                "/v1/topics/demo/messages", json={"messages": [{"value": "b"}, {"value": "c"}]}
            )
            assert r.status_code == 503, r.text
            assert int(r.headers["retry-after"]) >= 1
            assert all(res["status"] == 503 for res in r.json()["results"])
    finally:
        await runtime.stop()


async def test_stopped_broker_is_shielded_and_nothing_acknowledged_is_lost(cluster: EmbeddedCluster) -> None:
    settings = gateway_settings(
        cluster,
        producer={
            # No heartbeat during the test: its answer would drop the stopped broker from the route (the
            # master no longer lists it), and the topic view only reports shielded brokers of the route.
            "heartbeat_interval": 60.0,
            "failure_threshold": 2,
            "failure_cooldown": 30.0,
            "rpc_timeout": 1.0,
            "max_send_attempts": 3,
        },
    )
    runtime = Runtime(settings)
    await runtime.start()
    acknowledged: set[str] = set()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            for batch in range(12):
                if batch == 4:
                    await cluster.stop_broker(2)
                messages = [
                    {"value": f"v{batch}-{j}", "attributes": {"id": f"{batch}-{j}"}} for j in range(25)
                ]
                r = await client.post("/v1/topics/demo/messages", json={"messages": messages})
                assert r.status_code in (200, 207), r.text
                for res in r.json()["results"]:
                    if res["status"] == 200:
                        acknowledged.add(f"{batch}-{res['index']}")
                if batch >= 6:
                    # once shielded, every message goes through the remaining broker
                    assert r.status_code == 200, r.text
            topic = (await client.get("/v1/topics/demo")).json()
            # Broker 2 gets no traffic: shielded by the producer, or already dropped from the topic's
            # route because the master stopped listing it (whichever the heartbeat timing made first).
            assert 2 in topic["shieldedBrokers"] or all(p["brokerId"] != 2 for p in topic["partitions"])
        await cluster.start_broker(2)
        await asyncio.sleep(0.2)
        rows = await stored(cluster, runtime, "demo", "readback-4")
        assert acknowledged <= {row.attributes["id"] for row in rows}
        assert len(acknowledged) >= 12 * 25 - 25
    finally:
        await runtime.stop()


async def test_standby_master_first_is_skipped(tmp_path: Path) -> None:
    async with EmbeddedCluster(TOPICS, brokers=1, standby_master=True) as cluster:
        assert len(cluster.master_addresses) == 2
        runtime = Runtime(gateway_settings(cluster))
        await runtime.start()
        try:
            app = create_app(runtime=runtime)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gw"
            ) as client:
                r = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a"}]})
                assert r.status_code == 200, r.text
                ready = await client.get("/readyz")
                assert ready.status_code == 200, ready.text
            assert runtime.producer is not None
            assert runtime.producer.master == cluster.master_address
        finally:
            await runtime.stop()
