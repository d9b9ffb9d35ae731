"""Consumer throughput: 1 KiB messages polled and confirmed through the client core from the embedded cluster.

Run from the repository root: ``python bench/bench_consumer.py [--messages N] [--size BYTES]
[--partitions P] [--pollers K] [--data-dir DIR] [--no-uvloop]``. A topic with P partitions is filled with N
messages first (sent over the pool, 64 in flight); then one consumer (EARLIEST) with K concurrent poll/confirm
loops reads them all back. Client and server share one process and one event loop, so the figure is the cost
of both sides together: messages/s and MB/s (10^6 bytes of message body) of the consume phase. With
``--data-dir`` the broker keeps file stores there, so the consume phase reads payloads back from disk.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import ConsumerConfig, StartPosition
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire.payload import encode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import Method

TOPIC = "bench"
SEND_IN_FLIGHT = 64


async def fill(pool: ConnectionPool, broker: EmbeddedBroker, count: int, size: int) -> float:
    """Send ``count`` messages of ``size`` bytes round-robin over the partitions; returns seconds taken."""
    pids = broker.topics[TOPIC].partition_ids()
    data, flag = encode_payload(b"x" * size, None, "bench", "202401311530")
    queue = iter(range(count))
    template = SendRequestTemplate("bench-producer", TOPIC, sent_addr=0, visit_token=-2)
    started = time.perf_counter()

    async def sender() -> None:
        for i in queue:
            request = template.encode(pids[i % len(pids)], data, flag, "bench", None)
            answer = await pool.request(broker.address, Method.SEND_MESSAGE, request, 10.0)
            assert isinstance(answer, broker_pb.SendMessageResponseB2P) and answer.errCode == 200

    await asyncio.gather(*(sender() for _ in range(SEND_IN_FLIGHT)))
    return time.perf_counter() - started


async def consume(consumer: Consumer, count: int, pollers: int) -> tuple[float, int, int]:
    """Poll and confirm until ``count`` messages arrived; returns (seconds, messages, body bytes)."""
    got = 0
    size = 0
    done = asyncio.Event()

    async def poller() -> None:
        nonlocal got, size
        while not done.is_set():
            batch = await consumer.poll(0.5)
            if batch is None:
                continue
            got += len(batch.messages)
            size += batch.body_bytes
            await consumer.confirm(batch.confirm_context)
            if got >= count:
                done.set()

    started = time.perf_counter()
    tasks = [asyncio.create_task(poller()) for _ in range(pollers)]
    await asyncio.wait_for(done.wait(), 600.0)
    elapsed = time.perf_counter() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return elapsed, got, size


async def main(messages: int, size: int, partitions: int, pollers: int, data_dir: Path | None) -> None:
    config = ConsumerConfig(start_position=StartPosition.EARLIEST, heartbeat_interval=1.0)
    cluster_run = EmbeddedCluster([TopicSpec(TOPIC, partitions)], balance_period=0.1, data_dir=data_dir)
    async with cluster_run as cluster:
        pool = ConnectionPool()
        try:
            fill_seconds = await fill(pool, cluster.broker(1), messages, size)
            print(
                f"filled {messages} x {size} B in {fill_seconds:.2f} s ({messages / fill_seconds:,.0f} msg/s)"
            )
            consumer = Consumer([cluster.master_address], "bench", {TOPIC: None}, pool=pool, config=config)
            async with consumer:
                if not await consumer.wait_for_assignment(10.0):
                    raise SystemExit("no partition assigned within 10 s")
                seconds, got, body_bytes = await consume(consumer, messages, pollers)
        finally:
            await pool.close()
    print(
        f"consumed {got} messages ({partitions} partitions, {pollers} pollers) in {seconds:.2f} s: "
        f"{got / seconds:,.0f} msg/s, {body_bytes / seconds / 1e6:,.1f} MB/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--pollers", type=int, default=4)
    parser.add_argument(
        "--data-dir", type=Path, help="file stores in this (empty) directory: payloads are read from disk"
    )
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    runner = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    runner(main(args.messages, args.size, args.partitions, args.pollers, args.data_dir))
