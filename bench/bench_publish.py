"""REST publish throughput next to the client core's, so the gateway's overhead shows as a ratio.

Run from the repository root: ``python bench/bench_publish.py [--seconds S] [--concurrency C] [--size B]``.

Three processes, as in production: an embedded cluster (``tubemq-gateway embedded``), a gateway
(``tubemq-gateway serve --masters ...``) and this load generator. It measures, for ``--size``-byte values:

* REST, one message per request (JSON body), C requests in flight;
* REST, 100-message JSON batches, C requests in flight;
* the core directly: a Producer in this process sending to the same cluster, C*100 sends in flight
  (as many messages in flight as the batched REST case).

The load generator is Python too (httpx), so on a small machine it competes with the gateway for CPU;
the numbers are for comparing versions on one machine, not absolute capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.tubemq.address import NodeAddress  # noqa: E402
from gateway.tubemq.pool import ConnectionPool  # noqa: E402
from gateway.tubemq.producer import Producer  # noqa: E402

TOPIC = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster() -> tuple[subprocess.Popen[str], NodeAddress]:
    cmd = [sys.executable, "-m", "gateway", "embedded", "--topics", f"{TOPIC}:8", "--master-port", "0"]
    cmd += ["--broker-port-base", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.match(r"master: (\S+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"embedded cluster did not start: {line!r}")
    return proc, NodeAddress.parse(match.group(1))


def start_gateway(master: NodeAddress, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TUBEMQ_GATEWAY_LOG_LEVEL": "warning", "TUBEMQ_GATEWAY_GRPC__ENABLED": "false"}
    cmd = [sys.executable, "-m", "gateway", "serve", "--masters", str(master)]
    cmd += ["--http-host", "127.0.0.1", "--http-port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("gateway did not become ready")


async def rest_load(port: int, batch: int, size: int, concurrency: int, seconds: float) -> float:
    body = {"messages": [{"value": "x" * size, "attributes": {"bench": "1"}} for _ in range(batch)]}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    done = 0
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30) as client:
        await client.post(f"/v1/topics/{TOPIC}/messages", json=body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds

        async def worker() -> None:
            nonlocal done
            while loop.time() < deadline:
                r = await client.post(f"/v1/topics/{TOPIC}/messages", json=body)
                if r.status_code != 200:
                    raise SystemExit(f"publish failed: {r.status_code} {r.text[:200]}")
                done += batch

        start = loop.time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (loop.time() - start)


async def core_load(master: NodeAddress, size: int, in_flight: int, seconds: float) -> float:
    pool = ConnectionPool()
    producer = Producer([master], pool=pool)
    await producer.start()
    await producer.publish(TOPIC)
    body = b"x" * size
    done = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def worker() -> None:
        nonlocal done
        while loop.time() < deadline:
            await producer.send(TOPIC, body, attributes={"bench": "1"})
            done += 1

    start = loop.time()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    rate = done / (loop.time() - start)
    await producer.close()
    await pool.close()
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per case (default 5)")
    parser.add_argument("--concurrency", type=int, default=16, help="HTTP requests in flight (default 16)")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    cluster, master = start_cluster()
    port = free_port()
    gateway = start_gateway(master, port)
    try:
        single = asyncio.run(rest_load(port, 1, args.size, args.concurrency, args.seconds))
        batched = asyncio.run(rest_load(port, 100, args.size, args.concurrency, args.seconds))
        core = asyncio.run(core_load(master, args.size, args.concurrency * 100, args.seconds))
    finally:
        for proc in (gateway, cluster):
            proc.terminate()
            proc.wait(timeout=30)
    print(
        f"value size {args.size} B, {args.concurrency} HTTP requests in flight, {args.seconds:g} s per case"
    )
    print(f"{'path':<34}{'messages/s':>12}{'MB/s':>9}{'vs core':>9}")
    for name, rate in (
        ("REST, 1 message per request", single),
        ("REST, 100-message batches", batched),
        ("core Producer.send (direct)", core),
    ):
        mbps = rate * args.size / 1e6
        print(f"{name:<34}{rate:>12,.0f}{mbps:>9.1f}{rate / core:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
