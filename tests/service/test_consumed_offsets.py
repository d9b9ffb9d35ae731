"""When a consumed message carries its ``offset`` (README, "Consume"), over REST on the embedded cluster,
whose broker indexes a store shared by several partitions as TubeMQ's does (one 28-byte entry per stored
message of any partition; reads step over siblings; the answer carries only the read's start and the end of
the index): set exactly when the batch took one entry per message up to the end of the index, else null."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.consumer_support import environment
from tests.support.gateway_support import gateway


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # shared: 2 partitions in one store; single: 2 stores of one partition each
    async with (
        environment("shared:2,single:1:2") as env,
        gateway(env) as served,
        httpx.AsyncClient(base_url=served.url, timeout=10.0) as client,
    ):
        yield client


async def publish(http: httpx.AsyncClient, topic: str, partitions: list[int]) -> list[dict[str, Any]]:
    messages = [{"value": f"m{i}", "partition": p} for i, p in enumerate(partitions)]
    answer = await http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


async def poll_all(http: httpx.AsyncClient, base: str, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while len(got) < count:
        answer = await http.get(f"{base}/messages", params={"format": "utf8", "timeout_ms": 3000})
        assert answer.status_code == 200, answer.text
        batch = answer.json()["messages"]
        assert batch, f"only {len(got)} of {count} messages came"
        got.extend(batch)
    return got


async def consumer(http: httpx.AsyncClient, group: str, topic: str) -> str:
    created = await http.post(f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "earliest"})
    assert created.status_code == 201, created.text
    base: str = created.json()["baseUrl"]
    return base


async def test_one_partition_per_store_gives_every_offset(http: httpx.AsyncClient) -> None:
    stored = await publish(http, "single", [0, 1, 0, 1, 0])
    base = await consumer(http, "off-single", "single")
    got = await poll_all(http, base, 5)
    by_value = {m["value"]: m["offset"] for m in got}
    assert by_value == {f"m{i}": r["offset"] for i, r in enumerate(stored)}
    assert sorted(by_value.values()) == [0, 0, 28, 28, 56]  # each store has its own index


async def test_a_shared_store_proves_offsets_only_for_batches_dense_to_the_end(
    http: httpx.AsyncClient,
) -> None:
    # index of the store: p0, p1, p0, p1 -> a read of p0 steps over p1's entries: offsets unknown
    await publish(http, "shared", [0, 1, 0, 1])
    base = await consumer(http, "off-shared", "shared")
    first = await poll_all(http, base, 4)
    assert [m["offset"] for m in first] == [None] * 4
    assert (await http.post(f"{base}/commits", json={})).status_code == 200
    # only p0 written since: its next read takes one entry per message up to the end: proven
    stored = await publish(http, "shared", [0, 0])
    second = await poll_all(http, base, 2)
    assert [(m["value"], m["offset"]) for m in second] == [
        ("m0", stored[0]["offset"]),
        ("m1", stored[1]["offset"]),
    ]
    assert [r["offset"] for r in stored] == [112, 140]
