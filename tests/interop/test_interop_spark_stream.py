"""The ``tubemq`` Spark source's streaming semantics on a real topic of four partitions in one store: a write,
an exact batch read of it, and ``trigger(availableNow)`` with ``maxMessagesPerTrigger`` across a crash.

Prints the row counts (``-s`` shows them). Other clients may publish to the shared topic meanwhile, so
counts of this run's rows come from its tag; batch sizes count every message, as Spark does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from interop_support import GW4, MASTER, require_topic, run_tag

pytestmark = pytest.mark.spark


def write(spark: Any, topic: str, tag: str, first: int, count: int) -> None:
    from pyspark.sql import functions as F

    frame = spark.range(first, first + count).select(
        F.concat(F.lit(f"{tag}-"), F.col("id").cast("string")).alias("value")
    )
    frame.write.format("tubemq").option("masters", MASTER).option("topic", topic).mode("append").save()


def available_now(spark: Any, topic: str, starting: str, out: Path, checkpoint: Path) -> list[int]:
    from spark_support import run_available_now

    progress = run_available_now(
        spark, MASTER, topic, out, checkpoint, startingOffsets=starting, maxMessagesPerTrigger="500"
    )
    return [p["numInputRows"] for p in progress if p["numInputRows"]]


def tagged(spark: Any, out: Path, tag: str) -> list[str]:
    rows = spark.read.parquet(str(out)).select("value").collect()
    return [r.value.decode() for r in rows if r.value.startswith(tag.encode())]


def test_spark_streams_a_real_topic_exactly_with_available_now(tmp_path: Path) -> None:
    from spark_support import forget_last_commit, spark_session

    from gateway.spark.backend import plan
    from gateway.spark.options import SourceOptions

    topic = require_topic(GW4)
    spark = spark_session()
    tag = run_tag("sstream")
    before = {
        k: p.bounds.max_offset
        for k, p in plan(SourceOptions.parse({"masters": MASTER, "topic": topic})).items()
    }
    starting = json.dumps(before)

    write(spark, topic, tag, 0, 2000)
    frame = (
        spark.read.format("tubemq")
        .option("masters", MASTER)
        .option("topic", topic)
        .option("startingOffsets", starting)
        .load()
    )
    batch = [r.value.decode() for r in frame.select("value").collect() if r.value.startswith(tag.encode())]
    print(f"real TubeMQ {topic}: wrote 2000 rows, batch read {len(batch)} back ({len(set(batch))} distinct)")
    assert sorted(batch) == sorted(f"{tag}-{i}" for i in range(2000))

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = available_now(spark, topic, starting, out, checkpoint)
    print(
        f"availableNow run 1: micro-batches {first}, {len(tagged(spark, out, tag))} rows of this run stored"
    )
    assert first[:4] == [500, 500, 500, 500]
    forget_last_commit(checkpoint)  # a crash before the last batch was committed
    write(spark, topic, tag, 2000, 700)
    second = available_now(spark, topic, starting, out, checkpoint)
    got = tagged(spark, out, tag)
    print(
        f"availableNow run 2 (after the crash): micro-batches {second}, {len(got)} rows of this run stored, "
        f"{len(got) - len(set(got))} duplicates"
    )
    assert sorted(got) == sorted(f"{tag}-{i}" for i in range(2700))
