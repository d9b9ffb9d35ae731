"""Batch reads and writes with ``format("tubemq")`` on a real local Spark against an embedded cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from gateway.embedded.topics import TopicSpec
from tests.support.spark_support import ClusterThread, serve_gateway, spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


TOPICS = [
    TopicSpec("events", 3, 2),
    TopicSpec("copy", 2),
    TopicSpec("empty", 2),
    TopicSpec("viagw", 2),
    TopicSpec("placed", 4),  # four partitions share each broker's one store
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterThread]:
    running = ClusterThread(TOPICS, brokers=2)
    yield running
    running.close()


def test_batch_read_returns_exactly_the_published_messages(spark: Any, cluster: ClusterThread) -> None:
    ids = cluster.publish("events", 0, 10_000)
    df = spark.read.format("tubemq").option("masters", cluster.masters).option("topic", "events").load()
    assert df.rdd.getNumPartitions() == 12  # 2 brokers x 2 stores x 3 partitions
    rows = df.collect()
    assert len(rows) == 10_000
    assert sorted(r.message_id for r in rows) == sorted(ids)
    by_value = {r.value: r for r in rows}
    assert set(by_value) == {f"msg-{n}".encode() for n in range(10_000)}
    row = by_value[b"msg-42"]
    assert row.topic == "events"
    assert row.attributes == {"n": "42", "even": "true"}
    assert row.stream_id == "s0"
    assert row.msg_time == datetime(2024, 1, 31, 15, 30)
    assert row.append_time is None
    assert row.partition.split(":")[1] == "events"
    # Per partition the rows come in offset order, and known offsets are distinct multiples of 28.
    offsets = [r.offset for r in rows if r.offset is not None]
    assert all(o % 28 == 0 for o in offsets)

    # Planned offsets are fixed: messages published after planning stay out of an explicit range.
    ending = {key: 0 for key in {r.partition for r in rows}}
    first_key = sorted(ending)[0]
    ending[first_key] = -1
    part = (
        spark.read.format("tubemq")
        .option("masters", cluster.masters)
        .option("topic", "events")
        .option("endingOffsets", json.dumps(ending))
        .load()
    )
    assert {r.partition for r in part.collect()} == {first_key}
    empty = (
        spark.read.format("tubemq")
        .option("masters", cluster.masters)
        .option("topic", "events")
        .option("startingOffsets", "latest")
        .load()
    )
    assert empty.count() == 0


def test_a_written_dataframe_reads_back_identical(spark: Any, cluster: ClusterThread) -> None:
    from pyspark.sql import functions as F

    source = spark.range(0, 2000).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 2 == 0, F.lit("k-even")).otherwise(F.lit("k-odd")).alias("key"),
        F.create_map(F.lit("id"), F.col("id").cast("string")).alias("attributes"),
        F.concat(F.lit("stream"), (F.col("id") % 4).cast("string")).alias("stream_id"),
        F.lit(datetime(2024, 5, 6, 7, 8)).alias("msg_time"),
    )
    source.write.format("tubemq").option("masters", cluster.masters).option("topic", "copy").mode(
        "append"
    ).save()
    back = spark.read.format("tubemq").option("masters", cluster.masters).option("topic", "copy").load()
    got = sorted(
        (r.value, r.key, r.attributes["id"], r.stream_id, r.msg_time)
        for r in back.select("value", "key", "attributes", "stream_id", "msg_time").collect()
    )
    want = sorted(
        (r.value, r.key, r.attributes["id"], r.stream_id, r.msg_time)
        for r in source.select("value", "key", "attributes", "stream_id", "msg_time").collect()
    )
    assert got == want
    # A key pins every message with that key to one partition.
    keyed = {(int(r.attributes["id"]) % 2, r.partition) for r in back.collect()}
    assert len({p for parity, p in keyed if parity == 0}) == 1
    assert len({p for parity, p in keyed if parity == 1}) == 1


def test_bad_options_and_rows_fail_clearly(spark: Any, cluster: ClusterThread) -> None:
    with pytest.raises(Exception, match="topic"):
        spark.read.format("tubemq").option("masters", cluster.masters).load().collect()
    with pytest.raises(Exception, match="value"):
        spark.range(3).write.format("tubemq").option("masters", cluster.masters).option("topic", "copy").mode(
            "append"
        ).save()
    # an integer value would be that many zero bytes: refused before any task runs, like Kafka's sink
    for number in (spark.range(3).toDF("value"), spark.createDataFrame([(0,)], "value int")):
        with pytest.raises(Exception, match=r"'value' column must be string or binary, not (bigint|int)"):
            number.write.format("tubemq").option("masters", cluster.masters).option("topic", "copy").mode(
                "append"
            ).save()
    assert (
        spark.read.format("tubemq").option("masters", cluster.masters).option("topic", "empty").load().count()
        == 0
    )


def test_reads_and_writes_through_a_gateway(spark: Any, cluster: ClusterThread) -> None:
    url, stop = serve_gateway(cluster)
    try:
        rows = [(f"via-gw-{i}", {"i": str(i)}) for i in range(300)]
        frame = spark.createDataFrame(rows, "value string, attributes map<string,string>")
        frame.write.format("tubemq").option("gateway", url).option("topic", "viagw").mode("append").save()
        back = spark.read.format("tubemq").option("gateway", url).option("topic", "viagw").load().collect()
        assert sorted((r.value.decode(), r.attributes["i"]) for r in back) == sorted(
            (v, a["i"]) for v, a in rows
        )
        direct = (
            spark.read.format("tubemq").option("masters", cluster.masters).option("topic", "viagw").load()
        )
        assert sorted(r.message_id for r in direct.collect()) == sorted(r.message_id for r in back)
    finally:
        stop()


def test_offsets_are_exact_where_the_broker_answer_places_them(spark: Any, cluster: ClusterThread) -> None:
    from gateway.spark.backend import plan
    from gateway.spark.options import SourceOptions

    def send(keys: list[str], tag: str) -> dict[bytes, int]:
        """Send one message per key; each value -> its index offset from the broker's answer."""

        async def go() -> dict[bytes, int]:
            assert cluster.producer is not None
            await cluster.producer.register_topic("placed")
            sent: dict[bytes, int] = {}
            for n, key in enumerate(keys):
                body = f"{tag}-{n}".encode()
                sent[body] = (await cluster.producer.send("placed", body, partition=key)).append_offset
            return sent

        return cluster.call(go())

    def ends() -> dict[str, int]:
        planned = plan(SourceOptions.parse({"masters": cluster.masters, "topic": "placed"}))
        return {key: p.bounds.max_offset for key, p in planned.items()}

    def read(starting: dict[str, int] | str, ending: dict[str, int] | str = "latest") -> list[Any]:
        frame = (
            spark.read.format("tubemq")
            .option("masters", cluster.masters)
            .option("topic", "placed")
            .option("startingOffsets", starting if isinstance(starting, str) else json.dumps(starting))
            .option("endingOffsets", ending if isinstance(ending, str) else json.dumps(ending))
            .load()
        )
        return list(frame.collect())

    keys = [f"1:placed:{n}" for n in range(4)]
    truth = send([keys[n % 4] for n in range(40)], "spread")
    solo_start = ends()
    truth |= send([keys[2]] * 30, "solo")
    solo_end = ends()
    truth |= send([keys[n % 4] for n in range(20)], "after")

    # Every partition's read spans entries of its siblings: the answer places none of its messages.
    rows = read("earliest")
    assert sorted(r.value for r in rows) == sorted(truth)
    assert [r.offset for r in rows] == [None] * len(rows)

    # From where partition 2 alone was written to where that stopped: its messages fill the span, so each is
    # at its exact offset, although its broker batch reaches on into siblings' entries (a probe cuts it).
    solo = read(solo_start, solo_end)
    assert sorted(r.value for r in solo) == sorted(v for v in truth if v.startswith(b"solo-"))
    assert {r.partition for r in solo} == {keys[2]}
    assert [r.offset for r in solo] == [truth[r.value] for r in solo]
    # On to the end: the batch holds 35 of partition 2's messages among 50 entries, and nothing says which.
    later = read(solo_start)
    assert sorted(r.value for r in later) == sorted(v for v in truth if not v.startswith(b"spread-"))
    assert [r.offset for r in later] == [None] * 50
