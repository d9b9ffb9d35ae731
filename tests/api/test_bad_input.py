"""Every bad input of issue #11 answered 4xx with the API's error body naming the field, never 500, over REST
(through the real app) and gRPC (INVALID_ARGUMENT); the gateway still publishes and consumes afterwards."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.runtime import Runtime
from tests.support.grpc_support import detail_of, message, running_gateway

PUBLISH = "/v1/topics/demo/messages"
OCTETS = {"content-type": "application/octet-stream"}
JSON = {"content-type": "application/json"}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1, data_dir=tmp_path / "data") as c:
        yield c


def settings(cluster: EmbeddedCluster) -> Settings:
    return Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
        consumers={"heartbeat_interval": 0.2, "assignment_wait": 1.0},
        # Bodies large enough for the validation to be reached (the default is answered 413 earlier).
        limits={"max_control_body_bytes": 16 * 1024 * 1024},
    )


@pytest.fixture
async def http(cluster: EmbeddedCluster) -> AsyncIterator[httpx.AsyncClient]:
    runtime = Runtime(settings(cluster))
    await runtime.start()
    try:
        transport = httpx.ASGITransport(app=create_app(runtime=runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client
    finally:
        await runtime.stop()


def refused(answer: httpx.Response, field: str | None, status: int = 400) -> dict[str, Any]:
    """The answer is ``status`` with the API's error body naming ``field`` (None: any field or none)."""
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] and error["message"]
    # Every error body quotes the request id of the X-Request-ID answer header.
    assert answer.json()["requestId"] == answer.headers["x-request-id"]
    if field is not None:
        assert error.get("field") == field, error
    return error


async def healthy(http: httpx.AsyncClient) -> None:
    """The gateway still publishes and reports healthy."""
    answer = await http.post(PUBLISH, json={"messages": [{"value": "still fine"}]})
    assert answer.status_code == 200, answer.text
    assert (await http.get("/healthz")).status_code == 200


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def body(message: dict[str, Any]) -> str:
    """A publish body with one message, as text (json.dumps keeps lone surrogates as escapes)."""
    return json.dumps({"messages": [message]})


PUBLISH_CASES: list[tuple[str, str, str]] = [
    ("empty attribute value", body({"value": "v", "attributes": {"a": ""}}), "messages[0].attributes.a"),
    ("blank attribute value", body({"value": "v", "attributes": {"a": " "}}), "messages[0].attributes.a"),
    ("blank attribute key", body({"value": "v", "attributes": {" ": "x"}}), "messages[0].attributes"),
    ("msgTime with a space", body({"value": "v", "msgTime": "202401 11230"}), "messages[0].msgTime"),
    (
        "msgTime with non-ASCII digits",
        body({"value": "v", "msgTime": "".join(chr(0xFF10 + int(d)) for d in "202401011230")}),
        "messages[0].msgTime",
    ),
    ("surrogate value", body({"value": "\ud800"}), "messages[0].value"),
    ("surrogate value with a key", body({"value": "\udfff", "key": "k"}), "messages[0].value"),
    ("surrogate key", body({"value": "v", "key": "\ud800"}), "messages[0].key"),
    (
        "surrogate attribute value",
        body({"value": "v", "attributes": {"a": "\ud800"}}),
        "messages[0].attributes.a",
    ),
    (
        "surrogate attribute key",
        body({"value": "v", "attributes": {"\ud800": "x"}}),
        "messages[0].attributes",
    ),
    ("surrogate streamId", body({"value": "v", "streamId": "\ud800"}), "messages[0].streamId"),
    ("surrogate json value", body({"value": {"a": "\ud800"}, "encoding": "json"}), "messages[0].value"),
    ("json value 5,000 deep", '{"messages":[{"encoding":"json","value":' + nested(5000) + "}]}", "body"),
    ("body 100,000 deep", nested(100_000), "body"),
]


@pytest.mark.parametrize(("case", "text", "field"), PUBLISH_CASES, ids=[c[0] for c in PUBLISH_CASES])
async def test_bad_publish_bodies_are_400(http: httpx.AsyncClient, case: str, text: str, field: str) -> None:
    refused(await http.post(PUBLISH, content=text.encode("utf-8", "surrogatepass"), headers=JSON), field)
    await healthy(http)


async def test_a_json_value_nested_deep_but_not_absurdly_is_published(http: httpx.AsyncClient) -> None:
    text = '{"messages":[{"encoding":"json","value":' + nested(200) + "}]}"
    assert (await http.post(PUBLISH, content=text, headers=JSON)).status_code == 200


@pytest.mark.parametrize(
    ("header", "value", "field"),
    [
        ("x-tubemq-attributes", "a=", "message.attributes.a"),
        ("x-tubemq-attributes", "a= ", "message.attributes.a"),
        ("x-tubemq-attributes", "=x", "X-TubeMQ-Attributes"),
        ("x-tubemq-msg-time", "202401 11230", "message.msgTime"),
        ("x-tubemq-partition", "²".encode("latin-1"), "X-TubeMQ-Partition"),
        ("x-tubemq-stream-id", " ", "message.streamId"),
    ],
)
async def test_bad_raw_publish_headers_are_400(
    http: httpx.AsyncClient, header: str, value: str | bytes, field: str | None
) -> None:
    refused(await http.post(PUBLISH, content=b"v", headers={**OCTETS, header: value}), field)
    await healthy(http)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/topics/%20/partitions", "topic"),
        ("/v1/topics/a%00b/partitions", "topic"),
        ("/v1/topics/" + "t" * 65 + "/partitions", "topic"),
        ("/v1/topics/d%C3%A9mo/partitions", "topic"),
        ("/v1/topics/%20/partitions/1:demo:0/messages?from=0&to=1", "topic"),
        ("/v1/topics/%20", "topic"),
    ],
)
async def test_bad_topic_names_are_400_everywhere(http: httpx.AsyncClient, path: str, field: str) -> None:
    refused(await http.get(path), field)
    await healthy(http)


CREATE_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("group outside Latin-1", "gr%E2%82%ACoup", {"topics": ["demo"]}, "group"),
    ("group with NUL", "g%00x", {"topics": ["demo"]}, "group"),
    ("group with a newline", "gx%0A", {"topics": ["demo"]}, "group"),
    ("group with Latin-1", "gr%E9", {"topics": ["demo"]}, "group"),
    ("group too long", "g" * 1025, {"topics": ["demo"]}, "group"),
    ("blank topic", "grp", {"topics": [" "]}, "topics[0]"),
    ("topic of 5 MB", "grp", {"topics": ["t" * 5_000_000]}, "topics[0]"),
    ("topic with a surrogate", "grp", {"topics": ["\ud800"]}, "topics[0]"),
    (
        "filter item with a surrogate",
        "grp",
        {"topics": ["demo"], "filters": {"demo": ["\ud800"]}},
        "filters.demo",
    ),
    (
        "sourceCount 2^40",
        "grp",
        {
            "topics": ["demo"],
            "startPosition": "offsets",
            "offsets": {"1:demo:0": 0},
            "sessionKey": "s",
            "sourceCount": 2**40,
        },
        "sourceCount",
    ),
    (
        "sessionKey with a surrogate",
        "grp",
        {"topics": ["demo"], "startPosition": "offsets", "offsets": {"1:demo:0": 0}, "sessionKey": "\ud800"},
        "sessionKey",
    ),
    ("body 100,000 deep", "grp", {"topics": ["demo"], "x": "NESTED"}, "body"),
]


@pytest.mark.parametrize(("case", "group", "doc", "field"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES])
async def test_bad_consumer_creations_are_400_and_create_nothing(
    http: httpx.AsyncClient, case: str, group: str, doc: dict[str, Any], field: str
) -> None:
    text = json.dumps(doc).replace('"NESTED"', nested(100_000))
    answer = await http.post(
        f"/v1/consumers/{group}", content=text.encode("utf-8", "surrogatepass"), headers=JSON
    )
    refused(answer, field)
    runtime: Runtime = http._transport.app.state.runtime  # type: ignore[attr-defined]
    assert runtime.consumers is not None and runtime.consumers.instance_count == 0
    await healthy(http)


async def test_bad_tokens_and_event_ids_are_400(http: httpx.AsyncClient) -> None:
    created = await http.post("/v1/consumers/grp", json={"topics": ["demo"]})
    assert created.status_code == 201, created.text
    base = created.json()["baseUrl"].split("://", 1)[1].split("/", 1)[1]
    base = "/" + base
    refused(await http.post(f"{base}/commits", json={"tokens": ["²"]}), "tokens[0]")
    refused(await http.post(f"{base}/commits", json={"tokens": ["1", "١٢"]}), "tokens[1]")
    refused(await http.get(f"{base}/stream", headers={"Last-Event-ID": "²".encode("latin-1")}), None)
    refused(await http.get(f"{base}/stream?last_event_id=%C2%B2"), "Last-Event-ID")
    assert (await http.delete(base)).status_code == 204
    await healthy(http)


async def test_unknown_routes_and_methods_answer_in_the_api_error_shape(http: httpx.AsyncClient) -> None:
    error = refused(await http.get("/v1/nowhere"), None, 404)
    assert error["code"] == "not_found"
    answer = await http.put(PUBLISH, content=b"x")
    error = refused(answer, None, 405)
    assert error["code"] == "method_not_allowed"
    assert answer.headers["allow"] == "POST"
    # One path, two routes (GET describes, DELETE leaves): Allow names both.
    answer = await http.put("/v1/consumers/grp/instances/abc", content=b"x")
    refused(answer, None, 405)
    assert answer.headers["allow"] == "DELETE, GET, HEAD"
    # A JSON body FastAPI cannot read is 400 in the same shape.
    refused(await http.post("/v1/consumers/grp", content=b"\xff\xfe", headers=JSON), None)
    await healthy(http)


# --- gRPC ---------------------------------------------------------------------------------------------


async def test_grpc_bad_input_is_invalid_argument(cluster: EmbeddedCluster) -> None:
    async with running_gateway(cluster, settings(cluster)) as gw:
        bad_messages = [
            (message("v", attributes={"a": ""}), "messages[0].attributes.a"),
            (message("v", attributes={"a": " "}), "messages[0].attributes.a"),
            (message("v", attributes={" ": "x"}), "messages[0].attributes"),
            (message("v", msg_time="202401 11230"), "messages[0].msgTime"),
        ]
        for bad, field in bad_messages:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[bad]))
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
            assert detail_of(caught.value).field == field
        creations = [
            (pb.CreateConsumerRequest(group="gr€", topics=["demo"]), "group"),
            (pb.CreateConsumerRequest(group="g\x00x", topics=["demo"]), "group"),
            (pb.CreateConsumerRequest(group="grp", topics=["t" * 4_000_000]), "topics[0]"),
            (pb.CreateConsumerRequest(group="grp", topics=[" "]), "topics[0]"),
        ]
        for request, field in creations:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub.CreateConsumer(request)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
            assert detail_of(caught.value).field == field
        assert gw.runtime.consumers is not None and gw.runtime.consumers.instance_count == 0
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.GetTopic(pb.GetTopicRequest(topic=" "))
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        created = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="grp", topics=["demo"]))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.Commit(pb.CommitRequest(group="grp", instance_id=created.instance_id, tokens=["²"]))
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in gw.stub.Subscribe(
                pb.SubscribeRequest(group="grp", instance_id=created.instance_id, resume_token="²")
            ):
                pass
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # Healthy afterwards.
        answer = await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("ok")]))
        assert answer.failed == 0
