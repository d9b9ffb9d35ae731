"""How late nacked messages and stream-id filtered messages arrive on the real TubeMQ.

A retry copy is read back with a stream-id filter (the group), and the real broker serves a filtered reader
from its message files unless the reader asks for memory reads (``qryPriorityId``): a copy then became
readable only at the broker's next memory flush, 10-20 s after it was stored. These cases measure the
distribution: 100 nacks spread over more than one flush interval come back within their delay + 1 s, and
messages for a filtered instance arrive within 1 s of their publish."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx
from interop_support import group_name, poll_tagged, real_gateway, require_topic, run_tag

SOURCE = ("rlatsrc", 2)
RETRY = ("rlatretry", 2)
CONSUMERS = {"lease": 120.0}
NACKS = 100
DELAY_MS = 2000
#: nacks per second: 100 over 20 s, longer than the broker's flush interval
NACK_RATE = 5.0


async def _publish(http: httpx.AsyncClient, topic: str, messages: list[dict[str, Any]]) -> None:
    answer = await http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert answer.status_code == 200, answer.text
    assert all("error" not in r for r in answer.json()["results"]), answer.text


def _p99(lateness: list[float]) -> float:
    ordered = sorted(lateness)
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]


async def test_nacked_messages_come_back_within_their_delay_and_a_second() -> None:
    source, retry = require_topic(SOURCE), require_topic(RETRY)
    tag = run_tag("nacklat")
    sent = [f"{tag}-{i}" for i in range(NACKS)]
    async with real_gateway(consumers=CONSUMERS) as gw:
        http = gw.http
        created = await http.post(
            f"/v1/consumers/{group_name('nacklat')}",
            json={"topics": [source], "retryTopic": retry, "startPosition": "latest"},
        )
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        await poll_tagged(http, base, tag, 5000)  # joined, partitions assigned and registered at the end

        async def publish_all() -> None:  # spread over more than one flush interval of the broker
            for value in sent:
                await _publish(http, source, [{"value": value}])
                await asyncio.sleep(1 / NACK_RATE)

        nacked_at: dict[str, float] = {}
        back_at: dict[str, float] = {}
        publishing = asyncio.create_task(publish_all())
        deadline = time.monotonic() + NACKS / NACK_RATE + DELAY_MS / 1000 + 40
        try:
            while len(back_at) < NACKS and time.monotonic() < deadline:
                got = await poll_tagged(http, base, tag, 200)
                now = time.monotonic()
                done: list[str] = []
                for m in got:
                    if m["deliveryAttempt"] == 1:
                        # the delay counts from when the gateway takes the nack
                        nacked_at.setdefault(m["value"], time.monotonic())
                        answer = await http.post(
                            f"{base}/nacks", json={"tokens": [m["token"]], "delayMs": DELAY_MS}
                        )
                        assert answer.status_code == 200 and answer.json()["retried"] == 1, answer.text
                    else:
                        assert m["deliveryAttempt"] == 2, m
                        back_at.setdefault(m["value"], now)
                        done.append(m["token"])
                if done:
                    answer = await http.post(f"{base}/commits", json={"tokens": done})
                    assert answer.status_code == 200, answer.text
        finally:
            await publishing
        assert sorted(back_at) == sorted(sent), f"{NACKS - len(back_at)} nacked messages never came back"
        lateness = [back_at[v] - nacked_at[v] - DELAY_MS / 1000 for v in sent]
        summary = (
            f"nack delay {DELAY_MS} ms, lateness over {NACKS} nacks: min {min(lateness):.3f} s, median "
            f"{statistics.median(lateness):.3f} s, p99 {_p99(lateness):.3f} s, max {max(lateness):.3f} s"
        )
        print(summary)
        assert min(lateness) >= -0.05, summary  # never early (the poll's own clock reading is the slack)
        assert _p99(lateness) <= 1.0, summary


async def test_a_filtered_instance_reads_new_messages_as_fast_as_an_unfiltered_one() -> None:
    source = require_topic(SOURCE)
    tag = run_tag("filtlat")
    async with real_gateway(consumers=CONSUMERS) as gw:
        http = gw.http
        created = await http.post(
            f"/v1/consumers/{group_name('filtlat')}",
            json={"topics": [source], "filters": {source: [tag]}, "startPosition": "latest"},
        )
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        await poll_tagged(http, base, tag, 5000)  # joined, partitions assigned and registered at the end
        published_at: dict[str, float] = {}
        arrived_at: dict[str, float] = {}
        for i in range(20):
            value = f"{tag}-{i}"
            published_at[value] = time.monotonic()
            await _publish(http, source, [{"value": value, "streamId": tag}, {"value": f"other-{i}"}])
            until = time.monotonic() + 30
            while value not in arrived_at and time.monotonic() < until:
                for m in await poll_tagged(http, base, tag, 200):
                    arrived_at.setdefault(m["value"], time.monotonic())
                    await http.post(f"{base}/commits", json={"tokens": [m["token"]]})
            await asyncio.sleep(0.5)
        assert sorted(arrived_at) == sorted(published_at)
        latency = [arrived_at[v] - published_at[v] for v in published_at]
        summary = f"filtered reads, publish to delivery over 20 messages: max {max(latency):.3f} s"
        print(summary)
        assert max(latency) <= 1.0, summary
