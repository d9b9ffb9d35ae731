"""Consume throughput of 1 KiB messages: through the client core directly, and through the REST gateway
(long-poll GET .../messages and the SSE stream), each reading the same preloaded messages in its own group.

Run from the repository root: ``python bench/bench_poll.py [--messages N] [--size B] [--partitions P]
[--max-messages M] [--no-uvloop]``. Cluster, gateway and HTTP client share one process and one event loop
(uvloop when installed), so the REST numbers include the client's side (HTTP parsing, JSON, base64 decoding
is not done) as well as the gateway's: poll, JSON encoding with base64 values, commit.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvicorn

from gateway.api.app import create_app
from gateway.config import ConsumerSettings, RateLimitSettings, Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import ConsumerConfig, StartPosition
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer

TOPIC = "bench"


async def preload(cluster: EmbeddedCluster, count: int, size: int) -> None:
    async with ConnectionPool() as pool:
        producer = Producer(cluster.master_addresses, pool=pool)
        await producer.start()
        try:
            await producer.register_topic(TOPIC)
            body = b"x" * size
            queue = iter(range(count))

            async def worker() -> None:
                for _ in queue:
                    await producer.send(TOPIC, body)

            await asyncio.gather(*(worker() for _ in range(100)))
        finally:
            await producer.close()


async def core(cluster: EmbeddedCluster, count: int) -> tuple[float, int]:
    """One core consumer: poll a batch, confirm it, until ``count`` messages; (seconds, bytes)."""
    config = ConsumerConfig(start_position=StartPosition.EARLIEST, heartbeat_interval=0.2)
    async with ConnectionPool() as pool:
        consumer = Consumer(cluster.master_addresses, "bench-core", {TOPIC: None}, pool=pool, config=config)
        await consumer.start()
        try:
            await consumer.wait_for_assignment(10.0)
            received = size = 0
            start = time.perf_counter()
            while received < count:
                batch = await consumer.poll(5.0)
                if batch is None:
                    raise RuntimeError(f"core consumer stalled after {received} messages")
                received += len(batch.messages)
                size += batch.body_bytes
                await consumer.confirm(batch.confirm_context, True)
            return time.perf_counter() - start, size
        finally:
            await consumer.close()


@asynccontextmanager
async def gateway(cluster: EmbeddedCluster, consumers: ConsumerSettings | None = None) -> AsyncIterator[str]:
    """The REST gateway on ``cluster`` (fast consumer timings unless ``consumers`` is given); its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        http_host="127.0.0.1",
        http_port=port,
        consumers=consumers or ConsumerSettings(heartbeat_interval=0.2, empty_fetch_wait=0.05),
        rate_limits=RateLimitSettings(max_instances_per_principal=0),  # a bench holds many instances
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
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        await runtime.stop()
        sock.close()


async def rest_poll(http: httpx.AsyncClient, count: int, max_messages: int) -> tuple[float, int]:
    """Auto-commit long polls of up to ``max_messages`` until ``count`` messages; (seconds, value bytes)."""
    created = await http.post(
        "/v1/consumers/bench-rest", json={"topics": [TOPIC], "startPosition": "earliest", "autoCommit": True}
    )
    path = f"/v1/consumers/bench-rest/instances/{created.json()['instanceId']}/messages"
    params = {"max_messages": max_messages, "max_bytes": 64 * 2**20, "timeout_ms": 5000}
    received = size = 0
    start = time.perf_counter()
    while received < count:
        messages = (await http.get(path, params=params)).json()["messages"]
        if not messages:
            raise RuntimeError(f"REST poll stalled after {received} messages")
        received += len(messages)
        size += sum(len(m["value"]) * 3 // 4 for m in messages)
    return time.perf_counter() - start, size


async def rest_stream(http: httpx.AsyncClient, count: int, max_messages: int) -> tuple[float, int]:
    """An auto-commit SSE stream until ``count`` events; (seconds, value bytes)."""
    created = await http.post(
        "/v1/consumers/bench-sse", json={"topics": [TOPIC], "startPosition": "earliest", "autoCommit": True}
    )
    path = f"/v1/consumers/bench-sse/instances/{created.json()['instanceId']}/stream"
    received = size = 0
    start = time.perf_counter()
    async with http.stream("GET", path, params={"max_messages": max_messages}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                received += 1
                size += (len(line) - line.index('"value":"')) * 3 // 4
                if received >= count:
                    break
    return time.perf_counter() - start, size


def report(name: str, count: int, seconds: float, size: int) -> None:
    print(f"{name:<22}{count / seconds:>12,.0f}{size / seconds / 2**20:>9.1f}{seconds:>9.2f}")


async def run(count: int, size: int, partitions: int, max_messages: int) -> None:
    async with EmbeddedCluster([TopicSpec(TOPIC, partitions)], balance_period=0.2) as cluster:
        start = time.perf_counter()
        await preload(cluster, count, size)
        print(f"preloaded {count:,} messages in {time.perf_counter() - start:.1f}s")
        print(f"{'path':<22}{'msgs/s':>12}{'MiB/s':>9}{'seconds':>9}")
        seconds, total = await core(cluster, count)
        report("core poll+confirm", count, seconds, total)
        async with gateway(cluster) as url, httpx.AsyncClient(base_url=url, timeout=30.0) as http:
            cases: list[tuple[str, Callable[[httpx.AsyncClient, int, int], Awaitable[tuple[float, int]]]]] = [
                (f"REST poll (max {max_messages})", rest_poll),
                ("REST SSE stream", rest_stream),
            ]
            for name, case in cases:
                seconds, total = await case(http, count, max_messages)
                report(name, count, seconds, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages", type=int, default=50_000, help="messages to read per case (default 50000)"
    )
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the topic (default 8)")
    parser.add_argument(
        "--max-messages", type=int, default=1000, help="max_messages per REST poll (default 1000)"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    args = parser.parse_args()
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            loop_factory = uvloop.new_event_loop
    loop_name = "asyncio" if loop_factory is None else "uvloop"
    print(
        f"messages={args.messages} size={args.size} partitions={args.partitions} loop={loop_name} "
        f"python={sys.version.split()[0]}"
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args.messages, args.size, args.partitions, args.max_messages))


if __name__ == "__main__":
    main()
