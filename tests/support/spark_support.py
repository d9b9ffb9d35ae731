"""Shared pieces of the Spark tests: an embedded cluster on a background loop, a local Spark, a producer.

Spark calls block, so the cluster cannot live on the test's own event loop: it runs on a daemon thread
with its own loop, and the test talks to it with :meth:`ClusterThread.call`. Spark's Python workers are
separate processes; they reach the cluster over loopback like any client would.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from tests.support.files import ROOT
from tests.support.serving import free_port

T = TypeVar("T")


class ClusterThread:
    """An :class:`EmbeddedCluster` plus a producer, on a private loop thread; ``cluster_options`` go to the
    cluster (e.g. ``retention``)."""

    def __init__(self, topics: Sequence[TopicSpec], brokers: int = 2, **cluster_options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.cluster = EmbeddedCluster(list(topics), brokers=brokers, **cluster_options)
        self.pool: ConnectionPool | None = None
        self.producer: Producer | None = None
        self.call(self._start())

    async def _start(self) -> None:
        await self.cluster.start()
        self.pool = ConnectionPool()
        self.producer = Producer(
            self.cluster.master_addresses, pool=self.pool, config=ProducerConfig(heartbeat_interval=0.3)
        )
        await self.producer.start()

    @property
    def masters(self) -> str:
        return ",".join(str(a) for a in self.cluster.master_addresses)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def publish(self, topic: str, start: int, count: int, concurrency: int = 200) -> list[int]:
        """Send messages ``start .. start+count-1`` (value ``msg-<n>``, attributes ``n``, ``even``, stream id
        ``s<n % 3>``); returns their message ids."""

        async def send_all() -> list[int]:
            assert self.producer is not None
            await self.producer.register_topic(topic)
            ids: list[int] = []
            for first in range(start, start + count, concurrency):
                batch = range(first, min(first + concurrency, start + count))
                results = await asyncio.gather(
                    *(
                        self.producer.send(
                            topic,
                            f"msg-{n}".encode(),
                            attributes={"n": str(n), "even": str(n % 2 == 0).lower()},
                            stream_id=f"s{n % 3}",
                            msg_time="202401311530",
                        )
                        for n in batch
                    )
                )
                ids.extend(r.message_id for r in results)
            return ids

        return self.call(send_all())

    def close(self) -> None:
        async def stop() -> None:
            if self.producer is not None:
                await self.producer.close()
            if self.pool is not None:
                await self.pool.close()
            await self.cluster.stop()

        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


_SPARK: Any = None


def spark_session() -> Any:
    """One local Spark for the whole test run (``local[2]``, two shuffle partitions, no UI)."""
    global _SPARK
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if _SPARK is None:
        from pyspark.sql import SparkSession

        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        root = str(ROOT)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        _SPARK = (
            SparkSession.builder.master("local[2]")
            .appName("tubemq-gateway-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .getOrCreate()
        )
        _SPARK.sparkContext.setLogLevel("ERROR")
        from gateway.spark import register

        register(_SPARK)
    return _SPARK


def read_tubemq(spark: Any, masters: str, **options: str) -> Any:
    """A batch DataFrame of ``format("tubemq")`` over ``masters`` with ``options`` (e.g. ``topic``)."""
    reader = spark.read.format("tubemq").option("masters", masters)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_available_now(
    spark: Any, masters: str, topic: str, out: Any, checkpoint: Any, **options: str
) -> list[dict[str, Any]]:
    """Stream ``topic`` (``startingOffsets`` earliest unless ``options`` say otherwise) into Parquet files at
    ``out`` with ``trigger(availableNow=True)`` until the query stops by itself; returns its progress."""
    reader = spark.readStream.format("tubemq").option("masters", masters).option("topic", topic)
    for name, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .select("partition", "message_id", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300), "an availableNow query must stop by itself"
    finally:
        query.stop()
    return list(query.recentProgress)


def forget_last_commit(checkpoint: Any) -> None:
    """Make ``checkpoint`` look as after a crash before its last micro-batch was committed."""
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)


def serve_gateway(cluster: ClusterThread) -> tuple[str, Any]:
    """Start a real gateway (uvicorn on a free loopback port) over ``cluster`` on its loop; returns its URL
    and a stopper to call."""

    import uvicorn

    from gateway.api.app import create_app
    from gateway.config import Settings
    from gateway.runtime import Runtime

    port = free_port()
    runtime = Runtime(Settings(masters=cluster.masters, producer={"heartbeat_interval": 0.5}))
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(runtime=runtime), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )

    async def start() -> Any:
        await runtime.start()
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn only exposes a flag
            await asyncio.sleep(0.05)
        return task

    task = cluster.call(start())

    async def stop() -> None:
        server.should_exit = True
        await task
        await runtime.stop()

    return f"http://127.0.0.1:{port}", lambda: cluster.call(stop())
