"""REST publish throughput next to the client core's, so the gateway's overhead shows as a ratio.

Run from the repository root:
``python bench/bench_publish.py [--seconds S] [--concurrency C] [--size B] [--driver auto|hey|wrk|httpx]
[--workers N]``.

Three processes, as in production: an embedded cluster (``tubemq-gateway embedded``), a gateway
(``tubemq-gateway serve --masters ...``) and this load generator. It measures, for ``--size``-byte values:

* REST, one message per request (JSON body), C requests in flight;
* REST, 100-message JSON batches, C requests in flight;
* the core directly: a Producer in this process sending to the same cluster, C*100 sends in flight
  (as many messages in flight as the batched REST case).

The REST load comes from ``hey`` or ``wrk`` when one is installed (Debian packages of those names), else
from httpx in this process. httpx's async client is slow enough to be the bottleneck (about a hundred
one-message requests per second on two cores, whatever the gateway does), so prefer a native driver;
the one used is printed. On a small machine every driver competes with the gateway for CPU: the numbers
are for comparing versions on one machine, not absolute capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.tubemq.address import NodeAddress  # noqa: E402
from gateway.tubemq.net.pool import ConnectionPool  # noqa: E402
from gateway.tubemq.producer.client import Producer  # noqa: E402

TOPIC = "bench"
DRIVERS = ("hey", "wrk", "httpx")


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


def start_gateway(
    master: NodeAddress,
    port: int,
    *,
    grpc_port: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``tubemq-gateway serve`` against ``master`` and wait until it is ready; gRPC only with a port."""
    # one gateway process unless asked (serve defaults to one worker per CPU)
    environ = {
        "TUBEMQ_GATEWAY_WORKERS": "1",
        **os.environ,
        "TUBEMQ_GATEWAY_LOG_LEVEL": "warning",
        **(env or {}),
    }
    cmd = [sys.executable, "-m", "gateway", "serve", "--masters", str(master)]
    cmd += ["--http-host", "127.0.0.1", "--http-port", str(port)]
    if grpc_port is None:
        environ["TUBEMQ_GATEWAY_GRPC__ENABLED"] = "false"
    else:
        cmd += ["--grpc-port", str(grpc_port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def publish_body(batch: int, size: int) -> dict[str, list[dict[str, object]]]:
    return {"messages": [{"value": "x" * size, "attributes": {"bench": "1"}} for _ in range(batch)]}


def pick_driver(wanted: str) -> str:
    """The load generator: ``wanted``, or with ``auto`` the first of hey, wrk, httpx that is installed."""
    if wanted == "httpx":
        return wanted
    if wanted != "auto":
        if shutil.which(wanted) is None:
            raise SystemExit(f"{wanted} is not installed (apt-get install {wanted}), or use --driver httpx")
        return wanted
    return next(d for d in DRIVERS if d == "httpx" or shutil.which(d) is not None)


def native_load(driver: str, port: int, batch: int, size: int, concurrency: int, seconds: float) -> float:
    """Messages per second with ``hey`` or ``wrk`` posting one fixed body, ``concurrency`` connections."""
    url = f"http://127.0.0.1:{port}/v1/topics/{TOPIC}/messages"
    body = json.dumps(publish_body(batch, size))
    httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30).raise_for_status()
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body.json"
        body_file.write_text(body)
        if driver == "hey":
            cmd = ["hey", "-z", f"{seconds:g}s", "-c", str(concurrency), "-m", "POST"]
            cmd += ["-T", "application/json", "-D", str(body_file), url]
        else:
            script = Path(tmp) / "post.lua"
            script.write_text(
                'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f'local f = io.open({json.dumps(str(body_file))})\nwrk.body = f:read("*a")\nf:close()\n'
            )
            duration = f"{max(1, round(seconds))}s"  # wrk takes whole seconds only
            cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{duration}", "-s", str(script), url]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rate, _ = parse_load(driver, out)
    return rate * batch


def parse_load(driver: str, out: str) -> tuple[float, float | None]:
    """Requests per second and the p99 latency in ms (when reported) from wrk's or hey's output; a failed
    request ends the bench."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise SystemExit(f"cannot read the rate from {driver}'s output:\n{out}")
    if driver == "hey":
        failed = [c for c in re.findall(r"\[(\d{3})\]\s+\d+ responses", out) if c != "200"]
        failed += ["errors"] if "Error distribution" in out else []
        p99 = re.search(r"99% in ([\d.]+) secs", out)
        p99_ms = float(p99.group(1)) * 1000 if p99 else None
    else:
        failed = ["non-2xx"] if "Non-2xx" in out or "Socket errors" in out else []
        m = re.search(r"\s99%\s+([\d.]+)(us|ms|s)\b", out)
        p99_ms = float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)] if m else None
    if failed:
        raise SystemExit(f"publish failed under {driver}:\n{out}")
    return float(rate.group(1)), p99_ms


async def rest_load(port: int, batch: int, size: int, concurrency: int, seconds: float) -> float:
    body = publish_body(batch, size)
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
    await producer.register_topic(TOPIC)
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
    parser.add_argument(
        "--driver",
        choices=("auto", *DRIVERS),
        default="auto",
        help="REST load generator (default auto: hey, else wrk, else httpx)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway worker processes (serve --workers; default 1)"
    )
    args = parser.parse_args()
    driver = pick_driver(args.driver)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    cluster, master = start_cluster()
    port = free_port()
    gateway = start_gateway(master, port, env={"TUBEMQ_GATEWAY_WORKERS": str(args.workers)})
    try:
        if driver == "httpx":
            single = asyncio.run(rest_load(port, 1, args.size, args.concurrency, args.seconds))
            batched = asyncio.run(rest_load(port, 100, args.size, args.concurrency, args.seconds))
        else:
            single = native_load(driver, port, 1, args.size, args.concurrency, args.seconds)
            batched = native_load(driver, port, 100, args.size, args.concurrency, args.seconds)
        core = asyncio.run(core_load(master, args.size, args.concurrency * 100, args.seconds))
    finally:
        for proc in (gateway, cluster):
            proc.terminate()
            proc.wait(timeout=30)
    print(
        f"value size {args.size} B, {args.concurrency} HTTP requests in flight, {args.seconds:g} s per case, "
        f"REST load from {driver}, {args.workers} gateway worker(s)"
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
