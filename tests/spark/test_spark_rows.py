"""Rows, options and writes of ``format("tubemq")`` as Spark's Kafka source has them: a topic with no
partitions yet, unknown and misplaced options, save modes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.topics import TopicSpec
from tests.support.spark_support import ClusterThread, read_tubemq, spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


TOPICS = [
    TopicSpec("rows", 2, 2),
    TopicSpec("hidden", 2, accept_subscribe=False),
    TopicSpec("target", 2),
    TopicSpec("kinds", 3),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterThread]:
    running = ClusterThread(TOPICS, brokers=1)
    yield running
    running.close()


def test_a_topic_with_no_subscribable_partition_reads_as_no_rows(spark: Any, cluster: ClusterThread) -> None:
    frame = read_tubemq(spark, cluster.masters, topic="hidden")
    assert frame.collect() == []  # was a bare AssertionError from Spark's placeholder partition
    with pytest.raises(Exception, match="nosuch"):
        read_tubemq(spark, cluster.masters, topic="nosuch").collect()


def test_unknown_and_misplaced_options_are_refused(
    spark: Any, cluster: ClusterThread, tmp_path: Path
) -> None:
    with pytest.raises(
        Exception, match=r"(?s)unknown option 'maxrecordspertrigger'.*known options are: masters"
    ):
        read_tubemq(spark, cluster.masters, topic="rows", maxRecordsPerTrigger="5").collect()
    key = f"{cluster.cluster.brokers[0].broker_id}:rows:0"
    with pytest.raises(Exception, match=r"(?s)offset 30 of .* is not an index offset"):
        read_tubemq(spark, cluster.masters, topic="rows", startingOffsets=json.dumps({key: 30})).collect()

    def stream(**options: str) -> Any:
        reader = spark.readStream.format("tubemq").option("masters", cluster.masters).option("topic", "rows")
        for name, value in options.items():
            reader = reader.option(name, value)
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / f"cp{len(options)}{sorted(options)[0]}"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()

    with pytest.raises(Exception, match="'endingOffsets' is for batch reads only"):
        stream(endingOffsets="latest")
    with pytest.raises(Exception, match=r"startingOffsets names partitions the topics do not have now"):
        stream(startingOffsets=json.dumps({f"{key[:-1]}7": 0}))


def test_save_modes_are_kafkas(spark: Any, cluster: ClusterThread) -> None:
    frame = spark.createDataFrame([("a",), ("b",)], "value string")

    def write(mode: str | None) -> None:
        writer = frame.write.format("tubemq").option("masters", cluster.masters).option("topic", "target")
        (writer.mode(mode) if mode else writer).save()

    with pytest.raises(Exception, match=r"(?s)'overwrite' is not allowed for tubemq.*mode\('append'\)"):
        write("overwrite")
    # Spark refuses ErrorIfExists (the default) and Ignore for every Python data source before asking it.
    for mode in (None, "ignore"):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            write(mode)
    write("append")
    assert sorted(r.value for r in read_tubemq(spark, cluster.masters, topic="target").collect()) == [
        b"a",
        b"b",
    ]


def test_reader_runs_reuse_their_private_groups(spark: Any, cluster: ClusterThread) -> None:
    cluster.publish("rows", 0, 200)
    for _ in range(10):
        assert read_tubemq(spark, cluster.masters, topic="rows", groupPrefix="reruns").count() == 200
    committed = cluster.cluster.brokers[0].offsets._committed
    assert {group for group, _, _ in committed if group.startswith("reruns")} == {"reruns_0"}


def test_stream_id_filter_as_option_and_pushed_down(spark: Any, cluster: ClusterThread) -> None:
    from gateway.spark import register

    cluster.publish("kinds", 0, 600)  # stream ids s0, s1, s2 in turn

    def plan(frame: Any) -> str:
        return str(frame._jdf.queryExecution().executedPlan().toString())

    def numbers(frame: Any) -> list[int]:
        return sorted(int(r.value[4:]) for r in frame.select("value").collect())

    only = read_tubemq(spark, cluster.masters, topic="kinds", streamId="s1")
    assert numbers(only) == [n for n in range(600) if n % 3 == 1]
    conf = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(conf, "true")
    register(spark)
    try:
        frame = read_tubemq(spark, cluster.masters, topic="kinds")
        picked = frame.where("stream_id = 's2'")
        assert numbers(picked) == [n for n in range(600) if n % 3 == 2]
        assert "= s2)" not in plan(picked)  # the source took the filter: Spark does not evaluate it again
        both = frame.where("stream_id in ('s0', 's2') and message_id > 0")
        assert numbers(both) == [n for n in range(600) if n % 3 != 1]
        assert "IN (s0,s2)" not in plan(both) and "> 0)" in plan(both)
        with_option = read_tubemq(spark, cluster.masters, topic="kinds", streamId="s0,s1")
        assert numbers(with_option.where("stream_id = 's1'")) == [n for n in range(600) if n % 3 == 1]
        assert numbers(with_option.where("stream_id = 's2'")) == []
    finally:
        spark.conf.set(conf, "false")
        register(spark)
