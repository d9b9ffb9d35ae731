"""Streaming on ``format("tubemq")``: micro-batches while messages arrive, stop, restart, exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.topics import TopicSpec
from gateway.spark.source import capped_offsets
from tests.support.spark_support import ClusterThread, spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterThread]:
    running = ClusterThread([TopicSpec("stream", 2), TopicSpec("sink_topic", 2)], brokers=2)
    yield running
    running.close()


def start_query(spark: Any, cluster: ClusterThread, out: Path, checkpoint: Path, cap: int) -> Any:
    stream = (
        spark.readStream.format("tubemq")
        .option("masters", cluster.masters)
        .option("topic", "stream")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(cap))
        .load()
    )
    return (
        stream.select("partition", "message_id", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def wait_for(condition: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.2)


def test_stream_survives_a_restart_with_every_message_exactly_once(
    spark: Any, cluster: ClusterThread, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    cluster.call(cluster.cluster.stop_broker(2))  # its partitions appear only after the restart
    ids = cluster.publish("stream", 0, 400)

    feeding = threading.Event()

    def feed() -> None:
        for first in range(400, 1400, 100):
            ids.extend(cluster.publish("stream", first, 100))
            time.sleep(0.3)
        feeding.set()

    query = start_query(spark, cluster, out, checkpoint, cap=250)
    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        wait_for(lambda: len([p for p in query.recentProgress if p["numInputRows"] > 0]) >= 3, 120)
    finally:
        feeder.join()
        query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3
    assert all(p["numInputRows"] <= 250 for p in batches)

    ids.extend(cluster.publish("stream", 1400, 200))
    cluster.call(cluster.cluster.start_broker(2))
    producer = cluster.producer
    assert producer is not None
    wait_for(lambda: (r := producer.topic_route("stream")) is not None and len(r.partitions) == 4, 30)
    ids.extend(cluster.publish("stream", 1600, 400))
    query = start_query(spark, cluster, out, checkpoint, cap=10_000)
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    rows = spark.read.parquet(str(out)).collect()
    got = sorted(r.message_id for r in rows)
    assert len(got) == len(set(got)), "a message was written twice"
    assert got == sorted(ids)
    assert {r.value for r in rows} == {f"msg-{n}".encode() for n in range(2000)}
    assert {r.partition.split(":")[0] for r in rows} == {"1", "2"}  # broker 2's partitions were picked up


def test_a_stream_written_to_tubemq_arrives_once(spark: Any, cluster: ClusterThread, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    source = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    query = (
        source.select(F.col("value").cast("string").alias("value"))
        .writeStream.format("tubemq")
        .option("masters", cluster.masters)
        .option("topic", "sink_topic")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 300, 120)
    finally:
        query.stop()
    sent = sum(p["numInputRows"] for p in query.recentProgress)
    back = spark.read.format("tubemq").option("masters", cluster.masters).option("topic", "sink_topic").load()
    values = sorted(int(r.value) for r in back.select("value").collect())
    # Stopping can cut a micro-batch some of whose messages were already stored (writes are at-least-once,
    # and that batch is not in the progress reports): every reported row arrived, once, plus maybe part of
    # that batch.
    assert len(values) == len(set(values))
    assert set(range(sent)) <= set(values)


def test_the_trigger_cap_is_shared_by_backlog_and_never_exceeded() -> None:
    start = {"a": 0, "b": 280, "c": 0}
    latest = {"a": 28 * 100, "b": 280 + 28 * 10, "c": 0}
    end = capped_offsets(start, latest, 22)
    entries = {k: (end[k] - start[k]) // 28 for k in end}
    assert sum(entries.values()) == 22
    assert entries == {"a": 20, "b": 2, "c": 0}
    assert capped_offsets(start, latest, None) == latest
    assert capped_offsets(start, latest, 1000) == latest
    one = capped_offsets({"a": 0, "b": 0}, {"a": 28, "b": 28}, 1)
    assert sorted(one.values()) == [0, 28]
