"""Rows per second of the ``tubemq`` Spark source (batch write and read, an availableNow stream with a
trigger cap) next to the client core's own rates.

Run from the repository root (needs ``pip install .[spark]`` and a JDK): ``python bench/bench_spark.py
[--messages N] [--size B] [--partitions P]``. An embedded cluster (2 brokers) runs on a background loop in
this process; Spark runs ``local[2]``, so its Python workers are separate processes talking to the brokers
over loopback. Core rates: one ``Producer`` with 1000 sends in flight, and one ``RangeReader`` reading every
partition concurrently, both in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.spark.core import plan_topic
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class Background:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


async def core_send(masters: list[Any], topic: str, count: int, body: bytes) -> float:
    async with ConnectionPool() as pool:
        producer = Producer(masters, pool=pool)
        await producer.start()
        await producer.register_topic(topic)
        started = time.perf_counter()
        for first in range(0, count, 1000):
            await asyncio.gather(*(producer.send(topic, body) for _ in range(min(1000, count - first))))
        elapsed = time.perf_counter() - started
        await producer.close()
    return count / elapsed


async def core_read(masters: str, topic: str) -> tuple[float, int]:
    from gateway.spark.core import SparkCore

    core = SparkCore()
    try:
        planned = await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(plan_topic(core, masters, topic, "bench_core"), core.loop)
        )

        async def read_all() -> int:
            reader = core.reader("bench_core")

            async def one(p: Any) -> int:
                return sum([len(b.messages) async for b in reader.read(p.partition, 0, p.bounds.max_offset)])

            return sum(await asyncio.gather(*(one(p) for p in planned.values())))

        started = time.perf_counter()
        count = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(read_all(), core.loop))
        return count / (time.perf_counter() - started), count
    finally:
        core.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per broker (one store)")
    args = parser.parse_args()

    bg = Background()
    cluster = EmbeddedCluster(
        [TopicSpec("core", args.partitions), TopicSpec("sparked", args.partitions)], brokers=2
    )
    bg.run(cluster.start())
    masters = ",".join(str(a) for a in cluster.master_addresses)
    body = b"x" * args.size

    send_rate = bg.run(core_send(cluster.master_addresses, "core", args.messages, body))
    read_rate, read_count = asyncio.run(core_read(masters, "core"))
    assert read_count == args.messages, (read_count, args.messages)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from gateway.spark import register

    register(spark)
    frame = spark.range(0, args.messages, numPartitions=2).select(
        F.expr(f"repeat('x', {args.size})").cast("binary").alias("value")
    )
    frame.cache().count()
    started = time.perf_counter()
    frame.write.format("tubemq").option("masters", masters).option("topic", "sparked").mode("append").save()
    write_rate = args.messages / (time.perf_counter() - started)

    reader = spark.read.format("tubemq").option("masters", masters).option("topic", "sparked")
    read_rates = []
    for _ in range(2):  # the first read also starts the Python workers; the second runs on warm ones
        started = time.perf_counter()
        total = reader.load().select(F.sum(F.length("value"))).collect()[0][0]
        read_rates.append(args.messages / (time.perf_counter() - started))
        assert total == args.messages * args.size, total

    cap = max(1, args.messages // 10)
    stream = (
        spark.readStream.format("tubemq")
        .option("masters", masters)
        .option("topic", "sparked")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(cap))
        .load()
    )
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (
            stream.select("value")
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        stream_rate = args.messages / (time.perf_counter() - started)
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == args.messages and all(n == cap for n in batches[:-1]), batches

    print(f"messages={args.messages} value={args.size} B partitions={2 * args.partitions} (2 brokers)")
    print(f"core   send  (Producer, 1000 in flight)      {send_rate:12,.0f} msg/s")
    print(f"core   read  (RangeReader, all partitions)   {read_rate:12,.0f} msg/s")
    print(f"spark  write (format tubemq, local[2])       {write_rate:12,.0f} rows/s")
    print(f"spark  read  (format tubemq, local[2], cold) {read_rates[0]:12,.0f} rows/s")
    print(f"spark  read  (format tubemq, local[2], warm) {read_rates[1]:12,.0f} rows/s")
    print(
        f"spark  stream (availableNow, cap {cap}, noop)  {stream_rate:12,.0f} rows/s "
        f"in {len(batches)} micro-batches (each exactly the cap but the last)"
    )
    spark.stop()
    bg.run(cluster.stop())


if __name__ == "__main__":
    main()
