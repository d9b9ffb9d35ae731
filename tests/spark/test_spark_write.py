"""Writes of ``format("tubemq")`` in batches, on a real local Spark against an embedded cluster: many small
batches arrive whole with their keys' partitions, and a failing batch fails the task as docs/spark.md says
(the batches before it stored, the ones after it not sent)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.embedded.broker import MAX_MSG_SIZE_SLACK
from gateway.embedded.topics import TopicSpec
from tests.support.spark_support import ClusterThread, read_tubemq, serve_gateway, spark_session

pytestmark = pytest.mark.spark

MAX_MSG_SIZE = 4096
TOO_LARGE = MAX_MSG_SIZE + MAX_MSG_SIZE_SLACK + 1
"""Above what the brokers take (the producer's own check allows up to 1 MiB, as the Java client's does)."""


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterThread]:
    topics = [TopicSpec("small", 3), TopicSpec("bad", 2), TopicSpec("large", 2), TopicSpec("rest", 2)]
    running = ClusterThread(topics, brokers=2, max_msg_size=MAX_MSG_SIZE)
    yield running
    running.close()


def write(frame: Any, **options: str) -> None:
    writer = frame.write.format("tubemq").mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_small_batches_carry_every_row_and_key(spark: Any, cluster: ClusterThread) -> None:
    from pyspark.sql import functions as F

    frame = spark.range(0, 3000, numPartitions=2).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("value"),
        (F.col("id") % 5).cast("string").alias("key"),
        F.create_map(F.lit("id"), F.col("id").cast("string")).alias("attributes"),
    )
    # 37 rows or 700 bytes (about 25 rows of these), whichever comes first: ~120 batches per task.
    write(frame, masters=cluster.masters, topic="small", writeBatchRows="37", writeBatchBytes="700")
    back = read_tubemq(spark, cluster.masters, topic="small").collect()
    assert sorted((r.value.decode(), r.key, r.attributes["id"]) for r in back) == sorted(
        (f"row-{n}", str(n % 5), str(n)) for n in range(3000)
    )
    partitions: dict[str, set[str]] = {}
    for r in back:
        partitions.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in partitions.values())  # a key pins its messages to one partition


def _numbered(spark: Any, count: int, bad: int, value: str) -> Any:
    """One partition of rows ``n`` with value ``v-n``, the row ``bad`` with ``value`` instead."""
    rows = [(value if n == bad else f"v-{n}", {"n": str(n)}) for n in range(count)]
    return spark.createDataFrame(rows, "value string, attributes map<string,string>").coalesce(1)


def _stored(spark: Any, cluster: ClusterThread, topic: str) -> list[int]:
    return sorted(int(r.attributes["n"]) for r in read_tubemq(spark, cluster.masters, topic=topic).collect())


def test_a_row_breaking_a_publish_rule_fails_its_batch_and_the_task(
    spark: Any, cluster: ClusterThread
) -> None:
    frame = _numbered(spark, 100, 25, "v-25")
    frame = frame.selectExpr(
        "value", "if(attributes['n'] = '25', map('n', '25', 'bad,name', 'x'), attributes) as attributes"
    )
    with pytest.raises(
        Exception, match=r"WriteFailed: 1 of 10 messages to 'bad' failed; first: InvalidMessage"
    ):
        write(frame, masters=cluster.masters, topic="bad", writeBatchRows="10")
    # Batches 0-19 and 20-29 (but the bad row) were sent; the task stopped there: 30.. were never sent.
    assert _stored(spark, cluster, "bad") == [n for n in range(30) if n != 25]


def test_a_message_the_broker_refuses_fails_its_batch_and_the_task(
    spark: Any, cluster: ClusterThread
) -> None:
    frame = _numbered(spark, 100, 44, "x" * TOO_LARGE)
    with pytest.raises(
        Exception,
        match=r"WriteFailed: 1 of 20 messages to 'large' failed; first: \w+\(.*data length over max length",
    ):
        write(frame, masters=cluster.masters, topic="large", writeBatchRows="20")
    # The rest of its batch was sent and acknowledged; the batches after it were not sent.
    assert _stored(spark, cluster, "large") == [n for n in range(60) if n != 44]


def test_the_rest_sink_takes_the_same_bound(spark: Any, cluster: ClusterThread) -> None:
    url, stop = serve_gateway(cluster)
    try:
        frame = _numbered(spark, 250, -1, "")
        write(frame, gateway=url, topic="rest", writeBatchRows="40", writeBatchBytes="200")
        assert _stored(spark, cluster, "rest") == list(range(250))
        bad = _numbered(spark, 50, 7, "x" * TOO_LARGE)
        with pytest.raises(Exception, match=r"WriteFailed: gateway stored not every message"):
            write(bad, gateway=url, topic="rest", writeBatchRows="40")
    finally:
        stop()
