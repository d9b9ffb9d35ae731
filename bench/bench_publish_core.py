"""CPU per message of batched publish through the service layer and the client core (no HTTP).

Run from the repository root against a running TubeMQ master on loopback (e.g. the real-TubeMQ harness)::

    python bench/bench_publish_core.py --master 127.0.0.1:8715 --topic demo

``--callers`` tasks each publish ``--batch``-message batches of ``--size``-byte values through
``PublishService.publish`` for ``--seconds``; the report gives messages per second and this process's CPU
(user + system) per message, the figure the gateway's batched REST/gRPC paths pay below the adapters.
Without ``--master`` an embedded cluster runs in a child process, so its CPU is not counted. Several
``--rounds`` print each round and the median. Benchmarks print numbers; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchloop import pick_loop

from gateway.service.publish import OutgoingMessage, PublishService
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig

_EMBEDDED = """
import asyncio, sys
from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.topics import TopicSpec

async def main() -> None:
    broker = EmbeddedBroker(1, [TopicSpec(sys.argv[1], 3)])
    await broker.start()
    async with EmbeddedMaster([broker]) as master:
        print(master.address.port, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def one_round(
    service: PublishService, topic: str, batch: list[OutgoingMessage], args: argparse.Namespace
) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.seconds
    sent = failed = 0

    async def caller() -> None:
        nonlocal sent, failed
        while loop.time() < deadline:
            outcomes = await service.publish(topic, batch)
            for outcome in outcomes:
                if outcome.ok:
                    sent += 1
                else:
                    failed += 1

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(args.callers)))
    cpu, elapsed = time.process_time() - cpu0, time.perf_counter() - t0
    if failed:
        print(f"  ({failed} messages failed)")
    return sent / elapsed, cpu / max(sent, 1) * 1e6


async def run(args: argparse.Namespace, master: NodeAddress) -> None:
    async with ConnectionPool() as pool:
        producer = Producer([master], pool=pool, config=ProducerConfig())
        await producer.start()
        try:
            service = PublishService(producer, max_batch_messages=max(1000, args.batch))
            body = os.urandom(args.size // 2).hex().encode()[: args.size]
            batch = [OutgoingMessage(body, attributes={"bench": "1"}) for _ in range(args.batch)]
            await service.publish(args.topic, batch)  # warm up: route, links, code paths
            rates, cpus = [], []
            for i in range(args.rounds):
                rate, cpu = await one_round(service, args.topic, batch, args)
                rates.append(rate)
                cpus.append(cpu)
                print(f"round {i + 1}: {rate:>10,.0f} msg/s {cpu:>8.1f} CPU us/msg", flush=True)
            print(
                f"median: {statistics.median(rates):>10,.0f} msg/s "
                f"{statistics.median(cpus):>8.1f} CPU us/msg "
                f"(batch {args.batch}, {args.callers} callers, {args.size} B)"
            )
        finally:
            await producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", help="host:port of a loopback TubeMQ master (default: embedded child)")
    parser.add_argument("--topic", default="demo")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    run_against(parser, args, run)


def run_against(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace, NodeAddress], Coroutine[Any, Any, None]],
) -> None:
    """``run(args, master)`` on the chosen loop, ``master`` being ``--master`` (loopback only) or an embedded
    cluster's in a child process (so its CPU is not counted) serving ``--topic``."""
    child = None
    if args.master:
        host, _, port = args.master.rpartition(":")
        if host not in ("127.0.0.1", "::1", "[::1]", "localhost"):
            parser.error("--master must be a loopback address")
        master = NodeAddress("127.0.0.1" if host == "localhost" else host.strip("[]"), int(port))
    else:
        child = subprocess.Popen(
            [sys.executable, "-c", _EMBEDDED, args.topic], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        master = NodeAddress("127.0.0.1", int(child.stdout.readline()))
    factory, name = pick_loop(args.no_uvloop)
    print(f"loop: {name}")
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run(args, master))
    finally:
        if child is not None:
            child.terminate()


if __name__ == "__main__":
    main()
