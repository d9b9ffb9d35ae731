"""Push subscription throughput against the REST long poll on the same backlog: a gateway pushing 1 KiB
messages to a receiver on 127.0.0.1, next to auto-commit REST long polls and the client core reading the same
preloaded messages, each in its own group.

Run from the repository root: ``python bench/bench_push.py [--messages N] [--size B] [--partitions P]
[--concurrency C ...] [--max-messages M] [--no-uvloop]``. Cluster, gateway, receiver and HTTP client share one
process and one event loop, so every figure includes the other side's work (the receiver reads each request
and answers 204 at once; the poll client parses the JSON answers). One push case per ``--concurrency``
(the subscription's maxConcurrency: requests in flight at once). Push sends one message per request, signed
(HMAC-SHA256), wrapped in the poll answer's JSON, and commits each one.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvicorn
from bench_poll import TOPIC, core, preload, report, rest_poll
from benchloop import pick_loop

from gateway.api.app import create_app
from gateway.api.consumer_render import render_pushed
from gateway.config import ConsumerSettings, RateLimitSettings, Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime

RETRY = "bench_retry"
SECRET = "whsec_" + base64.b64encode(b"bench-push-secret-0123456789abcd").decode()


class Counting:
    """An HTTP/1.1 receiver that answers every request 204 and counts them (and their body bytes)."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.done = asyncio.Event()
        self.target = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                self.bytes += len(await reader.readexactly(length))
                self.requests += 1
                if self.requests >= self.target:
                    self.done.set()
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def push(cluster: EmbeddedCluster, count: int, concurrency: int, directory: Path) -> tuple[float, int]:
    """A gateway pushing the backlog to a counting receiver; (seconds until ``count`` requests, bytes)."""
    receiver = Counting()
    receiver.target = count
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    definition = {
        "name": f"bench-{concurrency}",
        "group": f"bench-push-{concurrency}",
        "topics": [TOPIC],
        "endpoint": f"http://127.0.0.1:{port}/hook",
        "startPosition": "earliest",
        "retryTopic": RETRY,
        "maxConcurrency": concurrency,
        "secret": SECRET,
    }
    path = directory / f"push-{concurrency}.json"
    path.write_text(json.dumps({"subscriptions": [definition]}), encoding="utf-8")
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        consumers=ConsumerSettings(heartbeat_interval=0.2, empty_fetch_wait=0.05),
        push={"subscriptions_file": str(path), "allow": ["127.0.0.1"], "poll_wait": 0.2},
    )
    runtime = Runtime(settings)
    await runtime.start()
    try:
        start = time.perf_counter()
        await runtime.start_push(render_pushed)
        await asyncio.wait_for(receiver.done.wait(), timeout=600)
        return time.perf_counter() - start, receiver.bytes
    finally:
        await runtime.stop()
        server.close()
        await server.wait_closed()


async def rest(cluster: EmbeddedCluster, count: int, max_messages: int) -> tuple[float, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        http_host="127.0.0.1",
        http_port=sock.getsockname()[1],
        consumers=ConsumerSettings(heartbeat_interval=0.2, empty_fetch_wait=0.05),
        rate_limits=RateLimitSettings(max_instances_per_principal=0),
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = uvicorn.Server(
        uvicorn.Config(create_app(runtime=runtime), log_level="warning", access_log=False)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
            await asyncio.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
            return await rest_poll(http, count, max_messages)
    finally:
        server.should_exit = True
        await task
        await runtime.stop()
        sock.close()


async def run(count: int, size: int, partitions: int, concurrency: list[int], max_messages: int) -> None:
    topics = [TopicSpec(TOPIC, partitions), TopicSpec(RETRY, 2)]
    async with EmbeddedCluster(topics, balance_period=0.2) as cluster:
        start = time.perf_counter()
        await preload(cluster, count, size)
        print(f"preloaded {count:,} messages in {time.perf_counter() - start:.1f}s")
        print(f"{'path':<22}{'msgs/s':>12}{'MiB/s':>9}{'seconds':>9}")
        seconds, total = await core(cluster, count)
        report("core poll+confirm", count, seconds, total)
        seconds, total = await rest(cluster, count, max_messages)
        report(f"REST poll (max {max_messages})", count, seconds, total)
        with tempfile.TemporaryDirectory() as directory:
            for c in concurrency:
                seconds, total = await push(cluster, count, c, Path(directory))
                report(f"push (concurrency {c})", count, seconds, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per case (default 20000)")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the topic (default 8)")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[16, 64],
        help="push maxConcurrency cases (default 16 64)",
    )
    parser.add_argument(
        "--max-messages", type=int, default=1000, help="max_messages per REST poll (default 1000)"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    args = parser.parse_args()
    loop_factory, loop_name = pick_loop(args.no_uvloop)
    print(
        f"messages={args.messages} size={args.size} partitions={args.partitions} loop={loop_name} "
        f"python={sys.version.split()[0]}"
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args.messages, args.size, args.partitions, args.concurrency, args.max_messages))


if __name__ == "__main__":
    main()
