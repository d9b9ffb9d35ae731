"""Per-message redelivery on the real TubeMQ: a nacked message of ten comes back alone after its delay with
deliveryAttempt 2, then goes to the dead-letter topic, where the real Java client reads it with its reason;
deadlines expire per message and extended ones hold; a gateway stopped between the retry publish and the
settle loses nothing, and so does one killed (SIGKILL) there."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from interop_support import (
    MASTER,
    WEB,
    attributes_of,
    decode_value,
    group_name,
    java_client,
    java_consumer_ready,
    poll_tagged,
    real_gateway,
    require_topic,
    run_tag,
    wait_until,
)

from gateway.service.delivered import DeliveredMessage
from gateway.service.instance_redelivery import Redeliverer
from tests.support.files import SUPPORT_DIR

SOURCE = ("semsrc", 1)
RETRY = ("semretry", 2)
DEAD = ("semdlq", 1)
#: the deadlines case's source: two partitions, one message in each
HOLD = ("semhold", 2)
#: the reaper checks deadlines this often in these cases
CONSUMERS = {"lease": 120.0}


async def _publish(http: httpx.AsyncClient, topic: str, values: list[str], key: str | None = None) -> None:
    messages = [{"value": v} if key is None else {"value": v, "key": key} for v in values]
    answer = await http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert answer.status_code == 200, answer.text
    assert all("error" not in r for r in answer.json()["results"]), answer.text


async def _create(http: httpx.AsyncClient, group: str, **body: Any) -> str:
    answer = await http.post(f"/v1/consumers/{group}", json={"startPosition": "earliest", **body})
    assert answer.status_code == 201, answer.text
    base: str = answer.json()["baseUrl"]
    return base


async def test_nack_of_one_of_ten_comes_back_alone_then_dead_letters_for_java(java_root: Path) -> None:
    source, retry, dead = require_topic(SOURCE), require_topic(RETRY), require_topic(DEAD)
    tag = run_tag("nack")
    sent = [f"{tag}-{i}" for i in range(10)]
    group = group_name("nack")
    async with real_gateway(consumers=CONSUMERS) as gw:
        await _publish(gw.http, source, sent)
        base = await _create(
            gw.http,
            group,
            topics=[source],
            retryTopic=retry,
            deadLetterTopic=dead,
            maxDeliveryAttempts=2,
        )
        seen: dict[str, list[dict[str, Any]]] = {}
        nacked_at = 0.0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(seen) < 10:
            for m in await poll_tagged(gw.http, base, tag):
                seen.setdefault(m["value"], []).append(m)
                if m["value"] == sent[4]:
                    nacked_at = time.monotonic()  # the delay counts from when the gateway takes the nack
                    answer = await gw.http.post(
                        f"{base}/nacks", json={"tokens": [m["token"]], "delayMs": 3000}
                    )
                    assert answer.status_code == 200, answer.text
                    assert answer.json()["retried"] == 1, answer.text
                else:
                    committed = await gw.http.post(f"{base}/commits", json={"tokens": [m["token"]]})
                    assert committed.json()["committed"] == 1, committed.text
        assert sorted(seen) == sorted(sent) and nacked_at
        assert all(v[0]["deliveryAttempt"] == 1 for v in seen.values())

        back: list[dict[str, Any]] = []

        async def came_back() -> bool:
            back.extend(await poll_tagged(gw.http, base, tag))
            return bool(back)

        await wait_until(came_back, 60.0, "the nacked message to come back")
        assert time.monotonic() - nacked_at >= 3.0
        assert [m["value"] for m in back] == [sent[4]], f"only the nacked one comes back: {back}"
        first = seen[sent[4]][0]
        again = back[0]
        assert again["deliveryAttempt"] == 2
        assert (again["topic"], again["partitionKey"], again["messageId"]) == (
            source,
            first["partitionKey"],
            first["messageId"],
        )
        answer = await gw.http.post(f"{base}/nacks", json={"tokens": [again["token"]]})
        assert answer.json()["deadLettered"] == 1, answer.text
        # the other nine are not redelivered, nor the dead letter
        quiet_until = time.monotonic() + 8
        while time.monotonic() < quiet_until:
            assert await poll_tagged(gw.http, base, tag, 1000) == []
        assert (await gw.http.delete(base)).status_code == 204

    async with java_client(java_root, "consume", dead, group_name("dlq"), tag, "120", "first") as java:
        await java_consumer_ready(java)
        await java.wait_for(lambda c: bool(c.messages()), 60.0, "the dead letter at the Java consumer")
        [letter] = java.messages()
    assert decode_value(letter).decode() == sent[4]
    attributes = attributes_of(letter["attribute"])
    assert attributes["gateway.reason"] == "maxDeliveryAttemptsExceeded"
    assert attributes["gateway.group"] == group
    assert attributes["gateway.topic"] == source
    assert attributes["gateway.partitionKey"] == first["partitionKey"]
    assert attributes["gateway.messageId"] == first["messageId"]
    assert attributes["gateway.deliveryAttempts"] == "2"
    assert attributes["gateway.lastFailure"] == "nack"


async def test_deadlines_expire_per_message_and_extended_ones_hold() -> None:
    source, retry = require_topic(HOLD), require_topic(RETRY)
    tag = run_tag("deadline")
    sent = [f"{tag}-{i}" for i in range(2)]
    async with real_gateway(consumers=CONSUMERS) as gw:
        # One message per partition. A held message holds its whole batch and so its partition: had both
        # been in one partition, the real broker may hand them out in two fetches (it did in 2 runs of 4:
        # a batch ended between them), and the second could only come once the first, extended for 60 s,
        # had expired. Whichever comes first is extended at once (it could expire while the other one is
        # looked for).
        messages = [{"value": v, "partition": i} for i, v in enumerate(sent)]
        answer = await gw.http.post(f"/v1/topics/{source}/messages", json={"messages": messages})
        assert answer.status_code == 200 and "error" not in str(answer.json()["results"]), answer.text
        base = await _create(
            gw.http, group_name("deadline"), topics=[source], retryTopic=retry, ackDeadlineMs=3000
        )
        first: list[dict[str, Any]] = []

        async def both() -> bool:
            got = await poll_tagged(gw.http, base, tag)
            if got and not first:
                answer = await gw.http.post(
                    f"{base}/deadlines", json={"tokens": [got[0]["token"]], "extendMs": 60_000}
                )
                assert answer.json()["extended"] == 1, answer.text
            first.extend(got)
            return len(first) >= 2

        await wait_until(both, 120.0, "both messages")
        kept, dropped = first
        back: list[dict[str, Any]] = []

        async def expired() -> bool:
            back.extend(await poll_tagged(gw.http, base, tag))
            return bool(back)

        await wait_until(expired, 60.0, "the expired message to come back")
        assert [(m["value"], m["deliveryAttempt"]) for m in back] == [(dropped["value"], 2)]
        tokens = [kept["token"], back[0]["token"]]
        answer = await gw.http.post(f"{base}/commits", json={"tokens": tokens})
        assert answer.json()["committed"] == 2, answer.text  # the extended one held: still pending
        quiet_until = time.monotonic() + 5
        while time.monotonic() < quiet_until:
            assert await poll_tagged(gw.http, base, tag, 1000) == []


async def test_a_gateway_stopped_between_the_retry_publish_and_the_settle_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, retry = require_topic(SOURCE), require_topic(RETRY)
    tag = run_tag("crash")
    group = group_name("crash")
    published = asyncio.Event()
    original = Redeliverer._republish

    async def publish_then_hang(
        self: Redeliverer, delivered: DeliveredMessage, delay: float, why: str
    ) -> bool:
        await original(self, delivered, delay, why)
        published.set()
        await (
            asyncio.Event().wait()
        )  # the gateway dies here: the retry copy is stored, the batch not confirmed
        raise AssertionError("unreachable")

    spec: dict[str, Any] = {"topics": [source], "retryTopic": retry}
    async with real_gateway(consumers=CONSUMERS) as gw:
        await _publish(gw.http, source, [f"{tag}-0"])
        base = await _create(gw.http, group, **spec)
        got: list[dict[str, Any]] = []

        async def one() -> bool:
            got.extend(await poll_tagged(gw.http, base, tag))
            return bool(got)

        await wait_until(one, 120.0, "the message")
        monkeypatch.setattr(Redeliverer, "_republish", publish_then_hang)
        instance_id = base.rsplit("/", 1)[1]
        nack = asyncio.create_task(gw.runtime.consumer_service().nack(group, instance_id, [got[0]["token"]]))
        await asyncio.wait_for(published.wait(), 30)
        nack.cancel()
        monkeypatch.setattr(Redeliverer, "_republish", original)
    # the gateway is gone; a new one in the same group gets the message again (maybe twice), never not at all
    async with real_gateway(consumers=CONSUMERS) as gw:
        base = await _create(gw.http, group, **spec)
        again: list[dict[str, Any]] = []

        async def both_copies() -> bool:
            for m in await poll_tagged(gw.http, base, tag):
                again.append(m)
                await gw.http.post(f"{base}/commits", json={"tokens": [m["token"]]})
            return len(again) >= 2

        await wait_until(both_copies, 120.0, "the original and its retry copy")
        assert sorted((m["value"], m["deliveryAttempt"]) for m in again) == [(f"{tag}-0", 1), (f"{tag}-0", 2)]


async def test_seek_on_a_live_instance_to_an_offset_and_to_the_end() -> None:
    source = require_topic(SOURCE)
    tag = run_tag("seek")
    sent = [f"{tag}-{i}" for i in range(5)]
    async with real_gateway(consumers=CONSUMERS) as gw:
        answer = await gw.http.post(
            f"/v1/topics/{source}/messages", json={"messages": [{"value": v} for v in sent]}
        )
        results = answer.json()["results"]
        base = await _create(gw.http, group_name("seek"), topics=[source])
        first: list[dict[str, Any]] = []

        async def all_five() -> bool:
            got = await poll_tagged(gw.http, base, tag)
            if got:
                await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in got]})
            first.extend(got)
            return len(first) >= 5

        await wait_until(all_five, 120.0, "the five messages")
        assert [m["value"] for m in first] == sent
        key = results[2]["partitionKey"]
        moved = await gw.http.post(
            f"{base}/seek", json={"position": "offsets", "offsets": {key: results[2]["offset"]}}
        )
        assert moved.status_code == 200, moved.text
        assert moved.json()["partitions"][0]["currOffset"] == results[2]["offset"]
        again: list[dict[str, Any]] = []

        async def from_the_third() -> bool:
            got = await poll_tagged(gw.http, base, tag)
            if got:
                await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in got]})
            again.extend(got)
            return len(again) >= 3

        await wait_until(from_the_third, 60.0, "the messages from the seek position")
        assert [m["value"] for m in again] == sent[2:], "a seek lands on the message at its offset"
        moved = await gw.http.post(f"{base}/seek", json={"position": "latest"})
        assert moved.status_code == 200, moved.text
        [end] = moved.json()["partitions"]
        assert end["currOffset"] == end["maxOffset"]
        await _publish(gw.http, source, [f"{tag}-after"])
        after: list[dict[str, Any]] = []

        async def only_the_new_one() -> bool:
            after.extend(await poll_tagged(gw.http, base, tag))
            return bool(after)

        await wait_until(only_the_new_one, 60.0, "the message published after the seek to the end")
        assert [m["value"] for m in after] == [f"{tag}-after"]


async def test_lag_equals_the_unconsumed_count_with_no_instance_alive() -> None:
    source = require_topic(SOURCE)  # one partition: its own store, so the lag is exact
    tag = run_tag("lag")
    group = group_name("lag")
    web_port = int(WEB.rsplit(":", 1)[1]) if WEB else 0
    if not web_port:
        pytest.skip("no master web API (TUBEMQ_REAL_WEB) to read the group's offsets from")
    async with real_gateway(consumers=CONSUMERS, tubemq={"master_web_port": web_port}) as gw:
        base = await _create(gw.http, group, topics=[source])
        drained = 0

        async def caught_up() -> bool:
            nonlocal drained
            answer = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000, "max_messages": 500})
            messages = answer.json()["messages"]
            if messages:
                await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in messages]})
                drained += len(messages)
                return False
            held = (await gw.http.get(base)).json()["partitions"]
            return bool(held) and all(p["currOffset"] == p["maxOffset"] for p in held)

        await wait_until(caught_up, 180.0, "the group to consume everything there is")
        assert (await gw.http.delete(base)).status_code == 204
        await _publish(gw.http, source, [f"{tag}-{i}" for i in range(12)])

        async def twelve_behind() -> dict[str, Any] | None:
            answer = await gw.http.get(f"/v1/consumers/{group}/lag")
            body: dict[str, Any] = answer.json()
            return (
                body if answer.status_code == 200 and body["consumers"] == 0 and body["lag"] == 12 else None
            )

        body = await wait_until(
            twelve_behind, 60.0, "the lag of the 12 messages published after the group left"
        )
        [topic] = body["topics"]
        [part] = topic["partitions"]
        assert (topic["topic"], topic["lag"], part["lag"]) == (source, 12, 12)
        assert part["endOffset"] - part["committedOffset"] == 12 * 28


async def test_a_gateway_killed_between_the_retry_publish_and_the_confirm_loses_nothing() -> None:
    """A real SIGKILL of a gateway process (tests/support/kill_after_retry_publish.py) right after the real
    broker acknowledged the retry copy, before the batch was confirmed: no unregister, no goodbye. Once the
    broker and the master time the dead consumer out, the group gets the original again besides the retry
    copy."""
    source, retry = require_topic(SOURCE), require_topic(RETRY)
    tag = run_tag("kill")
    group = group_name("kill")
    async with real_gateway(consumers=CONSUMERS) as gw:
        await _publish(gw.http, source, [f"{tag}-0"])
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SUPPORT_DIR / "kill_after_retry_publish.py"),
        MASTER,
        group,
        source,
        retry,
        tag,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(child.communicate(), 180)
    events = [json.loads(line)["event"] for line in out.decode().splitlines()]
    assert (child.returncode, events) == (-signal.SIGKILL, ["nacking", "published"]), out
    async with real_gateway(consumers=CONSUMERS) as gw:
        base = await _create(gw.http, group, topics=[source], retryTopic=retry)
        got: list[dict[str, Any]] = []

        async def both() -> bool:
            mine = await poll_tagged(gw.http, base, tag)
            if mine:
                await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in mine]})
            got.extend(mine)
            return len(got) >= 2

        # the real broker drops a dead consumer's registration after about 35 s
        await wait_until(both, 150.0, "the original and the retry copy")
        assert sorted((m["value"], m["deliveryAttempt"]) for m in got) == [(f"{tag}-0", 1), (f"{tag}-0", 2)]
