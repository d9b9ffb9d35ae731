"""What the push subscriptions API costs: CPU and wall time per call of each operation, the Redis commands
each one sends, the commands an idle process sends to follow the store, and the memory the definitions take.

Run from the repository root: ``python bench/bench_subscriptions.py [--redis-url URL] [--subscriptions N]
[--rounds R]``. Without ``--redis-url`` it starts a ``redis-server`` of its own on a free loopback port
(the Debian package; ``REDIS_PASSWORD`` is read for a given URL). The gateway runs in this process on an
embedded cluster, called through ASGI (no socket: the figures are the gateway's and the store's, not the
HTTP server's). Each definition is a full one (a secret, a dead-letter topic), paused, so that the figures
are the API's and not the deliveries'.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import redis.asyncio as aioredis

from gateway.api.app import create_app
from gateway.api.consumer_render import render_pushed
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime

SECRET = "whsec_" + base64.b64encode(b"bench-subscriptions-secret-0123").decode()


def _definition(index: int) -> dict[str, Any]:
    return {
        "name": f"bench-{index:05d}",
        "group": f"bench-group-{index:05d}",
        "topics": {"demo": ["a", "b"]},
        "endpoint": f"http://127.0.0.1:9/hook/{index}",
        "retryTopic": "retry",
        "deadLetterTopic": "dlq",
        "maxDeliveryAttempts": 5,
        "secret": SECRET,
        "paused": True,
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _commands(client: Any) -> int:
    """Commands Redis has run so far (INFO stats), less the INFO call itself."""
    info = await client.info("stats")
    return int(info["total_commands_processed"])


async def _measure(
    name: str, calls: list[Any], redis: Any, rounds: int, figures: dict[str, tuple[float, float, float]]
) -> None:
    """Run each of ``calls`` (coroutine factories) once per round; keep the median CPU and wall time per call
    and the Redis commands per call."""
    cpu_runs, wall_runs, command_runs = [], [], []
    for _ in range(rounds):
        before = await _commands(redis)
        start_cpu, start = _cpu(), time.perf_counter()
        for call in calls:
            await call()
        wall, cpu = time.perf_counter() - start, _cpu() - start_cpu
        commands = await _commands(redis) - before - 1
        cpu_runs.append(cpu / len(calls))
        wall_runs.append(wall / len(calls))
        command_runs.append(commands / len(calls))
    figures[name] = (
        statistics.median(cpu_runs),
        statistics.median(wall_runs),
        statistics.median(command_runs),
    )


def _start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it (scripts/ensure_redis.sh) or pass --redis-url")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(command, cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("redis-server did not start") from None
            time.sleep(0.05)


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def bench(args: argparse.Namespace, url: str, password: str | None) -> None:
    cluster = EmbeddedCluster([TopicSpec("demo", 4), TopicSpec("retry", 2), TopicSpec("dlq", 1)], brokers=1)
    await cluster.start()
    runtime = Runtime(
        Settings(
            masters=",".join(str(a) for a in cluster.master_addresses),
            log_level="warning",
            idempotency={"redis_url": url, "redis_password": password},
            push={"allow": ["127.0.0.1/32"], "max_subscriptions": args.subscriptions, "reload_interval": 1.0},
        )
    )
    redis = aioredis.Redis.from_url(url, password=password)
    await runtime.start()
    await runtime.start_push(render_pushed)
    figures: dict[str, tuple[float, float, float]] = {}
    try:
        transport = httpx.ASGITransport(app=create_app(runtime=runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as client:
            rss_before = _rss_kib()
            count = args.subscriptions
            created = 0

            async def create() -> None:
                nonlocal created
                answer = await client.post("/v1/subscriptions", json=_definition(created))
                assert answer.status_code == 201, answer.text
                created += 1

            async def delete_last() -> None:
                nonlocal created
                created -= 1
                answer = await client.delete(f"/v1/subscriptions/bench-{created:05d}")
                assert answer.status_code == 204, answer.text

            # create them all once (the memory figure), then delete and create the last tenth per round
            for _ in range(count):
                await create()
            rss_after = _rss_kib()
            tenth = max(1, count // 10)

            async def listing() -> None:
                answer = await client.get("/v1/subscriptions")
                assert answer.status_code == 200 and len(answer.json()["subscriptions"]) == created

            async def one() -> None:
                assert (await client.get("/v1/subscriptions/bench-00000")).status_code == 200

            async def pause() -> None:
                assert (await client.post("/v1/subscriptions/bench-00000/resume")).status_code == 200
                assert (await client.post("/v1/subscriptions/bench-00000/pause")).status_code == 200

            await _measure(f"list ({count})", [listing] * 20, redis, args.rounds, figures)
            await _measure("get", [one] * 200, redis, args.rounds, figures)
            for _ in range(args.rounds):
                await _measure("delete", [delete_last] * tenth, redis, 1, figures)
                await _measure("create", [create] * tenth, redis, 1, figures)
            await _measure("resume + pause (2 calls)", [pause] * 10, redis, args.rounds, figures)
            before = await _commands(redis)
            await asyncio.sleep(10)
            idle = (await _commands(redis) - before - 1) / 10
    finally:
        await redis.aclose()
        await runtime.stop()
        await cluster.stop()
    print(f"{args.subscriptions} subscriptions in the store; per call, median of {args.rounds} rounds:")
    print(f"{'operation':28s} {'CPU us':>10s} {'wall us':>10s} {'Redis cmds':>10s}")
    for name, (cpu, wall, commands) in figures.items():
        print(f"{name:28s} {cpu * 1e6:10.0f} {wall * 1e6:10.0f} {commands:10.1f}")
    print(f"idle process following the store: {idle:.1f} Redis commands/s (push.reload_interval 1 s)")
    print(
        f"RSS: {rss_before} KiB before the definitions, {rss_after} KiB after ({args.subscriptions} paused)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default="", help="a loopback Redis (default: start redis-server here)")
    parser.add_argument(
        "--subscriptions", type=int, default=100, help="definitions in the store (default 100)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per operation (default 5)")
    args = parser.parse_args()
    if args.redis_url:
        if not args.redis_url.startswith(("redis://127.", "redis://localhost")):
            raise SystemExit("--redis-url must be a loopback Redis")
        asyncio.run(bench(args, args.redis_url, os.environ.get("REDIS_PASSWORD") or None))
        return
    with tempfile.TemporaryDirectory(prefix="bench-subscriptions-") as directory:
        proc, url = _start_redis(Path(directory))
        try:
            asyncio.run(bench(args, url, None))
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
