"""Idempotent publish on the real TubeMQ: a REST publish whose answer the client never read (its connection
closed right after the request was sent), retried with the same key, and a gRPC Publish sent twice with one
key: the real broker holds exactly one copy of each message, as the real Java client reads them, and the
retries got the first answers. Then two gateways sharing a real Redis: the first answer dropped on one, the
retry through the other gets it, and the broker holds one copy."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from interop_support import (
    DEMO,
    decode_value,
    group_name,
    java_client,
    java_consumer_ready,
    real_gateway,
    require_topic,
    run_tag,
)

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.redis_support import PASSWORD, running_redis


async def _sent_and_dropped(url: str, path: str, body: bytes, key: str) -> None:
    """Send a publish and close the connection without reading the answer (a client whose answer was lost)."""
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.port is not None
    _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"idempotency-key: {key}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _retried(http: Any, path: str, body: bytes, key: str) -> Any:
    """The retry loop a client runs: again after Retry-After while the first request is still publishing."""
    deadline = time.monotonic() + 30
    while True:
        answer = await http.post(
            path, content=body, headers={"content-type": "application/json", "idempotency-key": key}
        )
        if answer.status_code != 409 or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(int(answer.headers["retry-after"]))


async def test_retried_publishes_are_stored_once_as_the_java_client_reads_them(java_root: Path) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("idem")
    path = f"/v1/topics/{topic}/messages"
    batch = {"messages": [{"value": f"{tag}-rest-{i}", "attributes": {"i": str(i)}} for i in range(3)]}
    body = json.dumps(batch).encode()
    async with (
        java_client(java_root, "consume", topic, group_name("idem"), tag, "150", "latest") as java,
        real_gateway() as gw,
    ):
        await java_consumer_ready(java)
        await _sent_and_dropped(gw.url, path, body, f"{tag}-rest")
        # the client retries after its timeout: by then the first request has reached the broker
        await java.wait_for(lambda c: len(c.messages()) >= 3, 60.0, "the first request's 3 messages")
        retried = await _retried(gw.http, path, body, f"{tag}-rest")
        assert retried.status_code == 200, retried.text
        assert retried.headers["idempotent-replayed"] == "true"
        rest_ids = {r["messageId"] for r in retried.json()["results"]}

        request = pb.PublishRequest(topic=topic, messages=[pb.Message(value=f"{tag}-grpc".encode())])
        metadata = (("idempotency-key", f"{tag}-grpc"),)
        answers = []
        for _ in range(2):
            call = gw.grpc_stub.Publish(request, metadata=metadata, timeout=30)
            answers.append((await call, dict(await call.trailing_metadata() or ())))
        assert answers[0][0] == answers[1][0]
        assert answers[1][1].get("idempotent-replayed") == "true"

        await java.wait_for(lambda c: len(c.messages()) >= 4, 60.0, "4 messages at the Java consumer")
        await asyncio.sleep(5)  # a second copy, had one been stored, arrives within this
        values = [decode_value(m) for m in java.messages()]
        want = [f"{tag}-rest-{i}".encode() for i in range(3)] + [f"{tag}-grpc".encode()]
        assert sorted(values) == sorted(want), values
        seen_ids = {m["messageId"] for m in java.messages()}
        assert rest_ids <= seen_ids
        assert str(answers[0][0].results[0].stored.message_id) in seen_ids


async def test_two_gateways_sharing_a_redis_store_a_retried_publish_once(
    java_root: Path, tmp_path: Path
) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("idemr")
    path = f"/v1/topics/{topic}/messages"
    body = json.dumps({"messages": [{"value": f"{tag}-r-{i}"} for i in range(3)]}).encode()

    def replica(n: int, url: str) -> dict[str, Any]:
        return {
            "idempotency": {"redis_url": url, "redis_password": PASSWORD},
            "consumers": {
                "replicas": 2,
                "id_secret": "interop-idempotency-secret-0123456789",
                "advertised_url": f"http://127.0.0.1:{n}",
            },
        }

    with running_redis(tmp_path / "redis") as redis:
        async with (
            java_client(java_root, "consume", topic, group_name("idemr"), tag, "150", "latest") as java,
            real_gateway(**replica(1, redis.url)) as one,
            real_gateway(**replica(2, redis.url)) as two,
        ):
            await java_consumer_ready(java)
            await _sent_and_dropped(one.url, path, body, f"{tag}-r")
            # the client retries after its timeout: by then the first request has reached the broker (a retry
            # sent at once can reach the shared store first: it then publishes, and the first is the replay)
            await java.wait_for(lambda c: len(c.messages()) >= 3, 60.0, "the first request's 3 messages")
            retried = await _retried(two.http, path, body, f"{tag}-r")
            assert retried.status_code == 200, retried.text
            assert retried.headers["idempotent-replayed"] == "true"
            await java.wait_for(lambda c: len(c.messages()) >= 3, 60.0, "3 messages at the Java consumer")
            await asyncio.sleep(5)  # a second copy, had one been stored, arrives within this
            values = sorted(decode_value(m) for m in java.messages())
            assert values == [f"{tag}-r-{i}".encode() for i in range(3)], values
            assert {r["messageId"] for r in retried.json()["results"]} == {
                m["messageId"] for m in java.messages()
            }
