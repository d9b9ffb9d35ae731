"""Messages published through the gateway (REST, gRPC) and the client core, read back with the real Java
client: every field the Java client sees must be what the gateway said it stored."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import grpc
from interop_support import (
    DEMO,
    JavaClient,
    attributes_of,
    decode_value,
    group_name,
    java_client,
    java_consumer_ready,
    real_gateway,
    require_topic,
    run_tag,
)

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb


async def test_gateway_published_fields_read_back_by_the_java_client(java_root: Path) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("pub")
    async with (
        java_client(java_root, "consume", topic, group_name("pub"), tag, "150", "latest") as java,
        real_gateway() as gw,
    ):
        await java_consumer_ready(java)
        partitions = (await gw.http.get(f"/v1/topics/{topic}")).json()["partitions"]
        assert len(partitions) == DEMO[1]
        expected: list[dict[str, Any]] = []

        # REST: a JSON batch with every per-message option, and one raw binary message
        rest_messages: list[dict[str, Any]] = [
            {
                "value": f"{tag}-rest-key-a",
                "key": "customer-42",
                "attributes": {"region": "eu", "tier": "gold"},
            },
            {"value": f"{tag}-rest-key-b", "key": "customer-42", "streamId": "orders"},
            {"value": f"{tag}-rest-part", "partition": 2, "msgTime": "202611221200", "streamId": "billing"},
            {
                "value": base64.b64encode(tag.encode() + b"-rest-bin-\x00\xff\xfe").decode(),
                "encoding": "base64",
                "attributes": {"k": "v"},
                "msgTime": "202401010000",
            },
        ]
        answer = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": rest_messages})
        assert answer.status_code == 200, answer.text
        for sent, result in zip(rest_messages, answer.json()["results"], strict=True):
            value = (
                base64.b64decode(sent["value"])
                if sent.get("encoding") == "base64"
                else sent["value"].encode()
            )
            expected.append(
                {
                    "value": value,
                    "partitionKey": result["partitionKey"],
                    "messageId": result["messageId"],
                    "attributes": sent.get("attributes", {}),
                    "streamId": sent.get("streamId"),
                    "msgTime": sent.get("msgTime"),
                    "key": sent.get("key"),
                }
            )
        raw = await gw.http.post(
            f"/v1/topics/{topic}/messages",
            content=f"{tag}-rest-raw".encode(),
            headers={
                "content-type": "application/octet-stream",
                "x-tubemq-key": "customer-42",
                "x-tubemq-attributes": "a=1,b=2",
            },
        )
        assert raw.status_code == 200, raw.text
        raw_result = raw.json()["results"][0]
        expected.append(
            {
                "value": f"{tag}-rest-raw".encode(),
                "partitionKey": raw_result["partitionKey"],
                "messageId": raw_result["messageId"],
                "attributes": {"a": "1", "b": "2"},
                "streamId": None,
                "msgTime": None,
                "key": "customer-42",
            }
        )

        # gRPC
        grpc_messages = [
            pb.Message(value=f"{tag}-grpc-0".encode(), key="customer-42", attributes={"via": "grpc"}),
            pb.Message(
                value=f"{tag}-grpc-1".encode(), partition=0, stream_id="orders", msg_time="202611221201"
            ),
        ]
        results = []
        # the second gzip-compressed: inflated by the gateway (the server's core leaves it compressed)
        for sent, compression in ((grpc_messages[:1], None), (grpc_messages[1:], grpc.Compression.Gzip)):
            request = pb.PublishRequest(topic=topic, messages=sent)
            response = await gw.grpc_stub.Publish(request, compression=compression)
            assert response.failed == 0
            results += response.results
        for sent_pb, result_pb in zip(grpc_messages, results, strict=True):
            stored = result_pb.stored
            expected.append(
                {
                    "value": sent_pb.value,
                    "partitionKey": stored.partition_key,
                    "messageId": str(stored.message_id),
                    "attributes": dict(sent_pb.attributes),
                    "streamId": sent_pb.stream_id if sent_pb.HasField("stream_id") else None,
                    "msgTime": sent_pb.msg_time if sent_pb.HasField("msg_time") else None,
                    "key": sent_pb.key if sent_pb.HasField("key") else None,
                }
            )

        # the client core
        producer = gw.runtime.producer
        assert producer is not None
        await producer.register_topic(topic)
        core = await producer.send(
            topic,
            f"{tag}-core".encode(),
            partition=partitions[1]["partitionKey"],
            attributes={"x": "y"},
            stream_id="core",
            msg_time="202501021304",
        )
        expected.append(
            {
                "value": f"{tag}-core".encode(),
                "partitionKey": core.partition_key,
                "messageId": str(core.message_id),
                "attributes": {"x": "y"},
                "streamId": "core",
                "msgTime": "202501021304",
                "key": None,
            }
        )

        await java.wait_for(
            lambda c: len(c.messages()) >= len(expected),
            60.0,
            f"{len(expected)} messages at the Java consumer",
        )
        _compare(expected, java)

        # where the gateway put them: one key = one partition, an explicit partition index = that partition
        by_value = {e["value"]: e for e in expected}
        keyed_values = [v for v in by_value if b"-key-" in v or b"-raw" in v or v.endswith(b"grpc-0")]
        keyed = [by_value[v]["partitionKey"] for v in keyed_values]
        assert len(set(keyed)) == 1, f"one key went to several partitions: {keyed}"
        assert by_value[f"{tag}-rest-part".encode()]["partitionKey"] == partitions[2]["partitionKey"]
        assert by_value[f"{tag}-grpc-1".encode()]["partitionKey"] == partitions[0]["partitionKey"]
        assert by_value[f"{tag}-core".encode()]["partitionKey"] == partitions[1]["partitionKey"]


def _compare(expected: list[dict[str, Any]], java: JavaClient) -> None:
    seen = {decode_value(m): m for m in java.messages()}
    assert len(seen) == len(java.messages()), "the Java consumer got a message twice"
    assert set(seen) == {e["value"] for e in expected}
    for want in expected:
        got = seen[want["value"]]
        context = f"message {want['value']!r}: java saw {got}"
        assert got["topic"] == DEMO[0], context
        assert got["partitionKey"] == want["partitionKey"], context
        assert got["messageId"] == want["messageId"], context
        assert attributes_of(got["attribute"]) == want["attributes"], context
        # byte for byte what the Java client would have written: system headers first, then the gateway's
        # key item (getAttrValue("$msgKey$") gives the key to a Java consumer), then the attributes
        system = [f"$msgType$={want['streamId']}"] if want["streamId"] else []
        system += [f"$msgTime$={want['msgTime']}"] if want["msgTime"] else []
        system += [f"$msgKey$={want['key']}"] if want.get("key") else []
        raw = ",".join(system + [f"{k}={v}" for k, v in want["attributes"].items()])
        assert (got["attribute"] or "") == raw, context
        assert got["msgType"] == want["streamId"], context
        assert got["msgTime"] == want["msgTime"], context
