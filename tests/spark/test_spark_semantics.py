"""Streaming semantics of ``format("tubemq")`` as Spark's Kafka source has them: ``trigger(availableNow)``
across a crash, the exact trigger cap on stores of several partitions, ``failOnDataLoss``, the latest offset
and lag in the progress, several topics and ``minPartitions``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.store import Retention
from gateway.embedded.topics import TopicSpec
from gateway.spark.progress import source_lag
from tests.support.spark_support import ClusterThread, forget_last_commit, read_tubemq, spark_session
from tests.support.spark_support import run_available_now as available_now

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterThread]:
    topics = [TopicSpec("wide", 4), TopicSpec("one", 1), TopicSpec("two", 2)]
    running = ClusterThread(topics, brokers=2)
    yield running
    running.close()


def stored_ids(spark: Any, out: Path) -> list[int]:
    return sorted(r.message_id for r in spark.read.parquet(str(out)).select("message_id").collect())


def test_available_now_reads_what_is_there_in_exact_batches_and_again_after_a_crash(
    spark: Any, cluster: ClusterThread, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    ids = cluster.publish("wide", 0, 3000)  # 2 brokers x 1 store x 4 partitions
    progress = available_now(spark, cluster.masters, "wide", out, checkpoint, maxMessagesPerTrigger="1000")
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [1000, 1000, 1000]
    assert stored_ids(spark, out) == sorted(ids)
    first, last = progress[0]["sources"][0], progress[-1]["sources"][0]
    assert source_lag(first)["maxOffsetsBehindLatest"] > 0  # latestOffset is reported: lag is known
    assert source_lag(last)["partitions"] and source_lag(last)["maxOffsetsBehindLatest"] == 0

    # A crash after the third batch's offsets were logged, before it was committed: the next run redoes
    # that batch, then reads everything there at its own start (not just the cut batch).
    forget_last_commit(checkpoint)
    ids += cluster.publish("wide", 3000, 1500)
    progress = available_now(spark, cluster.masters, "wide", out, checkpoint, maxOffsetsPerTrigger="1000")
    batches = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert batches[-2:] == [1000, 500]  # the new messages (after the redone batch, when Spark reports it)
    assert batches[:-2] in ([], [1000])
    assert stored_ids(spark, out) == sorted(ids)  # every message once


def test_fail_on_data_loss_names_the_partition_and_offsets(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    old = ClusterThread([TopicSpec("lossy")], brokers=1)
    try:
        old.publish("lossy", 0, 300)
        available_now(spark, old.masters, "lossy", out, checkpoint)
    finally:
        old.close()
    # The store is lost: a new cluster (same broker id, topic and partition) holds 100 new messages.
    new = ClusterThread([TopicSpec("lossy")], brokers=1)
    try:
        fresh = new.publish("lossy", 300, 100)
        with pytest.raises(
            StreamingQueryException, match=r"partition 1:lossy:0: the query is at offset 8400"
        ):
            available_now(spark, new.masters, "lossy", out, checkpoint)
        available_now(spark, new.masters, "lossy", out, checkpoint, failOnDataLoss="false")
        assert len(stored_ids(spark, out)) == 400
        assert set(fresh) <= set(stored_ids(spark, out))
    finally:
        new.close()


def test_expired_offsets_fail_the_query_unless_told_otherwise(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    from gateway.spark.backend import plan
    from gateway.spark.options import SourceOptions

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    keeping = ClusterThread(
        [TopicSpec("aging")], brokers=1, retention=Retention(max_bytes=10_000), retention_interval=0.2
    )
    try:
        first = keeping.publish("aging", 0, 100)  # kept: a few thousand bytes with their attributes
        available_now(spark, keeping.masters, "aging", out, checkpoint)
        assert stored_ids(spark, out) == sorted(first)
        kept = keeping.publish("aging", 100, 1000)
        options = SourceOptions.parse({"masters": keeping.masters, "topic": "aging"})
        deadline = time.monotonic() + 60
        while plan(options)["1:aging:0"].bounds.min_offset <= 28 * 100:
            assert time.monotonic() < deadline, "retention did not run"
            time.sleep(0.2)
        with pytest.raises(
            StreamingQueryException, match=r"partition 1:aging:0: offsets 2800\.\.\d+ expired"
        ):
            available_now(spark, keeping.masters, "aging", out, checkpoint)
        # A batch read from an expired offset fails the same way, or reads on from the oldest.
        from_start = {"startingOffsets": '{"1:aging:0": 2800}', "topic": "aging"}
        with pytest.raises(Exception, match=r"partition 1:aging:0: startingOffsets 2800 expired"):
            read_tubemq(spark, keeping.masters, **from_start).count()
        oldest = read_tubemq(spark, keeping.masters, **from_start, failOnDataLoss="false")
        assert 0 < oldest.count() < 1000
        available_now(spark, keeping.masters, "aging", out, checkpoint, failOnDataLoss="false")
        got = stored_ids(spark, out)
        assert len(got) == len(set(got)) and 100 < len(got) < 1100
        assert set(got) - set(first) == set(kept[-(len(got) - 100) :])  # from the oldest kept on
    finally:
        keeping.close()


def test_several_topics_in_one_source_and_min_partitions(spark: Any, cluster: ClusterThread) -> None:
    ones = cluster.publish("one", 0, 500)
    twos = cluster.publish("two", 0, 300)
    both = read_tubemq(spark, cluster.masters, topic="one", subscribe="two")
    rows = both.select("topic", "message_id").collect()
    assert sorted(r.message_id for r in rows if r.topic == "one") == sorted(ones)
    assert sorted(r.message_id for r in rows if r.topic == "two") == sorted(twos)
    split = read_tubemq(spark, cluster.masters, topic="one", minPartitions="10")
    assert split.rdd.getNumPartitions() >= 10  # 2 partitions of 250 entries each, cut in pieces
    assert sorted(r.message_id for r in split.select("message_id").collect()) == sorted(ones)
    with pytest.raises(Exception, match="exactly one topic"):
        spark.createDataFrame([("x",)], "value string").write.format("tubemq").option(
            "masters", cluster.masters
        ).option("topic", "one,two").mode("append").save()
