"""Seek by time on the real TubeMQ: the real Java producer sends messages (msgTime 202401311530 on even ones,
none on odd ones), then the gateway publishes messages stamped with later minutes of their own, over both
partitions of a two-partition store; a seek by time lands each partition on its first message stamped at
or after the minute (with the untimed messages right before it), whatever the instance read before.

The stamps are minutes of a made-up timeline that rises with the wall clock (a run later than another has
later stamps), so the messages of earlier runs in the topic are all earlier than this run's."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from interop_support import group_name, java_produce, real_gateway, require_topic, run_tag, wait_until

TOPIC = ("semtime", 2)
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _minute(n: int) -> str:
    return (_EPOCH + timedelta(minutes=n)).strftime("%Y%m%d%H%M")


def _seek_ms(n: int) -> int:
    """Unix ms inside minute ``n`` of the timeline (20 s in: the seek truncates to the minute)."""
    return int((_EPOCH + timedelta(minutes=n, seconds=20)).timestamp() * 1000)


async def _drain(http: httpx.AsyncClient, base: str, tag: str) -> list[str]:
    """This run's values the instance delivers until 4 s pass without one (committing everything)."""
    got: list[str] = []
    quiet_until = time.monotonic() + 4
    while time.monotonic() < quiet_until:
        answer = await http.get(f"{base}/messages", params={"timeout_ms": 1000, "format": "utf8"})
        assert answer.status_code == 200, answer.text
        messages = answer.json()["messages"]
        if messages:
            await http.post(f"{base}/commits", json={"tokens": [m["token"] for m in messages]})
        mine = [str(m["value"]) for m in messages if str(m["value"]).startswith(tag)]
        if mine:
            got += mine
            quiet_until = time.monotonic() + 4
    return got


def _expected(order: list[dict[str, Any]], minute: str) -> set[str]:
    """Per partition, from the first message stamped at or after ``minute`` on, with the untimed ones right
    before it."""
    out: set[str] = set()
    for key in {m["partitionKey"] for m in order}:
        own = sorted((m for m in order if m["partitionKey"] == key), key=lambda m: m["offset"])
        late = next(
            (i for i, m in enumerate(own) if m["msgTime"] is not None and m["msgTime"] >= minute), None
        )
        if late is None:
            start = len(own)
            while start and own[start - 1]["msgTime"] is None:
                start -= 1  # untimed ones at the end go with what comes next: delivered
        else:
            start = late
            while start and own[start - 1]["msgTime"] is None:
                start -= 1
        out |= {m["value"] for m in own[start:]}
    return out


async def test_a_seek_by_time_lands_on_the_first_message_at_or_after_it(java_root: Path) -> None:
    topic = require_topic(TOPIC)
    tag = run_tag("time")
    base_minute = (int(time.time()) - 1_700_000_000) * 4
    java = await java_produce(java_root, topic, f"{tag}-j", 4)
    order = [
        {
            "value": f"{tag}-j-{e['i']}",
            "partitionKey": e["partitionKey"],
            "offset": e["offset"],
            "msgTime": "202401311530" if e["i"] % 2 == 0 else None,
        }
        for e in java
    ]
    async with real_gateway() as gw:
        created = await gw.http.post(f"/v1/consumers/{group_name('time')}", json={"topics": [topic]})
        assert created.status_code == 201, created.text
        base: str = created.json()["baseUrl"]
        messages = [
            {"value": f"{tag}-g{k}", "msgTime": _minute(base_minute + k // 2), "partition": k % 2}
            for k in range(8)
        ]
        answer = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
        assert answer.status_code == 200, answer.text
        for sent, result in zip(messages, answer.json()["results"], strict=True):
            assert "error" not in result, result
            order.append(
                {
                    "value": sent["value"],
                    "partitionKey": result["partitionKey"],
                    "offset": result["offset"],
                    "msgTime": sent["msgTime"],
                }
            )
        assert len({m["partitionKey"] for m in order}) == 2

        async def held() -> bool:
            described = await gw.http.get(base)
            return len(described.json()["partitions"]) == 2

        await wait_until(held, 60.0, "the instance to hold both partitions")
        for n in (2, 0, 3, 4):
            body = {"position": "time", "time": _seek_ms(base_minute + n), "timeZone": "UTC"}
            moved = await gw.http.post(f"{base}/seek", json=body)
            assert moved.status_code == 200, moved.text
            got = await _drain(gw.http, base, tag)
            assert len(got) == len(set(got)), got
            want = _expected(order, _minute(base_minute + n))
            assert set(got) == want, (n, sorted(got), sorted(want))
        # the same instant as RFC 3339 text in another offset
        text = (_EPOCH + timedelta(minutes=base_minute + 1, hours=8)).strftime("%Y-%m-%dT%H:%M:00+08:00")
        moved = await gw.http.post(f"{base}/seek", json={"position": "time", "time": text, "timeZone": "UTC"})
        assert moved.status_code == 200, moved.text
        assert set(await _drain(gw.http, base, tag)) == _expected(order, _minute(base_minute + 1))
