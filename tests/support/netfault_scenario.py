"""The network-fault scenario run by tests/tubemq/test_network_faults.py (embedded cluster) and
bench/netfault.py (a real cluster): publishes through a gateway in a :class:`~netns_support.NetLab` while its
TubeMQ link gets latency, loss and a partition, then heals; a consumer instance of the same gateway reads
everything back.

What it reports: per phase the publish answers by status and their latency (p50, p99); whether any 200 came
for a request sent while nothing could reach a broker (a dishonest answer); the seconds from the heal to the
first 200; messages acknowledged, received, lost (acknowledged, never received) and duplicated.
:func:`start_gateway_in` starts the gateway inside the lab.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.files import ROOT
from tests.support.netns_support import NetLab


@dataclass
class Request:
    phase: str
    started: float
    ended: float
    status: int


@dataclass
class Report:
    requests: list[Request] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    received: Counter[str] = field(default_factory=Counter)
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    recovery: float | None = None
    dishonest: list[Request] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return len(self.acked - self.received.keys())

    @property
    def duplicated(self) -> int:
        return sum(n - 1 for n in self.received.values() if n > 1)

    def table(self) -> list[dict[str, Any]]:
        rows = []
        for phase in self.phases:
            mine = [r for r in self.requests if r.phase == phase]
            lat = sorted(r.ended - r.started for r in mine)

            def pct(p: float, lat: list[float] = lat) -> float | None:
                return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None

            rows.append(
                {
                    "phase": phase,
                    "answers": dict(sorted(Counter(r.status for r in mine).items())),
                    "p50_ms": pct(0.5),
                    "p99_ms": pct(0.99),
                }
            )
        return rows

    def summary(self) -> dict[str, Any]:
        return {
            "acknowledged": len(self.acked),
            "received": len(self.received),
            "lost": self.lost,
            "duplicated": self.duplicated,
            "recovery_s": None if self.recovery is None else round(self.recovery, 2),
            "dishonest_200": len(self.dishonest),
        }


async def run(
    lab: NetLab,
    url: str,
    topic: str,
    *,
    phase_seconds: float = 4.0,
    partition_seconds: float = 8.0,
    latency_ms: int = 50,
    loss_percent: int = 10,
    tag: str,
    drain_seconds: float = 90.0,
) -> Report:
    report = Report()
    phase = "baseline"
    counter = iter(range(10**9))
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        created = await http.post(
            "/v1/consumers/netlab" + tag.replace("-", ""),
            json={"topics": [topic], "startPosition": "latest", "autoCommit": True},
        )
        created.raise_for_status()
        path = created.json()["baseUrl"].split("/v1/", 1)[1]
        instance = "/v1/" + path
        for _ in range(120):
            await http.get(f"{instance}/messages", params={"timeout_ms": 500})
            if (await http.get(instance)).json()["partitions"]:
                break

        async def publish() -> None:
            while not stop.is_set():
                values = [f"{tag}-{next(counter)}" for _ in range(5)]
                now_phase, started = phase, time.monotonic()
                try:
                    r = await http.post(
                        f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in values]}
                    )
                    status = r.status_code
                    if status == 200:
                        report.acked.update(values)
                    elif status == 207:
                        for res in r.json()["results"]:
                            if res["status"] == 200:
                                report.acked.add(values[res["index"]])
                except httpx.HTTPError:
                    status = 0
                report.requests.append(Request(now_phase, started, time.monotonic(), status))
                if status not in (200, 207):
                    await asyncio.sleep(0.2)

        async def consume() -> None:
            while True:
                try:
                    r = await http.get(f"{instance}/messages", params={"timeout_ms": 1000, "format": "utf8"})
                except httpx.HTTPError:
                    await asyncio.sleep(0.5)
                    continue
                if r.status_code != 200:
                    await asyncio.sleep(0.5)
                    continue
                for message in r.json()["messages"]:
                    if message["value"].startswith(tag + "-"):
                        report.received[message["value"]] += 1

        publishers = [asyncio.create_task(publish()) for _ in range(4)]
        consumer = asyncio.create_task(consume())

        async def enter(name: str, seconds: float) -> float:
            nonlocal phase
            phase = name
            began = time.monotonic()
            await asyncio.sleep(seconds)
            report.phases[name] = (began, time.monotonic())
            return began

        await enter("baseline", phase_seconds)
        lab.latency(latency_ms)
        await enter(f"latency {latency_ms} ms", phase_seconds)
        lab.loss(loss_percent)
        await enter(f"loss {loss_percent}%", phase_seconds)
        lab.partition()
        cut = await enter("partition", partition_seconds)
        lab.clear()
        healed = time.monotonic()
        await enter("healed", max(phase_seconds, 2.0))
        for _ in range(int(60 / 0.5)):
            firsts = [r for r in report.requests if r.started >= healed and r.status == 200]
            if firsts:
                break
            await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*publishers)
        firsts = sorted(r.ended for r in report.requests if r.started >= healed and r.status == 200)
        report.recovery = firsts[0] - healed if firsts else None
        # A 200 for a request sent while nothing crossed the link: a broker cannot have acknowledged it.
        report.dishonest = [
            r for r in report.requests if r.status == 200 and r.started >= cut + 0.2 and r.ended <= healed
        ]
        for _ in range(int(drain_seconds)):
            if report.acked <= report.received.keys():
                break
            await asyncio.sleep(1.0)
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await http.delete(instance)
    return report


def start_gateway_in(lab: NetLab, master_port: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A gateway process inside ``lab``'s client namespace on the master at ``master_port`` (short
    timeouts, one worker, its output in ``log``), once ready: the process and its base URL."""
    port = 20000 + secrets.randbelow(20000)  # the lab's own namespace: nothing else listens there
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TUBEMQ_GATEWAY_PRODUCER__SEND_TIMEOUT": "3",
        "TUBEMQ_GATEWAY_PRODUCER__RPC_TIMEOUT": "1.5",
        "TUBEMQ_GATEWAY_PRODUCER__HEARTBEAT_INTERVAL": "1",
        "TUBEMQ_GATEWAY_PRODUCER__FAILURE_COOLDOWN": "2",
        "TUBEMQ_GATEWAY_PRODUCER__UNAVAILABLE_COOLDOWN": "2",
        "TUBEMQ_GATEWAY_POOL__CONNECT_TIMEOUT": "1",
        "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "1",
        "TUBEMQ_GATEWAY_LOG_LEVEL": "warning",
    }
    cmd = [sys.executable, "-m", "gateway", "serve", "--masters", f"127.0.0.1:{master_port}"]
    cmd += ["--http-host", lab.c_ns_ip, "--http-port", str(port), "--workers", "1", "--grpc-port", "0"]
    with log.open("wb") as out:
        proc = lab.popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))
    url = f"http://{lab.c_ns_ip}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the gateway in the lab did not become ready:\n{log.read_text()[-3000:]}")
