"""Consumer throughput: 1 KiB messages polled and confirmed through the client core from the embedded cluster.

Run from the repository root: ``python bench/bench_consumer.py [--messages N] [--size BYTES] [--partitions P]
[--pollers K] [--data-dir DIR] [--master HOST:PORT --topic T] [--no-uvloop] [--malloc-defaults]``. A topic
with P partitions is filled with N messages first (sent over the pool, 64 in flight); then one consumer
(EARLIEST) with K concurrent poll/confirm loops reads them all back. Client and server share one process and
one event loop, so the figure is the cost of both sides together: messages/s and MB/s (10^6 bytes of message
body) of the consume phase. With ``--data-dir`` the broker keeps file stores there, so the consume phase reads
payloads back from disk. The process sets malloc's thresholds as the server does
(``gateway/tubemq/net/allocator.py``) unless ``--malloc-defaults`` says not to.

With ``--master`` (a loopback address of a running TubeMQ, e.g. the real one of ``../shared/tubemq-real``)
nothing is embedded or filled: a consumer in a fresh group reads up to N messages of ``--topic`` (default
demo) from the earliest offset, each batch confirmed in the consumer alone as the gateway's auto-commit does
(``--commit-each``: a CommitOffset per batch), and the figure is the client core's alone, with its CPU per
message (this process's user and system time over the consume phase): the floor below the gateway's service
layer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import ConsumerConfig, StartPosition
from gateway.tubemq.net.allocator import retain_freed_memory
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


async def consume(
    consumer: Consumer, count: int, pollers: int, dry_after: float | None = None, local: bool = False
) -> tuple[float, int, int, int, os.times_result]:
    """Poll and confirm until ``count`` messages arrived (or, with ``dry_after``, none for that many seconds
    after the first: the topic ran dry), each batch confirmed with a CommitOffset or, with ``local``, in
    the consumer alone (the next fetch carries the commit, as the gateway's auto-commit does); returns
    (seconds from the start to the last message, messages, body bytes, batches, this process's CPU times
    at the last message)."""
    got = 0
    size = 0
    batches = 0
    done = asyncio.Event()
    last = time.perf_counter()
    cpu = os.times()

    async def poller() -> None:
        nonlocal got, size, batches, last, cpu
        while not done.is_set():
            batch = await consumer.poll(0.5)
            if batch is None:
                if dry_after is not None and got and time.perf_counter() - last > dry_after:
                    done.set()
                continue
            got += len(batch.messages)
            batches += 1
            size += batch.body_bytes
            if local:
                consumer.confirm_local(batch.confirm_context)
            else:
                await consumer.confirm(batch.confirm_context)
            last, cpu = time.perf_counter(), os.times()
            if got >= count:
                done.set()

    started = time.perf_counter()
    tasks = [asyncio.create_task(poller()) for _ in range(pollers)]
    await asyncio.wait_for(done.wait(), 600.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return last - started, got, size, batches, cpu


async def main_real(master: str, topic: str, messages: int, pollers: int, local: bool) -> None:
    """Consume ``messages`` of ``topic`` from the TubeMQ at ``master`` with the core alone (module doc)."""
    host = master.rpartition(":")[0]
    if host not in ("127.0.0.1", "[::1]", "localhost"):
        raise SystemExit(f"--master must be a loopback address, got {master}")
    config = ConsumerConfig(start_position=StartPosition.EARLIEST, heartbeat_interval=1.0)
    group = f"bench-core-{os.getpid()}-{time.time_ns()}"
    pool = ConnectionPool()
    try:
        consumer = Consumer([NodeAddress.parse(master)], group, {topic: None}, pool=pool, config=config)
        async with consumer:
            if not await consumer.wait_for_assignment(30.0):
                raise SystemExit("no partition assigned within 30 s")
            before = os.times()
            seconds, got, body_bytes, batches, after = await consume(
                consumer, messages, pollers, dry_after=2.0, local=local
            )
    finally:
        await pool.close()
    user, system = after.user - before.user, after.system - before.system
    per = 1e6 / max(got, 1)
    cpu = f"CPU {(user + system) * per:.2f} us/msg (user {user * per:.2f}, system {system * per:.2f})"
    print(
        f"consumed {got} messages of {topic} ({pollers} pollers, {got / max(batches, 1):.0f} a batch) in "
        f"{seconds:.2f} s: {got / seconds:,.0f} msg/s, {body_bytes / seconds / 1e6:,.1f} MB/s; {cpu}"
    )


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
                seconds, got, body_bytes, _, _ = await consume(consumer, messages, pollers)
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
    parser.add_argument(
        "--master", help="HOST:PORT of a running TubeMQ master on loopback (module docstring)"
    )
    parser.add_argument("--topic", default="demo", help="with --master: the topic to consume (default demo)")
    parser.add_argument(
        "--commit-each",
        action="store_true",
        help="with --master: a CommitOffset per batch (default: confirmed locally, as auto-commit does)",
    )
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument(
        "--malloc-defaults",
        action="store_true",
        help="leave glibc's malloc thresholds as they are (the server sets them: net/allocator.py)",
    )
    args = parser.parse_args()
    if not args.malloc_defaults:
        retain_freed_memory()
    runner = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    if args.master:
        runner(main_real(args.master, args.topic, args.messages, args.pollers, not args.commit_each))
    else:
        runner(main(args.messages, args.size, args.partitions, args.pollers, args.data_dir))
