"""A worker of ``serve --workers 2`` on the real TubeMQ is SIGKILLed while its consumer instance holds every
partition of a group. Its successor releases the dead consumer at the real broker and master (the ledger,
gateway.service.registrations), so a new instance of the group gets the partitions within seconds; with
the ledger removed (what happened before), the real broker refuses them until its registration timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from interop_support import GROUP_READY, GW4, MASTER, group_name, require_topic

from tests.support.workers_support import WorkerGateway, start_workers


def _starts(gw: WorkerGateway, worker: int) -> list[dict[str, Any]]:
    return [r for r in gw.records() if r.get("msg") == "worker process started" and r["worker"] == worker]


async def _holding(
    gw: WorkerGateway, worker: int, group: str, topic: str, count: int, within: float
) -> float:
    """Create an instance of ``group`` on ``worker``; seconds until it holds ``count`` partitions."""
    started = time.monotonic()
    async with gw.pinned(worker) as client:
        created = await client.post(f"/v1/consumers/{group}", json={"topics": [topic]})
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"
        while True:
            await client.get(f"{path}/messages", params={"timeout_ms": 500})
            held = (await client.get(path)).json()["partitions"]
            if len(held) >= count:
                return time.monotonic() - started
            assert time.monotonic() - started < within, f"{len(held)} of {count} partitions after {within} s"


def _kill_worker_1(gw: WorkerGateway, *, drop_ledger: bool) -> None:
    seen = len(_starts(gw, 1))
    os.kill(_starts(gw, 1)[-1]["pid"], signal.SIGKILL)
    if drop_ledger:  # before the successor starts: it finds nothing to release (the old behaviour)
        (gw.socket_dir / "w1.consumers.json").unlink()
    deadline = time.monotonic() + 60
    while len(_starts(gw, 1)) == seen:
        assert time.monotonic() < deadline, "worker 1 was not started again"
        time.sleep(0.05)


def test_a_dead_workers_partitions_are_free_in_seconds(tmp_path: Path) -> None:
    topic, count = require_topic(GW4), GW4[1]
    env = {"TUBEMQ_GATEWAY_MASTERS": MASTER, "TUBEMQ_GATEWAY_SUPERVISOR__RESTART_BACKOFF": "0.5"}
    gw = start_workers(tmp_path, 2, env=env)
    figures: dict[str, float] = {}
    try:
        for case, drop in (("released", False), ("left to time out", True)):
            group = group_name("crash")
            asyncio.run(_holding(gw, 1, group, topic, count, GROUP_READY))
            killed = time.monotonic()
            _kill_worker_1(gw, drop_ledger=drop)
            asyncio.run(_holding(gw, 0, group, topic, count, 120.0))
            figures[case] = round(time.monotonic() - killed, 1)
        print("seconds from the SIGKILL to a new instance holding every partition:", figures)
        released = [r for r in gw.records() if r.get("msg", "").startswith("released a dead worker")]
        assert released and (released[0]["closed"], released[0]["partitions"]) == (1, count), released
        assert figures["released"] < 20, figures
        # the real broker keeps a dead consumer's registration until consumerRegTimeoutMs (35 s)
        assert figures["left to time out"] > 25, figures
    finally:
        gw.stop()
