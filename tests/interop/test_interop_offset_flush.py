"""Duplicates after a SIGKILL of the real broker: a gateway consumer group and a Java consumer group read the
same messages side by side, the broker is killed under that load and started again, and each group's
duplicates are counted and dated.

The broker keeps a group's confirmed offsets in memory and writes them to its offset file in two steps
(DefaultOffsetManager, FileOffsetStorage): every ``offsetStgCacheFlushMs`` (5,000 ms by default) the
in-memory offsets are copied to the file store's cache, and every ``offsetStgFileSyncMs`` (that plus 1,000
ms) the cache is written to the file. A SIGKILL loses what was confirmed since the last write, so after the
restart a group starts again from an offset up to about 11 s old and gets again what it consumed in that
window (as far as the messages themselves reached the store's file: the memory cache goes there every
``memCacheMsgSizeInMB`` / ``memCacheMsgCntInK`` / ``memCacheFlushIntvl``), whoever the client is."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from pathlib import Path

from interop_support import (
    GROUP_READY,
    GW4,
    HOME,
    JavaClient,
    RealGateway,
    broker_pid,
    group_name,
    java_client,
    java_consumer_ready,
    real_gateway,
    require_topic,
    run_tag,
    start_broker,
)

#: offsetStgCacheFlushMs + offsetStgFileSyncMs of the default broker.ini, and a second for the last batches
FLUSH_WINDOW = 5.0 + 6.0 + 1.0
RATE = 600  # messages per second
PRODUCE_FOR = 15.0
#: 1 KB values: the topic store's memory cache (``memCacheMsgSizeInMB``, 3 MB by default) fills and goes to
#: its file every few seconds, so what was consumed outlives the kill while the last seconds' offsets do not
PAD = "x" * 1000
#: what the gateway's group may get again beyond the Java group's: a fetched batch per partition
SLACK = 4 * 100

#: (first seen, value) for each delivery
Deliveries = list[tuple[float, str]]


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def duplicates(deliveries: Deliveries) -> tuple[int, float]:
    """How many deliveries repeat an earlier one, and the earliest first delivery among the repeated ones."""
    first: dict[str, float] = {}
    count, earliest = 0, float("inf")
    for at, value in deliveries:
        if value in first:
            count += 1
            earliest = min(earliest, first[value])
        else:
            first[value] = at
    return count, earliest


async def publish(gw: RealGateway, topic: str, values: list[str]) -> set[str]:
    """``values`` in 20-message REST batches at ``RATE`` a second; the acknowledged ones."""
    acked: set[str] = set()
    next_at = time.monotonic()
    for start in range(0, len(values), 20):
        chunk = values[start : start + 20]
        body = {"messages": [{"value": f"{v}:{PAD}"} for v in chunk]}
        try:
            r = await gw.http.post(f"/v1/topics/{topic}/messages", json=body)
        except Exception:
            continue
        if r.status_code == 200:
            acked.update(chunk)
        elif r.status_code == 207:
            acked.update(chunk[x["index"]] for x in r.json()["results"] if x["status"] == 200)
        next_at += len(chunk) / RATE
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    return acked


async def gateway_group(gw: RealGateway, base: str, tag: str, got: Deliveries, stop: asyncio.Event) -> None:
    """Auto-commit long polls, as bench/soak.py reads."""
    while not stop.is_set():
        try:
            r = await gw.http.get(f"{base}/messages", params={"timeout_ms": 1000, "format": "utf8"})
        except Exception:
            await asyncio.sleep(0.5)
            continue
        if r.status_code != 200:
            await asyncio.sleep(0.5)
            continue
        now = time.monotonic()
        got += [
            (now, v.split(":")[0]) for m in r.json()["messages"] if (v := str(m["value"])).startswith(tag)
        ]


async def java_group(java: JavaClient, got: Deliveries, stop: asyncio.Event) -> None:
    """Dates the Java consumer's deliveries as they arrive."""
    seen = 0
    while not stop.is_set():
        events = java.messages()
        now = time.monotonic()
        got += [(now, base64.b64decode(e["value"]).decode().split(":")[0]) for e in events[seen:]]
        seen = len(events)
        await asyncio.sleep(0.1)


async def test_duplicates_after_a_broker_sigkill_gateway_and_java(java_root: Path) -> None:
    topic = require_topic(GW4)
    tag = run_tag("flush")
    pid = broker_pid()
    assert pid is not None, f"no harness broker recorded in {HOME}/run/broker.pid"
    async with (
        real_gateway() as gw,
        java_client(java_root, "consume", topic, group_name("flushjava"), tag, "900", "latest") as java,
    ):
        group = group_name("flushgw")
        created = await gw.http.post(
            f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "latest", "autoCommit": True}
        )
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        await java_consumer_ready(java)
        deadline = time.monotonic() + GROUP_READY
        while len((await gw.http.get(base)).json()["partitions"]) < GW4[1]:
            assert time.monotonic() < deadline, "the gateway group was not assigned its partitions"
            await gw.http.get(f"{base}/messages", params={"timeout_ms": 500})
        await asyncio.sleep(2.0)  # both groups fixed their start offsets

        ours: Deliveries = []
        theirs: Deliveries = []
        stop = asyncio.Event()
        readers = [
            asyncio.create_task(gateway_group(gw, base, tag, ours, stop)),
            asyncio.create_task(java_group(java, theirs, stop)),
        ]
        load = asyncio.create_task(publish(gw, topic, [f"{tag}-{i}" for i in range(10**6)]))
        await asyncio.sleep(PRODUCE_FOR)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        load.cancel()
        while alive(pid):  # its ports are free once it is gone
            assert time.monotonic() - killed < 60.0, f"the killed broker {pid} did not exit"
            await asyncio.sleep(0.2)
        await asyncio.to_thread(start_broker)
        restarted = time.monotonic()
        # both groups read again: each gets every message published after the restart
        tail = [f"{tag}-tail{i}" for i in range(100)]
        acked_tail = await publish(gw, topic, tail)
        deadline = time.monotonic() + 240.0
        while not all(acked_tail <= {v for _, v in got} for got in (ours, theirs)):
            assert time.monotonic() < deadline, "a group did not read again within 240 s of the restart"
            await asyncio.sleep(1.0)
        await asyncio.sleep(3.0)
        stop.set()
        await asyncio.gather(*readers)

    figures = {}
    for name, got in (("gateway", ours), ("Java", theirs)):
        count, earliest = duplicates(got)
        resumed = min((at for at, v in got if v in acked_tail), default=float("nan")) - killed
        figures[name] = count
        print(
            f"\n{name} group: {len(got)} deliveries, {count} duplicates (first delivered "
            f"{killed - earliest if count else 0:.1f} s or less before the kill), read again "
            f"{resumed:.1f} s after the kill (broker back after {restarted - killed:.1f} s)"
        )
        # what came again is what was consumed within the broker's offset write interval before the kill
        assert not count or killed - earliest <= FLUSH_WINDOW, name
    assert figures["gateway"] <= figures["Java"] + SLACK
