"""Messages produced by the real Java client, consumed through the gateway's REST polls and SSE stream: broker
filters, explicit start offsets, commits and rollbacks (redelivery)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from interop_support import (
    DEMO,
    group_name,
    java_produce,
    real_gateway,
    require_topic,
    run_tag,
    start_offsets,
)


def check_fields(got: dict[str, Any], sent: dict[str, Any], tag: str) -> None:
    i = sent["i"]
    context = f"message {i}: gateway delivered {got}, java sent {sent}"
    assert got["value"] == f"{tag}-{i}", context
    assert got["partitionKey"] == sent["partitionKey"], context
    assert got["messageId"] == sent["messageId"], context
    assert got["attributes"] == {"run": tag, "n": str(i)}, context
    assert got["streamId"] == f"s{i % 3}", context
    assert got["msgTime"] == ("202401311530" if i % 2 == 0 else None), context
    if got["offset"] is not None:
        assert got["offset"] == sent["offset"], context


def check_not_before(got: dict[str, Any], offsets: dict[str, int]) -> None:
    """Nothing before the explicit start offset of its partition is delivered."""
    start = offsets.get(got["partitionKey"])
    if start is not None and got["offset"] is not None:
        assert got["offset"] >= start, f"delivered {got} from before the start offset {start}"


async def create_instance(http: httpx.AsyncClient, group: str, **body: Any) -> str:
    answer = await http.post(f"/v1/consumers/{group}", json=body)
    assert answer.status_code == 201, answer.text
    base: str = answer.json()["baseUrl"]
    return base


async def test_java_produced_polled_with_filter_offsets_commit_and_rollback(java_root: Path) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("poll")
    sent = await java_produce(java_root, topic, tag, 24)
    by_value = {f"{tag}-{e['i']}": e for e in sent}
    wanted = {f"{tag}-{i}" for i in range(24) if i % 3 == 1}  # stream id s1
    offsets = start_offsets(sent)
    async with real_gateway() as gw:
        group = group_name("poll")
        base = await create_instance(
            gw.http,
            group,
            topics=[topic],
            filters={topic: ["s1"]},
            startPosition="offsets",
            offsets=offsets,
        )
        seen: dict[str, int] = {}  # value -> deliveries
        rolled_back: set[str] = set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            poll = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000, "format": "utf8"})
            assert poll.status_code == 200, poll.text
            messages = poll.json()["messages"]
            tagged = []
            for got in messages:
                check_not_before(got, offsets)
                if got["encoding"] == "utf8" and got["value"] in by_value:
                    assert got["value"] in wanted, f"the s1 filter let {got} through"
                    check_fields(got, by_value[got["value"]], tag)
                    seen[got["value"]] = seen.get(got["value"], 0) + 1
                    tagged.append(got)
            tokens = [m["token"] for m in messages]
            if tagged and not rolled_back:
                # not consumed: the gateway rolls each batch back and the broker hands it out again
                answer = await gw.http.post(f"{base}/commits", json={"tokens": tokens, "consumed": False})
                assert answer.status_code == 200, answer.text
                assert answer.json()["rolledBack"] >= len(tagged)
                rolled_back = {m["value"] for m in tagged}
            elif tokens:
                answer = await gw.http.post(f"{base}/commits", json={"tokens": tokens})
                assert answer.status_code == 200, answer.text
                assert answer.json()["committed"] == len(tokens), answer.text
            if set(seen) == wanted and rolled_back and all(seen[v] >= 2 for v in rolled_back):
                break
        assert set(seen) == wanted, f"missing: {sorted(wanted - set(seen))}"
        assert rolled_back and all(seen[v] >= 2 for v in rolled_back), f"not redelivered: {seen}"
        assert (await gw.http.delete(base)).status_code in (200, 204)

        # the commits stuck: a new member of the group resumes after them ("earliest" only applies to a
        # group without offsets), so nothing of this run comes again
        base = await create_instance(
            gw.http, group, topics=[topic], filters={topic: ["s1"]}, startPosition="earliest"
        )
        again: list[str] = []
        last_offsets = {key: max(e["offset"] for e in sent if e["partitionKey"] == key) for key in offsets}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            poll = await gw.http.get(f"{base}/messages", params={"timeout_ms": 1000, "format": "utf8"})
            assert poll.status_code == 200, poll.text
            again += [m["value"] for m in poll.json()["messages"] if m["value"] in by_value]
            if poll.json()["messages"]:
                await gw.http.post(f"{base}/commits", json={})
            held = {
                p["partitionKey"]: p["currOffset"] for p in (await gw.http.get(base)).json()["partitions"]
            }
            if all(held.get(key, -1) > last for key, last in last_offsets.items()):
                break  # every partition's next fetch starts after this run's messages
        assert not again, f"committed messages delivered again after re-joining: {again}"
        assert (await gw.http.delete(base)).status_code in (200, 204)


async def test_java_produced_streamed_over_sse(java_root: Path) -> None:
    topic = require_topic(DEMO)
    tag = run_tag("sse")
    sent = await java_produce(java_root, topic, tag, 12)
    by_value = {f"{tag}-{e['i']}": e for e in sent}
    offsets = start_offsets(sent)
    async with real_gateway() as gw:
        base = await create_instance(
            gw.http, group_name("sse"), topics=[topic], startPosition="offsets", offsets=offsets
        )
        seen: set[str] = set()
        event_ids: list[str] = []
        async with gw.http.stream("GET", f"{base}/stream", params={"format": "utf8"}, timeout=90.0) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            fields: dict[str, str] = {}
            deadline = time.monotonic() + 90
            async for line in stream.aiter_lines():
                assert time.monotonic() < deadline, f"SSE: got only {sorted(seen)}"
                if line:
                    if not line.startswith(":"):
                        name, _, value = line.partition(":")
                        fields[name] = value.removeprefix(" ")
                    continue
                if "data" not in fields:
                    continue
                assert fields.get("event", "message") == "message", fields
                got = json.loads(fields["data"])
                assert fields["id"] == got["token"]
                event_ids.append(got["token"])
                check_not_before(got, offsets)
                if got["encoding"] == "utf8" and got["value"] in by_value:
                    check_fields(got, by_value[got["value"]], tag)
                    seen.add(got["value"])
                fields = {}
                # commit as we go: a partition delivers nothing new until its batch is committed
                answer = await gw.http.post(f"{base}/commits", json={"tokens": [got["token"]]})
                assert answer.status_code == 200, answer.text
                if seen == set(by_value):
                    break
        assert seen == set(by_value)
        assert len(event_ids) == len(set(event_ids)), "an SSE event id came twice"
