"""The first experience: the embedded cluster's default topic (what ``serve`` without masters deploys) shows
every consumed message's offset, in a poll and in a range read, and each partition's offset range counts its
own messages (one partition per store, as TubeMQ numbers them: store * 10000 + index); ``GET /v1/topics``
lists its partitions before anything was published."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx

from gateway.config import EmbeddedSettings
from gateway.embedded.topics import parse_topic_specs
from tests.support.consumer_support import environment
from tests.support.gateway_support import gateway
from tests.support.workers_support import start_workers

ENTRY = 28


def test_the_default_topic_is_demo_with_one_partition_per_store() -> None:
    (spec,) = parse_topic_specs(EmbeddedSettings().topics)
    assert (spec.name, spec.partitions, spec.stores) == ("demo", 1, 4)
    assert spec.partition_ids() == [0, 10000, 20000, 30000]


async def test_the_default_demo_topic_shows_every_offset() -> None:
    async with (
        environment(EmbeddedSettings().topics) as env,
        gateway(env) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=15.0) as client,
    ):
        values = [f"m{i}" for i in range(11)]
        published = await client.post(
            "/v1/topics/demo/messages",
            json={"messages": [{"value": v, "key": f"k{i}"} for i, v in enumerate(values)]},
        )
        assert published.status_code == 200, published.text
        created = await client.post(
            "/v1/consumers/first", json={"topics": ["demo"], "startPosition": "earliest"}
        )
        path = f"/v1/consumers/first/instances/{created.json()['instanceId']}"
        got: list[dict[str, object]] = []
        for _ in range(20):
            polled = await client.get(f"{path}/messages", params={"timeout_ms": 1000, "format": "utf8"})
            got += polled.json()["messages"]
            if len(got) >= len(values):
                break
        assert sorted(str(m["value"]) for m in got) == sorted(values)
        per_partition: dict[str, list[object]] = {}
        for m in got:
            per_partition.setdefault(str(m["partitionKey"]), []).append(m["offset"])
        for key, offsets in per_partition.items():
            assert offsets == [ENTRY * i for i in range(len(offsets))], (key, offsets)

        ranges = (await client.get("/v1/topics/demo/partitions")).json()["partitions"]
        counts = Counter(str(m["partitionKey"]) for m in got)
        for p in ranges:  # each partition's offset range counts its own messages
            assert (p["maxOffset"] - p["minOffset"]) // ENTRY == counts[p["partitionKey"]], p
            read = await client.get(
                f"/v1/topics/demo/partitions/{p['partitionKey']}/messages",
                params={"from": p["minOffset"], "to": p["maxOffset"]},
            )
            assert [m["offset"] for m in read.json()["messages"]] == per_partition.get(p["partitionKey"], [])


async def test_serve_lists_the_embedded_topics_with_their_partitions_from_the_start(tmp_path: Path) -> None:
    gw = start_workers(tmp_path, None)
    try:
        async with gw.shared() as client:
            listed = (await client.get("/v1/topics")).json()
    finally:
        gw.stop()
    (demo,) = [t for t in listed["topics"] if t["topic"] == "demo"]
    assert demo["partitions"] == 4 and demo["brokerIds"] == [1], demo
    assert [b["partitions"] for b in listed["brokers"]] == [4], listed
