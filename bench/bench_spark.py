"""Rows per second and CPU per row of the ``tubemq`` Spark source (the direct sink, the REST sink through a
gateway, batch read, an availableNow stream with a trigger cap) next to the client core's own rates and,
given ``--tubebench``, the native Java producer's in the same run.

Run from the repository root (needs ``pip install .[spark]`` and a JDK)::

    python bench/bench_spark.py [--messages N] [--size B] [--partitions P] [--rounds R]
        [--gateway-root DIR] [--write-option NAME=VALUE ...]
    flock -o /tmp/tubemq-real.lock python bench/bench_spark.py --master 127.0.0.1:8715 --topic demo \\
        --tubebench /tmp/tubemq-real/tubebench.sh        # writes only, against a real TubeMQ

By default an embedded cluster (2 brokers) runs on a background loop in this process; with ``--master`` the
writes go to that cluster's ``--topic`` instead and the read cases are skipped (its backlog is not ours), as
with ``--writes-only``. Spark runs ``local[2]``, so its Python workers are separate processes talking to
the brokers over loopback; the REST sink's gateway is a ``python -m gateway serve`` process. Core rates:
one ``Producer`` with 1000 sends in flight (and 1000-message ``send_batch`` calls), one ``RangeReader``
reading every partition, both in this process. The direct sink alone: its ``write_rows`` called in this
process without Spark (its CPU is the calling thread's and the sink core's loop thread's). ``--gateway-root``
runs another tree's ``gateway`` package (driver, Spark's workers, the gateway), e.g. a ``git worktree add
/tmp/before main`` export, to compare before and after in the same minutes.

CPU per row is user + system time from ``/proc`` (so a busy machine does not inflate it as it does a
rate), split by process: Spark's Python workers (the sink itself), Spark's JVM, the gateway (REST sink) and
this process (the embedded brokers and the driver). Each write case runs ``--rounds`` times; the best rate
and the least CPU are shown.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # its helpers, still found after the chdir below
T = TypeVar("T")

from proc_cpu import CLK_TCK, process_tree  # noqa: E402


class Background:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


def _ticks(pid: int) -> tuple[str, int]:
    """The process's command name and user + system clock ticks, its own and its reaped children's (Spark's
    daemon forks a worker per task and reaps it when the task ends: its CPU then shows in the daemon's
    children's time, and each process is counted once); empty name when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "", 0
    fields = stat[stat.rindex(")") + 2 :].split()
    return stat[stat.index("(") + 1 : stat.rindex(")")], sum(int(f) for f in fields[11:15])


def cpu_by_role(gateway_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of Spark's Python workers, its JVM, the gateway and this process."""
    me = os.getpid()
    gateway = set(process_tree(gateway_pid)) if gateway_pid else set()
    roles = dict.fromkeys(("workers", "jvm", "gateway", "this"), 0.0)
    for pid in process_tree(me):
        name, ticks = _ticks(pid)
        role = (
            "this" if pid == me else "gateway" if pid in gateway else "jvm" if name == "java" else "workers"
        )
        roles[role] += ticks / CLK_TCK
    return roles


async def core_send(masters: list[Any], topic: str, count: int, body: bytes, batched: bool) -> float:
    from gateway.tubemq.net.pool import ConnectionPool
    from gateway.tubemq.producer.client import Producer

    async with ConnectionPool() as pool:
        producer = Producer(masters, pool=pool)
        await producer.start()
        await producer.register_topic(topic)
        started = time.perf_counter()
        for first in range(0, count, 1000):
            n = min(1000, count - first)
            if batched:
                results = await producer.send_batch(topic, [(body, None, None, None)] * n)
                assert not any(isinstance(r, Exception) for r in results)
            else:
                await asyncio.gather(*(producer.send(topic, body) for _ in range(n)))
        elapsed = time.perf_counter() - started
        await producer.close()
    return count / elapsed


async def core_read(masters: str, topic: str) -> tuple[float, int]:
    from gateway.spark.core import SparkCore, plan_topic

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


def sink_alone(
    masters: str, topic: str, count: int, body: bytes, extra: dict[str, str]
) -> tuple[float, float]:
    """The direct sink's ``write_rows`` called in this process (no Spark): rows/s and CPU µs per row of the
    calling thread and the sink core's loop thread (the brokers' threads are not counted)."""
    from gateway.spark import backend
    from gateway.spark.core import get_core
    from gateway.spark.options import SourceOptions

    options = SourceOptions.parse({"masters": masters, "topic": topic, **extra})
    rows = [(body,)] * count
    backend.write_rows(options, ["value"], rows[:1000])  # the core, its producer and links
    loop_thread = get_core(options.timeout, options.tubemq)._thread.native_id

    def cpu() -> float:
        stat = Path(f"/proc/self/task/{loop_thread}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return time.thread_time() + (int(fields[11]) + int(fields[12])) / CLK_TCK

    best_rate, least_cpu = 0.0, float("inf")
    for _ in range(3):
        used, started = cpu(), time.perf_counter()
        assert backend.write_rows(options, ["value"], iter(rows)) == count
        best_rate = max(best_rate, count / (time.perf_counter() - started))
        least_cpu = min(least_cpu, (cpu() - used) * 1e6 / count)
    return best_rate, least_cpu


def native_rate(tubebench: str, master: str, topic: str, seconds: int, size: int) -> str:
    """The Java client's async producer (1000 in flight) on the same cluster and topic."""
    cmd = [tubebench, "bench-async", master, topic, str(seconds), str(size), "1000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 180, check=False).stdout
    line = next((x for x in out.splitlines() if x.startswith("bench-") and "msg/s" in x), "")
    return line.strip() or f"(no rate in tubebench's output: {out[-300:]!r})"


def timed_write(
    run: Callable[[], None], rows: int, gateway_pid: int | None, rounds: int
) -> tuple[float, dict[str, float]]:
    """Best rows/s and least CPU µs per row by role over ``rounds`` runs of ``run``."""
    rates: list[float] = []
    cpu: dict[str, list[float]] = {}
    for _ in range(rounds):
        before = cpu_by_role(gateway_pid)
        started = time.perf_counter()
        run()
        rates.append(rows / (time.perf_counter() - started))
        after = cpu_by_role(gateway_pid)
        for role in after:
            cpu.setdefault(role, []).append((after[role] - before[role]) * 1e6 / rows)
    return max(rates), {role: min(values) for role, values in cpu.items()}


def _cpu_text(cpu: dict[str, float]) -> str:
    parts = [f"{role} {cpu[role]:5.1f}" for role in ("workers", "jvm", "gateway", "this") if cpu[role] > 0.05]
    return f"CPU µs/row: {' + '.join(parts)} = {sum(cpu.values()):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per broker (one store)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each write case")
    parser.add_argument("--gateway-root", type=Path, help="the tree whose gateway package runs")
    parser.add_argument(
        "--write-option", action="append", default=[], help="NAME=VALUE: a sink option for both writes"
    )
    parser.add_argument("--writes-only", action="store_true", help="skip the read and stream cases")
    parser.add_argument("--master", help="a TubeMQ master host:port to write to (default: embedded)")
    parser.add_argument("--topic", default="demo", help="with --master: the topic written")
    parser.add_argument("--tubebench", help="with --master: the Java client bench for the native rate")
    parser.add_argument("--seconds", type=int, default=20, help="the native producer's run")
    args = parser.parse_args()
    root = (args.gateway_root or ROOT).resolve()
    sys.path.insert(0, str(root))
    import gateway

    print(f"gateway package: {Path(gateway.__file__).parent}")

    bg = Background()
    cluster = None
    if args.master:
        masters, core_topic, spark_topic = args.master, args.topic, args.topic
        from gateway.tubemq.address import parse_address_list

        master_addresses = parse_address_list(masters, 8715)
    else:
        from gateway.embedded.cluster import EmbeddedCluster
        from gateway.embedded.topics import TopicSpec

        cluster = EmbeddedCluster(
            [TopicSpec("core", args.partitions), TopicSpec("sparked", args.partitions), TopicSpec("rest", 4)],
            brokers=2,
        )
        bg.run(cluster.start())
        masters = ",".join(str(a) for a in cluster.master_addresses)
        master_addresses = cluster.master_addresses
        core_topic, spark_topic = "core", "sparked"
    body = b"x" * args.size

    send_rate = bg.run(core_send(master_addresses, core_topic, args.messages, body, batched=False))
    batch_rate = bg.run(core_send(master_addresses, core_topic, args.messages, body, batched=True))
    extra = dict(item.split("=", 1) for item in args.write_option)
    alone = sink_alone(masters, core_topic, args.messages, body, extra)
    native = (
        native_rate(args.tubebench, args.master, args.topic, args.seconds, args.size)
        if args.tubebench and args.master
        else None
    )

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's Python workers start as ``python -m pyspark.daemon`` in the JVM's working directory, which puts
    # that directory first on their path: it must be ``root``, or they run the tree the bench started in.
    os.chdir(root)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
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

    def write(**options: str) -> Callable[[], None]:
        def run() -> None:
            writer = frame.write.format("tubemq").mode("append")
            for name, value in {**options, **extra}.items():
                writer = writer.option(name, value)
            writer.save()

        return run

    # A first small write starts the Python workers, so no case pays for that.
    spark.range(0, 10, numPartitions=2).selectExpr("cast(id as string) as value").write.format(
        "tubemq"
    ).option("masters", masters).option("topic", spark_topic).mode("append").save()
    direct = timed_write(write(masters=masters, topic=spark_topic), args.messages, None, args.rounds)
    from bench_vs_native import Gateway  # after the gateway package above: it runs from ``root`` too

    given = argparse.Namespace(log_level="error", gateway_env={}, gateway_arg=[], gateway_root=root)
    gw = Gateway(masters, given, None)
    try:
        rest_topic = spark_topic if args.master else "rest"
        rest = timed_write(write(gateway=gw.url, topic=rest_topic), args.messages, gw.proc.pid, args.rounds)
    finally:
        gw.stop()

    print(
        f"messages={args.messages} value={args.size} B "
        + (
            f"master={args.master} topic={args.topic}"
            if args.master
            else f"partitions={2 * args.partitions} (2 brokers, embedded)"
        )
    )
    if extra:
        print(f"write options: {extra}")
    print(f"core   send  (Producer.send, 1000 in flight)      {send_rate:12,.0f} msg/s")
    print(f"core   send  (Producer.send_batch of 1000)        {batch_rate:12,.0f} msg/s")
    rate, cpu = alone
    print(f"sink   write (direct sink alone, no Spark)        {rate:12,.0f} rows/s  CPU µs/row: {cpu:5.1f}")
    if native is not None:
        print(f"native send  (Java async producer, 1000 in flight): {native}")
    print(
        f"spark  write (direct sink, local[2])              {direct[0]:12,.0f} rows/s  {_cpu_text(direct[1])}"
    )
    print(f"spark  write (REST sink via a gateway, local[2])  {rest[0]:12,.0f} rows/s  {_cpu_text(rest[1])}")
    if cluster is None or args.writes_only:
        spark.stop()
        if cluster is not None:
            bg.run(cluster.stop())
        return

    read_rate, read_count = asyncio.run(core_read(masters, "core"))
    assert read_count == 5 * args.messages + 1000, read_count  # two core sends, the sink alone's
    written = args.messages * args.rounds + 10  # the warm-up's rows and every direct round's
    reader = spark.read.format("tubemq").option("masters", masters).option("topic", "sparked")
    read_rates = []
    for _ in range(2):  # the first read also warms the reading path; the second runs on warm workers
        started = time.perf_counter()
        total = reader.load().select(F.count("value")).collect()[0][0]
        read_rates.append(written / (time.perf_counter() - started))
        assert total == written, (total, written)

    cap = max(1, written // 10)
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
        stream_rate = written / (time.perf_counter() - started)
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == written and all(n == cap for n in batches[:-1]), batches

    print(f"core   read  (RangeReader, all partitions)        {read_rate:12,.0f} msg/s")
    print(
        f"spark  read  (format tubemq, local[2], first)     {read_rates[0]:12,.0f} rows/s  ({written:,} rows)"
    )
    print(f"spark  read  (format tubemq, local[2], again)     {read_rates[1]:12,.0f} rows/s")
    print(
        f"spark  stream (availableNow, cap {cap}, noop)  {stream_rate:12,.0f} rows/s "
        f"in {len(batches)} micro-batches (each exactly the cap but the last)"
    )
    spark.stop()
    bg.run(cluster.stop())


if __name__ == "__main__":
    main()
