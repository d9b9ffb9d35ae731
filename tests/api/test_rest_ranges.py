"""REST range endpoints: partition offsets and exact paged range reads through the gateway app."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime

TOPICS = [TopicSpec("ranged", 3)]


@pytest.fixture
async def client() -> AsyncIterator[tuple[httpx.AsyncClient, EmbeddedCluster, Runtime]]:
    async with EmbeddedCluster(TOPICS, brokers=1) as cluster:
        masters = ",".join(str(a) for a in cluster.master_addresses)
        runtime = Runtime(Settings(masters=masters, producer={"heartbeat_interval": 0.5}))
        await runtime.start()
        app = create_app(runtime=runtime)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                yield c, cluster, runtime
        finally:
            await runtime.stop()


async def test_partitions_and_paged_ranges_are_exact(
    client: tuple[httpx.AsyncClient, EmbeddedCluster, Runtime],
) -> None:
    http, cluster, _ = client
    batch = {"messages": [{"value": f"v{i}", "attributes": {"i": str(i)}} for i in range(300)]}
    assert (await http.post("/v1/topics/ranged/messages", json=batch)).status_code == 200
    store = cluster.broker(1).store("ranged")
    doc = (await http.get("/v1/topics/ranged/partitions")).json()
    assert [p["partitionKey"] for p in doc["partitions"]] == ["1:ranged:0", "1:ranged:1", "1:ranged:2"]
    assert {(p["minOffset"], p["maxOffset"]) for p in doc["partitions"]} == {(0, store.max_offset)}
    end = 28 * 200
    for part in doc["partitions"]:
        key, pid = part["partitionKey"], part["partitionId"]
        expected = [
            str(m.message_id) for m in store.read(pid, 0, max_entries=10_000).messages if m.offset < end
        ]
        got: list[str] = []
        position = 0
        while position < end:
            page = (
                await http.get(
                    f"/v1/topics/ranged/partitions/{key}/messages",
                    params={"from": position, "to": end, "limit": 7},
                )
            ).json()
            got.extend(m["messageId"] for m in page["messages"])
            assert page["next"] > position
            position = page["next"]
        assert got == expected
    params = {"from": 0, "to": store.max_offset, "limit": 1}
    page = (await http.get("/v1/topics/ranged/partitions/1:ranged:0/messages", params=params)).json()
    assert 0 < page["next"] <= store.max_offset
    value = base64.b64decode(page["messages"][0]["value"]).decode()
    assert page["messages"][0]["attributes"] == {"i": value[1:]}


async def test_unknown_topics_and_partitions_and_bad_ranges_answer_clearly(
    client: tuple[httpx.AsyncClient, EmbeddedCluster, Runtime],
) -> None:
    http, _, _ = client
    assert (await http.get("/v1/topics/nosuch/partitions")).status_code == 404
    missing = await http.get("/v1/topics/ranged/partitions/9:ranged:0/messages", params={"from": 0, "to": 28})
    assert missing.status_code == 404
    backwards = await http.get(
        "/v1/topics/ranged/partitions/1:ranged:0/messages", params={"from": 56, "to": 28}
    )
    assert backwards.status_code == 400
