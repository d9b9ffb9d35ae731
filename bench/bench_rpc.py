"""Round trips per second on one multiplexed Connection: sequential, and with 100 / 1000 in flight.

Run from the repository root: ``python bench/bench_rpc.py [--seconds S] [--target NAME] [--no-uvloop]``.
Client and server share one process and one event loop (uvloop when installed), so the numbers are
the cost of both sides together. A target is an async context manager yielding a ``Target`` (node
address, method id, request factory); add one to ``TARGETS`` to measure another server, e.g. the
embedded broker.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchloop import pick_loop
from google.protobuf.message import Message

from gateway.embedded.server import CallContext, RpcServer
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.wire.pb.MasterService_pb2 import HeartRequestP2M, HeartResponseM2P

TIMEOUT = 10.0


@dataclass(frozen=True)
class Target:
    address: NodeAddress
    method: int
    make_request: Callable[[int], Message]


@asynccontextmanager
async def echo_target() -> AsyncIterator[Target]:
    """An RpcServer answering the producer heartbeat (method 2) with a fixed small response."""
    answer = HeartResponseM2P(success=True, errCode=200, errMsg="OK!", brokerCheckSum=-1)

    async def handler(method: int, request: Message, ctx: CallContext) -> Message:
        return answer

    request = HeartRequestP2M(clientId="bench-producer", brokerCheckSum=-1, hostName="127.0.0.1")
    async with RpcServer(handler) as server:
        yield Target(server.address, 2, lambda i: request)


@asynccontextmanager
async def broker_send_target() -> AsyncIterator[Target]:
    """An embedded broker (in memory) storing a 1 KiB message per round trip (SendMessage, method 13)."""
    from gateway.embedded.broker import EmbeddedBroker
    from gateway.embedded.topics import TopicSpec
    from gateway.tubemq.wire.pb.BrokerService_pb2 import SendMessageRequestP2B

    body = b"x" * 1024

    def make(i: int) -> Message:
        return SendMessageRequestP2B(
            clientId="bench-producer",
            topicName="bench",
            partitionId=i % 4,
            data=body,
            flag=0,
            checkSum=-1,
            sentAddr=2130706433,
        )

    async with EmbeddedBroker(1, [TopicSpec("bench", 4)]) as broker:
        yield Target(broker.address, 13, make)


TARGETS: dict[str, Callable[[], AbstractAsyncContextManager[Target]]] = {
    "echo": echo_target,
    "broker-send": broker_send_target,
}


async def round_trips(link: Connection, target: Target, in_flight: int, seconds: float) -> tuple[float, int]:
    """Keep ``in_flight`` requests outstanding for ``seconds``; return (round trips per second, count)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    done = 0

    async def worker(offset: int) -> None:
        nonlocal done
        i = offset
        while loop.time() < deadline:
            await link.request(target.method, target.make_request(i), TIMEOUT)
            done += 1
            i += in_flight

    start = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(in_flight)))
    elapsed = time.perf_counter() - start
    return done / elapsed, done


async def run(target_name: str, seconds: float) -> None:
    async with TARGETS[target_name]() as target:
        link = Connection(target.address)
        await link.connect(3.0)
        try:
            await round_trips(link, target, 10, 0.2)  # warm up
            print(f"{'in flight':<12}{'round trips/s':>16}{'requests':>12}")
            for in_flight in (1, 100, 1000):
                rate, count = await round_trips(link, target, in_flight, seconds)
                print(f"{in_flight:<12}{rate:>16,.0f}{count:>12,}")
        finally:
            await link.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per case (default 2)")
    parser.add_argument("--target", choices=sorted(TARGETS), default="echo")
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    args = parser.parse_args()
    loop_factory, loop_name = pick_loop(args.no_uvloop)
    print(f"target={args.target} loop={loop_name} python={sys.version.split()[0]}")
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args.target, args.seconds))


if __name__ == "__main__":
    main()
