"""One consumer group shared by a gateway consumer instance and a real Java consumer: the real master splits
the partitions between them, gives all of them to the gateway when the Java consumer leaves, and every
message is delivered at least once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from interop_support import (
    GROUP_READY,
    GW4,
    decode_value,
    group_name,
    java_client,
    java_consumer_ready,
    java_held,
    real_gateway,
    require_topic,
    run_tag,
    wait_until,
)


async def held_by(http: httpx.AsyncClient, base: str) -> list[str]:
    answer = await http.get(base)
    assert answer.status_code == 200, answer.text
    return sorted(p["partitionKey"] for p in answer.json()["partitions"])


async def drain(http: httpx.AsyncClient, base: str, tag: str, into: dict[str, int], seconds: float) -> None:
    """Poll and commit for ``seconds``, counting this run's messages by value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        poll = await http.get(f"{base}/messages", params={"timeout_ms": 500, "format": "utf8"})
        assert poll.status_code == 200, poll.text
        messages: list[dict[str, Any]] = poll.json()["messages"]
        for m in messages:
            if m["encoding"] == "utf8" and m["value"].startswith(tag):
                into[m["value"]] = into.get(m["value"], 0) + 1
        if messages:
            answer = await http.post(f"{base}/commits", json={})
            assert answer.status_code == 200, answer.text


async def publish(http: httpx.AsyncClient, topic: str, values: list[str], partitions: int) -> None:
    body = {"messages": [{"value": v, "partition": i % partitions} for i, v in enumerate(values)]}
    answer = await http.post(f"/v1/topics/{topic}/messages", json=body)
    assert answer.status_code == 200, answer.text


async def test_group_shared_with_a_java_consumer(java_root: Path) -> None:
    topic = require_topic(GW4)
    parts = GW4[1]
    tag = run_tag("grp")
    group = group_name("grp")
    async with real_gateway() as gw:
        expected_keys = sorted(
            p["partitionKey"] for p in (await gw.http.get(f"/v1/topics/{topic}")).json()["partitions"]
        )
        assert len(expected_keys) == parts
        answer = await gw.http.post(
            f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "latest"}
        )
        assert answer.status_code == 201, answer.text
        base = answer.json()["baseUrl"]
        gateway_got: dict[str, int] = {}
        async with java_client(java_root, "consume", topic, group, tag, "240", "latest") as java:
            await java_consumer_ready(java)

            # the master splits the 4 partitions: both members hold some, none twice, none left out
            async def split() -> bool:
                await drain(gw.http, base, tag, gateway_got, 0.5)
                mine, theirs = await held_by(gw.http, base), java_held(java)
                return bool(mine) and bool(theirs) and sorted(mine + theirs) == expected_keys

            await wait_until(split, GROUP_READY, "the partitions split between the gateway and Java")
            first = [f"{tag}-a{i}" for i in range(40)]
            await publish(gw.http, topic, first, parts)

            async def all_first() -> bool:
                await drain(gw.http, base, tag, gateway_got, 1.0)
                java_values = {decode_value(m).decode() for m in java.messages()}
                return set(first) <= java_values | set(gateway_got)

            await wait_until(all_first, 60.0, "every message at one of the two members")
            java_values = {decode_value(m).decode() for m in java.messages()}
            assert java_values and set(gateway_got) & set(first), "both members must have consumed"
            assert await java.finish() == 0
            assert java.of("stopped"), java.stderr[-10:]

        # the Java member left: the master rebalances all partitions to the gateway instance
        async def all_mine() -> bool:
            await drain(gw.http, base, tag, gateway_got, 0.5)
            return await held_by(gw.http, base) == expected_keys

        await wait_until(all_mine, GROUP_READY, "the gateway instance to hold every partition")
        second = [f"{tag}-b{i}" for i in range(40)]
        await publish(gw.http, topic, second, parts)

        async def all_second() -> bool:
            await drain(gw.http, base, tag, gateway_got, 1.0)
            return set(second) <= set(gateway_got)

        await wait_until(all_second, 60.0, "every message after the rebalance at the gateway")
        assert (await gw.http.delete(base)).status_code in (200, 204)
