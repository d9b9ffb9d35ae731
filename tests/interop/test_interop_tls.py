"""Publish and consume through a gateway configured with ``tubemq.tls.*`` and ``tubemq.auth.*`` against the
real master's TLS port (8716) in the harness's TLS_AUTH=1 mode: every link the gateway opens is TLS, brokers
are reached on their TLS port (8124), and what REST and gRPC published is read back through the gateway's
consumers and exact range reads (the real Java client cannot consume there)."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
from interop_support import (
    DEMO,
    RealGateway,
    group_name,
    real_gateway,
    require_topic,
    run_tag,
    start_offsets,
)
from interop_tls import TlsHarness, check_links, flushed_ends, tls_harness

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb

pytestmark = pytest.mark.tls_auth


@pytest.fixture
def harness() -> TlsHarness:
    return tls_harness()


def chunks(values: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


async def read_ranges(
    gw: RealGateway, topic: str, results: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Messages read back by exact range, from the first offset a publish answer gave for each partition to
    the partition's end, by value. The offsets are index positions of the broker store (shared by the
    partitions of a store, so they step by more than one)."""
    ends = await flushed_ends(gw, topic, results)
    found: dict[str, dict[str, Any]] = {}
    for key, start in start_offsets(results).items():
        end = ends[key]
        while start < end:
            page = await gw.http.get(
                f"/v1/topics/{topic}/partitions/{key}/messages", params={"from": start, "to": end}
            )
            assert page.status_code == 200, page.text
            for m in page.json()["messages"]:
                found[base64.b64decode(m["value"]).decode(errors="replace")] = m
            start = page.json()["next"]
    return found


async def test_rest_publish_and_consume_over_tls_with_authentication(harness: TlsHarness) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("tlsrest")
    async with real_gateway(masters=harness.master, tubemq=harness.tubemq()) as gw:
        values = [f"{tag}-{i}" for i in range(30)]
        results: list[dict[str, Any]] = []
        for batch in chunks(values, 10):
            messages = [{"value": v, "attributes": {"run": tag}, "streamId": "tls"} for v in batch]
            answer = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
            assert answer.status_code == 200, answer.text
            results += answer.json()["results"]
        assert all(r["status"] == 200 for r in results), results
        assert len({r["partitionKey"] for r in results}) == DEMO[1], "30 messages should spread over 3"
        stored = {v: r for v, r in zip(values, results, strict=True)}

        # read back by exact range: GetMessage on the broker's TLS port, signed
        ranged = await read_ranges(gw, topic, results)
        assert set(values) <= set(ranged), f"range reads missed {sorted(set(values) - set(ranged))}"
        for v in values:
            assert str(ranged[v]["messageId"]) == stored[v]["messageId"], ranged[v]
            assert ranged[v]["attributes"] == {"run": tag}, ranged[v]

        # and through a consumer group: register + heartbeats to the master, fetches from the broker
        created = await gw.http.post(
            f"/v1/consumers/{group_name('tlsrest')}",
            json={"topics": [topic], "startPosition": "offsets", "offsets": start_offsets(results)},
        )
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        seen: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 90
        while set(values) - set(seen) and time.monotonic() < deadline:
            poll = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000, "format": "utf8"})
            assert poll.status_code == 200, poll.text
            for m in poll.json()["messages"]:
                if m["value"] in stored:
                    seen[m["value"]] = m
            commit = await gw.http.post(f"{base}/commits", json={})
            assert commit.status_code == 200, commit.text
        assert set(seen) == set(values), f"missing {sorted(set(values) - set(seen))}"
        for v, m in seen.items():
            assert (m["partitionKey"], m["messageId"]) == (stored[v]["partitionKey"], stored[v]["messageId"])
            assert m["streamId"] == "tls" and m["attributes"] == {"run": tag}, m
        assert (await gw.http.delete(base)).status_code in (200, 204)
        check_links(gw, harness)


async def test_grpc_publish_and_consume_over_tls_with_authentication(harness: TlsHarness) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("tlsgrpc")
    async with real_gateway(masters=harness.master, tubemq=harness.tubemq()) as gw:
        stub = gw.grpc_stub
        values = [f"{tag}-{i}".encode() for i in range(30)]
        sent = await stub.Publish(
            pb.PublishRequest(
                topic=topic,
                messages=[
                    pb.Message(value=v, attributes={"run": tag}, key=f"k{i % 5}")
                    for i, v in enumerate(values)
                ],
            )
        )
        assert sent.failed == 0, sent
        stored = {v: r.stored for v, r in zip(values, sent.results, strict=True)}
        assert all(s.offset >= 0 for s in stored.values()), "the real broker gives every offset"
        offsets: dict[str, int] = {}
        for s in stored.values():
            offsets[s.partition_key] = min(offsets.get(s.partition_key, s.offset), s.offset)

        group = group_name("tlsgrpc")
        created = await stub.CreateConsumer(
            pb.CreateConsumerRequest(
                group=group, topics=[topic], start_position=pb.START_POSITION_OFFSETS, offsets=offsets
            )
        )
        seen: dict[bytes, pb.ConsumedMessage] = {}
        deadline = time.monotonic() + 90
        while set(values) - set(seen) and time.monotonic() < deadline:
            polled = await stub.Poll(
                pb.PollRequest(group=group, instance_id=created.instance_id, timeout_ms=2000)
            )
            for m in polled.messages:
                if m.value in stored:
                    seen[m.value] = m
            await stub.Commit(
                pb.CommitRequest(group=group, instance_id=created.instance_id, all_delivered=True)
            )
        assert set(seen) == set(values), f"missing {sorted(set(values) - set(seen))}"
        for v, m in seen.items():
            assert (m.partition_key, m.message_id) == (stored[v].partition_key, stored[v].message_id), m
            assert dict(m.attributes) == {"run": tag} and m.key == f"k{values.index(v) % 5}", m
        await stub.DeleteConsumer(pb.DeleteConsumerRequest(group=group, instance_id=created.instance_id))
        check_links(gw, harness)
