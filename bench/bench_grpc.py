"""gRPC publish and consume throughput, with the REST numbers beside them, against one gateway.

Run from the repository root: ``python bench/bench_grpc.py [--seconds S] [--concurrency C] [--size B]
[--messages N] [--streams K] [--no-uvloop]``.

Three processes, as in production: an embedded cluster (``tubemq-gateway embedded``), one gateway serving
HTTP and gRPC (``tubemq-gateway serve --masters ...``) and this load generator. Publish cases run for
``--seconds`` each with ``--size``-byte values:

* REST and gRPC ``Publish``, one message per call and 100-message batches, C calls in flight;
* gRPC ``PublishStream``, 100-message requests, on one stream and on K streams.

Consume cases then read ``--messages`` of what was published, each in its own consumer group from the
earliest offset with auto-commit: REST long polls, gRPC ``Poll`` (both up to 1000 messages per call) and a
gRPC ``Subscribe`` stream; timed from the first message, so joining the group is not counted. (The gateway
runs with a 1 s consumer heartbeat for this, see ``start_gateway``.)

Each row also shows the gateway process's CPU microseconds per message over the case (user + system, from
``/proc``): on a shared machine the rates move with the load, the CPU per message much less. The REST rows
use ``wrk`` or ``hey`` when one is installed (``--driver``), else httpx from this process.

The load generator is Python too (httpx, grpc.aio), so on a small machine it competes with the gateway
for CPU; compare the rows with each other and across versions on one machine, not as absolute capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_publish import (  # noqa: E402
    TOPIC,
    free_port,
    native_load,
    pick_driver,
    rest_load,
    start_cluster,
    start_gateway,
)
from benchloop import pick_loop  # noqa: E402
from proc_cpu import cpu_seconds  # noqa: E402

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb  # noqa: E402
from gateway.grpc.pb.tubemq.gateway.v1.gateway_pb2_grpc import GatewayServiceStub as Stub  # noqa: E402

BATCH = 100


async def timed(seconds: float, workers: int, work: Callable[[], Awaitable[int]]) -> float:
    """Run ``workers`` loops of ``work`` (returning messages done) for ``seconds``; messages per second."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        while loop.time() < deadline:
            n = await work()  # not `done += await work()`: that reads `done` before the await
            done += n

    start = loop.time()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return done / (loop.time() - start)


async def grpc_publish(stub: Stub, batch: int, size: int, c: int, s: float, topic: str = TOPIC) -> float:
    request = pb.PublishRequest(topic=topic, messages=[_message(size)] * batch)
    await stub.Publish(request)

    async def one() -> int:
        response = await stub.Publish(request)
        if response.failed:
            raise SystemExit(f"gRPC publish failed: {response.results[0].error}")
        return batch

    return await timed(s, c, one)


async def grpc_stream(stub: Stub, size: int, streams: int, seconds: float, topic: str = TOPIC) -> float:
    request = pb.PublishStreamRequest(topic=topic, messages=[_message(size)] * BATCH)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    acked = 0

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        while loop.time() < deadline:
            yield request

    async def stream() -> None:
        nonlocal acked
        async for response in stub.PublishStream(requests()):
            for ack in response.acks:
                if ack.HasField("error"):
                    raise SystemExit(f"gRPC stream publish failed: {ack.error}")
            acked += len(response.acks)

    start = loop.time()
    await asyncio.gather(*(stream() for _ in range(streams)))
    return acked / (loop.time() - start)


def _message(size: int) -> pb.Message:
    return pb.Message(value=b"x" * size, attributes={"bench": "1"})


async def _instance(stub: Stub, group: str) -> str:
    created = await stub.CreateConsumer(
        pb.CreateConsumerRequest(
            group=group, topics=[TOPIC], start_position=pb.START_POSITION_EARLIEST, auto_commit=True
        )
    )
    return created.instance_id


async def consume(count: int, fetch: Callable[[], Awaitable[int]], on_first: Callable[[], None]) -> float:
    """Messages per second from the first message (joining the group is not timed) to ``count``;
    ``on_first`` runs when the first message is in (where the CPU measure starts)."""
    received = await fetch()
    empty = 0
    while not received:  # the instance is still waiting for its partitions
        empty += 1
        if empty > 10:
            raise SystemExit("no message arrived: the consumer got no partitions")
        received = await fetch()
    on_first()
    start = time.perf_counter()
    first = received
    while received < count:
        got = await fetch()
        if not got:
            raise SystemExit(f"consuming stalled after {received} messages")
        received += got
    return (received - first) / (time.perf_counter() - start)


async def rest_poll(http: httpx.AsyncClient, count: int, on_first: Callable[[], None]) -> float:
    created = await http.post(
        "/v1/consumers/bench-rest", json={"topics": [TOPIC], "startPosition": "earliest", "autoCommit": True}
    )
    path = f"/v1/consumers/bench-rest/instances/{created.json()['instanceId']}/messages"
    params = {"max_messages": 1000, "max_bytes": 64 * 2**20, "timeout_ms": 5000}

    async def fetch() -> int:
        return len((await http.get(path, params=params)).json()["messages"])

    return await consume(count, fetch, on_first)


async def grpc_poll(stub: Stub, count: int, on_first: Callable[[], None]) -> float:
    instance = await _instance(stub, "bench-grpc-poll")
    request = pb.PollRequest(
        group="bench-grpc-poll",
        instance_id=instance,
        max_messages=1000,
        max_bytes=64 * 2**20,
        timeout_ms=5000,
    )

    async def fetch() -> int:
        return len((await stub.Poll(request)).messages)

    return await consume(count, fetch, on_first)


async def grpc_subscribe(stub: Stub, count: int, on_first: Callable[[], None]) -> float:
    instance = await _instance(stub, "bench-grpc-sub")
    request = pb.SubscribeRequest(group="bench-grpc-sub", instance_id=instance, max_messages=1000)
    call = stub.Subscribe(request)

    async def fetch() -> int:
        response = await call.read()
        if response is grpc.aio.EOF:
            raise SystemExit("the Subscribe stream ended")
        return len(response.messages)

    try:
        return await consume(count, fetch, on_first)
    finally:
        call.cancel()


class Meter:
    """The gateway's CPU and the wall clock over one case."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu0 = self.t0 = 0.0

    def start(self) -> None:
        self.cpu0, self.t0 = cpu_seconds(self.pid), time.perf_counter()

    def us_per_message(self, rate: float) -> float:
        """CPU microseconds per message since :meth:`start`, at ``rate`` messages per second."""
        cpu, elapsed = cpu_seconds(self.pid) - self.cpu0, time.perf_counter() - self.t0
        return cpu / (rate * elapsed) * 1e6 if rate else float("nan")


Row = tuple[str, float, float]


CASES = (
    "rest-single",
    "grpc-single",
    "rest-batch",
    "grpc-batch",
    "grpc-stream",
    "grpc-streams",
    "rest-poll",
    "grpc-poll",
    "grpc-subscribe",
)


async def run(args: argparse.Namespace, http_port: int, grpc_port: int, pid: int) -> list[Row]:
    c, s, size, n = args.concurrency, args.seconds, args.size, args.messages
    meter = Meter(pid)
    rows: list[Row] = []

    def rest(batch: int) -> Awaitable[float]:
        if args.driver == "httpx":
            return rest_load(http_port, batch, size, c, s)
        return asyncio.to_thread(native_load, args.driver, http_port, batch, size, c, s)

    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = Stub(channel)
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=30.0)
        cases: dict[str, tuple[str, Callable[[], Awaitable[float]], bool]] = {
            "rest-single": ("REST, 1 message per request", lambda: rest(1), False),
            "grpc-single": (
                "gRPC Publish, 1 message per call",
                lambda: grpc_publish(stub, 1, size, c, s),
                False,
            ),
            "rest-batch": ("REST, 100-message batches", lambda: rest(BATCH), False),
            "grpc-batch": (
                "gRPC Publish, 100-message batches",
                lambda: grpc_publish(stub, BATCH, size, c, s),
                False,
            ),
            "grpc-stream": ("gRPC PublishStream, 1 stream", lambda: grpc_stream(stub, size, 1, s), False),
            "grpc-streams": (
                f"gRPC PublishStream, {args.streams} streams",
                lambda: grpc_stream(stub, size, args.streams, s),
                False,
            ),
            # the consume cases start the meter at their first message (joining the group is not counted)
            "rest-poll": ("REST poll (max 1000)", lambda: rest_poll(http, n, meter.start), True),
            "grpc-poll": ("gRPC Poll (max 1000)", lambda: grpc_poll(stub, n, meter.start), True),
            "grpc-subscribe": ("gRPC Subscribe", lambda: grpc_subscribe(stub, n, meter.start), True),
        }
        async with http:
            for key in CASES:
                if key not in args.cases:
                    continue
                name, case, starts_itself = cases[key]
                if not starts_itself:
                    meter.start()
                rate = await case()
                rows.append((name, rate, meter.us_per_message(rate)))
                print(f"  {name}: {rate:,.0f} msg/s, {rows[-1][2]:.1f} us/msg", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per publish case (default 5)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (default 16)")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    parser.add_argument(
        "--messages", type=int, default=50_000, help="messages per consume case (default 50000)"
    )
    parser.add_argument("--streams", type=int, default=4, help="streams of the multi-stream case (default 4)")
    parser.add_argument("--driver", choices=("auto", "hey", "wrk", "httpx"), default="auto", help="REST load")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    args = parser.parse_args()
    args.cases = set(args.cases.split(","))
    if unknown := args.cases - set(CASES):
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    args.driver = pick_driver(args.driver)
    loop_factory, loop_name = pick_loop(args.no_uvloop)
    cluster, master = start_cluster()
    http_port, grpc_port = free_port(), free_port()
    # A 1 s consumer heartbeat keeps the wait for a new instance's partitions out of the consume cases.
    gateway = start_gateway(
        master, http_port, grpc_port=grpc_port, env={"TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "1"}
    )
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            rows = runner.run(run(args, http_port, grpc_port, gateway.pid))
    finally:
        for proc in (gateway, cluster):
            proc.terminate()
            proc.wait(timeout=30)
    print(
        f"value size {args.size} B, {args.concurrency} calls in flight, {args.seconds:g} s per publish case, "
        f"{args.messages:,} messages per consume case, client loop {loop_name}, REST load from {args.driver}"
    )
    print(f"{'case':<36}{'messages/s':>12}{'MB/s':>9}{'gateway CPU us/msg':>20}")
    for name, rate, cpu_us in rows:
        print(f"{name:<36}{rate:>12,.0f}{rate * args.size / 1e6:>9.1f}{cpu_us:>20.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
