"""Sends per second of 1 KiB messages through the producer core to embedded brokers (1 and 100 in flight).

Run from the repository root: ``python bench/bench_producer.py [--seconds S] [--brokers N] [--size B]
[--no-uvloop]``. Master, brokers and producer share one process and one event loop (uvloop when installed),
so the numbers are the cost of both sides together (CPU per send included: process time, so a busy
machine does not inflate it): payload encoding, partition choice, shielding
bookkeeping, the RPC round trip and the broker's append (in memory).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchloop import pick_loop

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig

TOPIC = "bench"


async def sends(producer: Producer, body: bytes, in_flight: int, seconds: float) -> tuple[float, int, float]:
    """Keep ``in_flight`` sends outstanding for ``seconds``; return (sends per second, count, CPU
    microseconds per send: this process's user + system time, so a busy machine does not inflate it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        while loop.time() < deadline:
            await producer.send(TOPIC, body, attributes={"bench": "1"})
            done += 1

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return done / elapsed, done, cpu / max(done, 1) * 1e6


async def run(seconds: float, broker_count: int, size: int) -> None:
    brokers = [EmbeddedBroker(i + 1, [TopicSpec(TOPIC, 4)]) for i in range(broker_count)]
    for broker in brokers:
        await broker.start()
    try:
        async with EmbeddedMaster(brokers) as master, ConnectionPool() as pool:
            producer = Producer([master.address], pool=pool, config=ProducerConfig())
            await producer.start()
            try:
                await producer.register_topic(TOPIC)
                body = b"x" * size
                await sends(producer, body, 10, 0.2)  # warm up: links open, code paths hot
                print(f"{'in flight':<12}{'sends/s':>12}{'sends':>10}{'MiB/s':>9}{'CPU us/send':>13}")
                for in_flight in (1, 100):
                    rate, count, cpu = await sends(producer, body, in_flight, seconds)
                    print(f"{in_flight:<12}{rate:>12,.0f}{count:>10,}{rate * size / 2**20:>9.1f}{cpu:>13.1f}")
            finally:
                await producer.close()
    finally:
        for broker in brokers:
            await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per case (default 2)")
    parser.add_argument("--brokers", type=int, default=1, help="embedded brokers (default 1)")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    args = parser.parse_args()
    loop_factory, loop_name = pick_loop(args.no_uvloop)
    print(f"brokers={args.brokers} size={args.size} loop={loop_name} python={sys.version.split()[0]}")
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args.seconds, args.brokers, args.size))


if __name__ == "__main__":
    main()
