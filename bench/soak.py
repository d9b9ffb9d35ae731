"""A bounded soak: a mixed load on one gateway for N minutes, with what it costs and what it lost.

Run from the repository root against a running TubeMQ master (for example the loopback harness of
``../shared/tubemq-real``), or without ``--master`` on the embedded cluster::

    python bench/soak.py --master 127.0.0.1:8715 --topic gw4 --minutes 5

It starts ``tubemq-gateway serve --workers W`` (or uses ``--url`` of a gateway), then for ``--minutes``:

* publishes ``--rate`` messages per second as JSON batches of ``--batch`` messages over ``--connections``
  connections, each message's value unique to the run (``<run>:<seq>``);
* consumes the topic in ``--poll-groups`` groups by REST long poll and one group by SSE, each from the
  latest position (instances created before the first publish) with auto-commit.

Every minute it prints the gateway's RSS, open fds and threads (summed over its process tree: supervisor and
workers), the publish requests and messages of the minute by answer, and the publish latency percentiles.
At the end it waits (``--drain`` seconds at most) for the consumers to catch up, then prints per group the
messages acknowledged (per-message status 200), received, lost (acknowledged, never received) and duplicated
(received more than once). Messages not acknowledged are not expected anywhere (and are not counted lost if
they arrive). Benchmarks print numbers; nothing here asserts.

With ``--outage SIGTERM|SIGKILL`` (a real cluster's harness, ``--harness``; run it under the cluster's lock)
the broker is stopped ``--outage-at`` s into the run and started again (``start.sh``) ``--outage-for`` s after
it exited; the report then adds the publish answers by status from the signal to the first 200 after the
restart, when that came, and when ``/readyz`` was unready.

Only 127.0.0.1 is ever contacted; ``--master`` and ``--url`` must be loopback addresses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from proc_cpu import process_tree

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resources(root: int) -> tuple[float, int, int]:
    """RSS (MB), open fds and threads of ``root``'s process tree."""
    rss_kb = fds = threads = 0
    for pid in process_tree(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            fds += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kb += int(line.split()[1])
            elif line.startswith("Threads:"):
                threads += int(line.split()[1])
    return rss_kb / 1024, fds, threads


@dataclass
class Minute:
    latencies: list[float] = field(default_factory=list)
    requests: Counter[int] = field(default_factory=Counter)
    messages: Counter[int] = field(default_factory=Counter)


@dataclass
class Group:
    name: str
    kind: str
    received: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


class Soak:
    def __init__(self, args: argparse.Namespace, url: str) -> None:
        self.args = args
        self.url = url
        self.run = uuid.uuid4().hex[:8]
        self.acked: set[str] = set()
        self.minute = Minute()
        self.totals: Counter[int] = Counter()
        self.seq = 0
        self.stop = asyncio.Event()
        self.answers: list[tuple[float, int]] = []  # (answered at, status) of every publish request
        self.ready: list[tuple[float, int]] = []  # (asked at, /readyz status), during an outage run
        self.outage: dict[str, float] = {}

    async def publisher(self, http: httpx.AsyncClient, rate_per_connection: float) -> None:
        interval = self.args.batch / rate_per_connection
        next_at = time.monotonic()
        while not self.stop.is_set():
            ids = [f"{self.run}:{self.seq + i}" for i in range(self.args.batch)]
            self.seq += self.args.batch
            body = {"messages": [{"value": v} for v in ids]}
            started = time.monotonic()
            try:
                r = await http.post(f"/v1/topics/{self.args.topic}/messages", json=body)
                status = r.status_code
                results = r.json().get("results", []) if status in (200, 207) else []
            except (httpx.HTTPError, ValueError):
                status, results = 0, []
            self.minute.latencies.append(time.monotonic() - started)
            self.minute.requests[status] += 1
            self.answers.append((time.monotonic(), status))
            if status == 200:
                self.acked.update(ids)
                self.minute.messages[200] += len(ids)
            elif status == 207:
                for res in results:
                    self.minute.messages[res["status"]] += 1
                    if res["status"] == 200:
                        self.acked.add(ids[res["index"]])
            else:
                self.minute.messages[status] += len(ids)
            self.totals[status] += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def instance(self, http: httpx.AsyncClient, group: str) -> str:
        created = await http.post(
            f"/v1/consumers/{group}",
            json={"topics": [self.args.topic], "startPosition": "latest", "autoCommit": True},
        )
        created.raise_for_status()
        return f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"

    def _take(self, group: Group, value: str) -> None:
        if value.startswith(self.run + ":"):
            group.received[value] += 1

    async def poller(self, http: httpx.AsyncClient, group: Group, path: str, done: asyncio.Event) -> None:
        params = {"max_messages": 1000, "timeout_ms": 1000, "format": "utf8"}
        while not done.is_set():
            try:
                r = await http.get(f"{path}/messages", params=params)
            except httpx.HTTPError as exc:
                group.errors[type(exc).__name__] += 1
                await asyncio.sleep(1.0)
                continue
            if r.status_code == 410:  # its worker died: a new instance (uncommitted messages come again)
                group.errors["410"] += 1
                path = await self.instance(http, group.name)
                continue
            if r.status_code != 200:
                group.errors[str(r.status_code)] += 1
                await asyncio.sleep(1.0)
                continue
            for message in r.json()["messages"]:
                self._take(group, message["value"])
        with contextlib.suppress(httpx.HTTPError):
            await http.get(f"{path}/messages", params={**params, "timeout_ms": 0})  # commits the last batch

    async def streamer(self, http: httpx.AsyncClient, group: Group, path: str, done: asyncio.Event) -> None:
        while not done.is_set():
            try:
                async with http.stream("GET", f"{path}/stream", params={"format": "utf8"}) as response:
                    if response.status_code == 410:
                        group.errors["410"] += 1
                        path = await self.instance(http, group.name)
                        continue
                    if response.status_code != 200:
                        group.errors[str(response.status_code)] += 1
                        await asyncio.sleep(1.0)
                        continue
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            self._take(group, json.loads(line[6:])["value"])
                        if done.is_set():
                            return
            except httpx.HTTPError as exc:
                group.errors[type(exc).__name__] += 1
                await asyncio.sleep(1.0)

    async def broker_outage(self, http: httpx.AsyncClient) -> None:
        """Stop the harness's broker with ``--outage`` (SIGTERM or SIGKILL) at ``--outage-at`` s, start it
        again ``--outage-for`` s later with the harness's start.sh; /readyz is asked twice a second."""
        args = self.args
        home = Path(args.harness)
        pid = harness_broker(home)
        await asyncio.sleep(args.outage_at)
        watcher = asyncio.create_task(self._watch_ready(http))
        self.outage["stopped"] = time.monotonic()
        os.kill(pid, getattr(signal, args.outage))
        await asyncio.to_thread(_wait_exit, pid)
        self.outage["exited"] = time.monotonic()
        await asyncio.sleep(args.outage_for)
        self.outage["restarting"] = time.monotonic()
        done = await asyncio.to_thread(
            subprocess.run, [str(home / "start.sh")], capture_output=True, timeout=400, check=False
        )
        self.outage["restarted"] = time.monotonic()
        if done.returncode != 0:
            print(f"start.sh failed: {done.stderr.decode(errors='replace')[-500:]}", flush=True)
        await asyncio.sleep(20)
        watcher.cancel()

    async def kill_worker(self, root: int) -> None:
        """SIGKILL one worker process of the gateway ``--kill-worker-at`` s into the run; note when the
        supervisor has started another."""
        await asyncio.sleep(self.args.kill_worker_at)
        workers = _workers(root)
        if not workers:
            print("no worker process to kill", flush=True)
            return
        victim = workers[-1]
        self.outage["stopped"] = self.outage["exited"] = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        while True:
            await asyncio.sleep(0.05)
            fresh = [p for p in _workers(root) if p not in workers]
            if fresh:
                self.outage["restarting"] = self.outage["restarted"] = time.monotonic()
                break

    async def _watch_ready(self, http: httpx.AsyncClient) -> None:
        while True:
            try:
                self.ready.append((time.monotonic(), (await http.get("/readyz", timeout=2)).status_code))
            except httpx.HTTPError:
                self.ready.append((time.monotonic(), 0))
            await asyncio.sleep(0.5)

    def report_outage(self) -> None:
        o = self.outage
        if "stopped" not in o:
            return
        stopped, restarting = o["stopped"], o.get("restarting", o["stopped"])
        after = [t for t, status in self.answers if t >= o.get("exited", stopped) and status == 200]
        back = next((t for t in after if t >= restarting), None)
        end = back if back is not None else float("inf")
        during = Counter(status for t, status in self.answers if stopped <= t < end)
        unready = [t for t, status in self.ready if status != 200]
        if self.args.kill_worker_at is not None:
            window = Counter(status for t, status in self.answers if stopped <= t < stopped + 15)
            print(
                f"\nworker SIGKILL: another worker process {o.get('restarted', stopped) - stopped:.2f} s "
                "later; "
                f"publish answers in the 15 s from the kill: {dict(sorted(window.items()))}"
            )
            return
        print(
            f"\nbroker {self.args.outage}: exited {o.get('exited', stopped) - stopped:.1f} s after the "
            f"signal; start.sh took {o.get('restarted', restarting) - restarting:.1f} s"
        )
        codes = dict(sorted(during.items()))
        print(f"publish answers from the signal to the first 200 after the restart: {codes}")
        if back is not None:
            print(
                f"first 200 {back - restarting:.1f} s after start.sh began ({back - stopped:.1f} s after the "
                f"signal, {back - o.get('restarted', restarting):+.1f} s from start.sh's end)"
            )
        if unready:
            print(
                f"/readyz unready from {unready[0] - stopped:+.1f} s to {unready[-1] - stopped:+.1f} s "
                f"after the signal ({len(unready)} of {len(self.ready)} probes)"
            )
        else:
            print(f"/readyz never unready ({len(self.ready)} probes)")

    def report_minute(self, index: int, pid: int | None) -> None:
        m, self.minute = self.minute, Minute()
        lat = sorted(m.latencies)

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

        rss, fds, threads = resources(pid) if pid else (float("nan"), 0, 0)
        codes = " ".join(f"{k}:{v}" for k, v in sorted(m.requests.items()))
        print(
            f"min {index:>3}  rss {rss:8.1f} MB  fds {fds:4d}  threads {threads:3d}  "
            f"req {sum(m.requests.values()):6d} [{codes}]  msg/s {m.messages[200] / 60:8.0f}  "
            f"p50 {pct(0.5):6.1f}  p90 {pct(0.9):6.1f}  p99 {pct(0.99):6.1f}  max {pct(1.0):7.1f} ms",
            flush=True,
        )


async def soak(args: argparse.Namespace, url: str, pid: int | None) -> None:
    s = Soak(args, url)
    limits = httpx.Limits(max_connections=args.connections + 8)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        groups = [Group(f"soak{s.run}p{i}", "poll") for i in range(args.poll_groups)]
        groups.append(Group(f"soak{s.run}sse", "sse"))
        paths = [await s.instance(http, g.name) for g in groups]
        print(f"run {s.run}: waiting for the consumer instances' partitions", flush=True)
        deadline = time.monotonic() + args.join_wait
        while time.monotonic() < deadline:
            held = [len((await http.get(p)).json()["partitions"]) for p in paths]
            if all(held):
                break
            for p in paths:
                await http.get(f"{p}/messages", params={"timeout_ms": 500})
        done = asyncio.Event()
        consumers = [
            asyncio.create_task((s.poller if g.kind == "poll" else s.streamer)(http, g, p, done))
            for g, p in zip(groups, paths, strict=True)
        ]
        publishers_http = [httpx.AsyncClient(base_url=url, timeout=60) for _ in range(args.connections)]
        publishers = [
            asyncio.create_task(s.publisher(c, args.rate / args.connections)) for c in publishers_http
        ]
        outage = asyncio.create_task(s.broker_outage(http)) if args.outage else None
        if args.kill_worker_at is not None and pid is not None:
            outage = asyncio.create_task(s.kill_worker(pid))
        started = time.monotonic()
        rss0 = resources(pid)[0] if pid else float("nan")
        for minute in range(1, args.minutes + 1):
            await asyncio.sleep(max(0.0, started + 60 * minute - time.monotonic()))
            s.report_minute(minute, pid)
        if outage is not None:
            await outage
        s.stop.set()
        await asyncio.gather(*publishers)
        for c in publishers_http:
            await c.aclose()
        rss1 = resources(pid)[0] if pid else float("nan")
        for _ in range(int(args.drain)):
            if all(s.acked <= g.received.keys() for g in groups):
                break
            await asyncio.sleep(1.0)
        done.set()
        await asyncio.wait(consumers, timeout=10)
        for task in consumers:
            task.cancel()
        for p in paths:
            with contextlib.suppress(httpx.HTTPError):
                await http.delete(p)
    s.report_outage()
    total = sum(s.totals.values())
    print(
        f"\npublish requests {total:,} by status {dict(sorted(s.totals.items()))}; messages acknowledged "
        f"{len(s.acked):,}; RSS {rss0:.1f} -> {rss1:.1f} MB "
        f"({(rss1 - rss0) / max(args.minutes, 1):+.2f} MB/min)"
    )
    print(f"{'group':<22} {'kind':<5} {'acked':>10} {'received':>10} {'lost':>6} {'dup':>6}  errors")
    for g in groups:
        unique = set(g.received)
        lost = len(s.acked - unique)
        dup = sum(n - 1 for n in g.received.values() if n > 1)
        errors = dict(g.errors) or ""
        print(f"{g.name:<22} {g.kind:<5} {len(s.acked):>10,} {len(unique):>10,} {lost:>6} {dup:>6}  {errors}")


def _workers(root: int) -> list[int]:
    """The gateway's worker processes (children running gateway.workers.child), oldest first."""
    found = []
    for pid in process_tree(root)[1:]:
        try:
            if b"gateway.workers.child" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return sorted(found)


def _wait_exit(pid: int) -> None:
    while Path(f"/proc/{pid}").exists():
        time.sleep(0.1)


def harness_broker(home: Path) -> int:
    """The pid of the harness's broker, checked to be that broker."""
    pid = int((home / "run" / "broker.pid").read_text().strip())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    if b"BrokerStartup" not in cmdline or f"-Dtubemq.harness={home}".encode() not in cmdline:
        raise SystemExit(f"pid {pid} is not the broker of the harness at {home}")
    return pid


def start_gateway(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str, object]:
    port = free_port()
    env = {
        **os.environ,
        "TUBEMQ_GATEWAY_LOG_LEVEL": "warning",
        "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "1",
    }
    cmd = [sys.executable, "-m", "gateway", "serve", "--http-host", "127.0.0.1", "--http-port", str(port)]
    cmd += ["--workers", str(args.workers), "--grpc-port", str(free_port())]
    if args.master:
        cmd += ["--masters", args.master]
    else:
        env["TUBEMQ_GATEWAY_MASTERS"] = ""
        cmd += ["--embedded-topics", f"{args.topic}:4"]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - the gateway's stderr, read on failure
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    log.seek(0)
    raise SystemExit(f"the gateway did not become ready:\n{log.read()[-3000:].decode(errors='replace')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--master", default="", help="host:port of a TubeMQ master (loopback); none: embedded"
    )
    parser.add_argument("--url", default="", help="a running gateway's base URL instead of starting one")
    parser.add_argument("--topic", default="gw4")
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages per second published")
    parser.add_argument("--batch", type=int, default=10, help="messages per publish request")
    parser.add_argument("--connections", type=int, default=4, help="publishing connections")
    parser.add_argument("--poll-groups", type=int, default=2, help="groups consuming by REST long poll")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--join-wait", type=float, default=60.0, help="seconds to wait for partitions")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds to let consumers catch up")
    parser.add_argument(
        "--outage",
        choices=["SIGTERM", "SIGKILL"],
        help="stop the real broker of --harness with this signal (run under the cluster's lock)",
    )
    parser.add_argument("--harness", default="/tmp/tubemq-real", help="the real cluster's harness directory")
    parser.add_argument("--kill-worker-at", type=float, help="SIGKILL one gateway worker this many s in")
    parser.add_argument("--outage-at", type=float, default=30.0, help="seconds into the run")
    parser.add_argument("--outage-for", type=float, default=20.0, help="seconds the broker stays down")
    args = parser.parse_args()
    for address in (args.master, args.url.split("//")[-1]):
        if address and not address.startswith(LOOPBACK):
            raise SystemExit(f"{address}: only loopback addresses are allowed")
    proc = None
    if args.url:
        url, pid = args.url.rstrip("/"), None
    else:
        proc, url, _log = start_gateway(args)
        pid = proc.pid
    print(
        f"soak: {args.minutes} min, {args.rate:.0f} msg/s in batches of {args.batch} over "
        f"{args.connections} connections, {args.poll_groups} poll groups + 1 SSE group, topic {args.topic}, "
        f"master {args.master or 'embedded'}, workers {args.workers}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    try:
        asyncio.run(soak(args, url, pid))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
