"""What an acknowledgement survives: the real broker SIGKILLed under load, the native Java producer and the
gateway side by side (the A/B of issue #29).

The real broker answers a send once the message is in its topic store's memory cache; the cache goes to the
store's file when it holds ``memCacheMsgCntInK`` thousand messages or ``memCacheMsgSizeInMB`` MB, or when
``memCacheFlushIntvl`` (20 s) has passed, checked every ``logFlushMemDurMs`` (10 s) (MessageStore.appendMsg2,
flushMemCacheData; MessageStoreManager's MemUnFlushRunner). A SIGTERM flushes it (MessageStore.close); a
SIGKILL loses it. So a message acknowledged within about 30 s before the kill may be lost, whoever sent it,
and one acknowledged earlier may not. Each client publishes tagged messages for a few seconds, the broker
is SIGKILLed, the client stops, the broker is started again, and a fresh Java consumer reads the topic from
the first offset; the figures are printed."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from interop_support import (
    GROUP_READY,
    GW4,
    HOME,
    JavaClient,
    RealGateway,
    broker_pid,
    group_name,
    java_client,
    real_gateway,
    require_topic,
    run_tag,
    start_broker,
)

#: memCacheFlushIntvl (20 s) + logFlushMemDurMs (10 s): the oldest acknowledgement a SIGKILL may take away
CACHE_WINDOW = 30.0
PRODUCE_FOR = 6.0


def kill_broker() -> float:
    """SIGKILL the harness's broker; the monotonic time of the kill."""
    if not (HOME / "start.sh").is_file():
        pytest.skip(f"no {HOME}/start.sh: cannot kill and start the real broker")
    pid = broker_pid()
    if pid is None:
        pytest.skip(f"no running harness broker recorded in {HOME}/run/broker.pid")
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    return killed


async def native_producer(java_root: Path, topic: str, tag: str, acked: dict[str, float]) -> float:
    """The Java producer sends ``tag-i`` synchronously; each acknowledged value's time goes in ``acked``."""
    async with java_client(java_root, "produce", topic, tag, "10000000") as client:
        seen = 0

        def take(c: JavaClient) -> None:
            nonlocal seen
            now = time.monotonic()
            for event in c.events[seen:]:
                if event["event"] == "sent" and event["ok"]:
                    acked[f"{tag}-{event['i']}"] = now
            seen = len(c.events)

        # the JVM starts and the producer registers first: the clock starts at its first acknowledgement
        await client.wait_for(lambda c: bool(c.of("sent")), 60.0, "the Java producer's first send")
        deadline = time.monotonic() + PRODUCE_FOR
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            take(client)
        killed = kill_broker()
        for _ in range(40):  # the sends in flight at the kill are answered (or fail) meanwhile
            await asyncio.sleep(0.05)
            take(client)
        client.proc.kill()
        await client.proc.wait()
        take(client)
    return killed


async def gateway_producer(gw: RealGateway, topic: str, tag: str, acked: dict[str, float]) -> float:
    """Eight connections' worth of 10-message REST batches; each value answered 200 goes in ``acked``."""
    stop = asyncio.Event()
    counter = iter(range(10**9))

    async def publish() -> None:
        while not stop.is_set():
            values = [f"{tag}-{next(counter)}" for _ in range(10)]
            try:
                r = await gw.http.post(
                    f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in values]}
                )
            except Exception:
                await asyncio.sleep(0.1)
                continue
            now = time.monotonic()
            if r.status_code == 200:
                acked.update(dict.fromkeys(values, now))
            elif r.status_code == 207:
                for res in r.json()["results"]:
                    if res["status"] == 200:
                        acked[values[res["index"]]] = now
            else:
                await asyncio.sleep(0.1)

    tasks = [asyncio.create_task(publish()) for _ in range(8)]
    await asyncio.sleep(PRODUCE_FOR)
    killed = kill_broker()
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*tasks)
    return killed


async def read_back(java_root: Path, topic: str, tag: str, wanted: int) -> set[str]:
    """Every value starting with ``tag`` a fresh Java consumer reads from the first offset."""
    group = group_name("durable")
    async with java_client(java_root, "consume", topic, group, tag, "600", "first") as client:
        await client.wait_for(lambda c: bool(c.of("ready")), GROUP_READY, "the Java consumer to be ready")
        count, quiet_since = -1, time.monotonic()
        while time.monotonic() - quiet_since < 8.0:
            await asyncio.sleep(0.5)
            now = len(client.messages())
            if now != count:
                count, quiet_since = now, time.monotonic()
            if count >= wanted:
                break
        return {base64.b64decode(e["value"]).decode() for e in client.messages()}


async def test_acknowledged_then_broker_sigkill_native_and_gateway(java_root: Path) -> None:
    topic = require_topic(GW4)
    rows: dict[str, dict[str, Any]] = {}
    for side in ("native", "gateway"):
        tag = run_tag(f"dur{side}")
        acked: dict[str, float] = {}
        try:
            if side == "native":
                killed = await native_producer(java_root, topic, tag, acked)
            else:
                async with real_gateway(producer={"send_timeout": 3.0, "rpc_timeout": 2.0}) as gw:
                    killed = await gateway_producer(gw, topic, tag, acked)
        finally:
            await asyncio.to_thread(start_broker)
        restarted = time.monotonic()
        got = await read_back(java_root, topic, tag, len(acked))
        lost = {v: killed - t for v, t in acked.items() if v not in got}
        before = [v for v, t in acked.items() if t <= killed]
        rows[side] = {
            "acknowledged": len(acked),
            "acknowledged_before_kill": len(before),
            "lost": len(lost),
            "lost_oldest_s_before_kill": round(max(lost.values()), 2) if lost else None,
            "lost_newest_s_before_kill": round(min(lost.values()), 2) if lost else None,
            "restart_s": round(restarted - killed, 1),
        }
        assert acked, f"{side}: nothing was acknowledged"
        # the broker loses at most its memory cache: nothing acknowledged longer before the kill
        assert all(age <= CACHE_WINDOW for age in lost.values()), rows
    print("acknowledged before a broker SIGKILL, then lost:", rows)
