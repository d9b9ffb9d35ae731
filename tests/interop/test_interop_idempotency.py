"""Idempotent publish on the real TubeMQ: a REST publish whose answer the client never read (its connection
closed right after the request was sent), retried with the same key, and a gRPC Publish sent twice with one
key: the real broker holds exactly one copy of each message, as the real Java client reads them, and the
retries got the first answers."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
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
        deadline = time.monotonic() + 30
        while True:  # the retry loop a client runs: 409 while the first request is still publishing
            retried = await gw.http.post(
                path,
                content=body,
                headers={"content-type": "application/json", "idempotency-key": f"{tag}-rest"},
            )
            if retried.status_code != 409 or time.monotonic() > deadline:
                break
            await asyncio.sleep(int(retried.headers["retry-after"]))
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
