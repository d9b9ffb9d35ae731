"""The ``tubemq`` Spark data source on a real topic: one small batch read of messages the real Java client
produced, one small write the real Java client reads back."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from interop_support import (
    DEMO,
    MASTER,
    attributes_of,
    decode_value,
    group_name,
    java_client,
    java_consumer_ready,
    java_produce,
    require_topic,
    run_tag,
)

pytestmark = pytest.mark.spark


def read_range(spark: Any, topic: str, starting: dict[str, int]) -> list[Any]:
    frame = (
        spark.read.format("tubemq")
        .option("masters", MASTER)
        .option("topic", topic)
        .option("startingOffsets", json.dumps(starting))
        .load()
    )
    return list(frame.collect())


def write_rows(spark: Any, topic: str, tag: str) -> None:
    from pyspark.sql import functions as F

    frame = spark.range(0, 6).select(
        F.concat(F.lit(f"{tag}-w"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.create_map(F.lit("id"), F.col("id").cast("string")).alias("attributes"),
        F.concat(F.lit("stream"), (F.col("id") % 2).cast("string")).alias("stream_id"),
        F.lit(datetime(2024, 5, 6, 7, 8)).alias("msg_time"),
    )
    frame.write.format("tubemq").option("masters", MASTER).option("topic", topic).mode("append").save()


async def test_spark_reads_and_writes_a_real_topic(java_root: Path) -> None:
    from tests.support.spark_support import spark_session

    topic = require_topic(DEMO)
    spark = spark_session()
    tag = run_tag("spark")
    sent = await java_produce(java_root, topic, tag, 9)
    partitions = {e["partitionKey"] for e in sent}
    starting = {key: min(e["offset"] for e in sent if e["partitionKey"] == key) for key in partitions}
    async with java_client(java_root, "consume", topic, group_name("spark"), tag, "240", "latest") as java:
        # the read runs while the Java consumer joins its group (Spark calls stay on this thread: a Python
        # data source looked up from another thread is not found)
        rows = read_range(spark, topic, starting)
        mine = {r.value.decode(): r for r in rows if r.value.startswith(tag.encode())}
        assert set(mine) == {f"{tag}-{e['i']}" for e in sent}, f"spark read {len(rows)} rows"
        placed = sum(r.offset is not None for r in rows)
        print(
            f"real TubeMQ {topic}: {len(rows)} rows read, {placed} with offset, {len(rows) - placed} without",
            flush=True,
        )
        for event in sent:
            row = mine[f"{tag}-{event['i']}"]
            context = f"row {row} vs java {event}"
            assert row.topic == topic, context
            assert row.partition == event["partitionKey"], context
            assert str(row.message_id) == event["messageId"], context
            assert row.offset is None or row.offset == event["offset"], context
            assert row.attributes == {"run": tag, "n": str(event["i"])}, context
            assert row.stream_id == f"s{event['i'] % 3}", context
            assert row.msg_time == (datetime(2024, 1, 31, 15, 30) if event["i"] % 2 == 0 else None), context

        await java_consumer_ready(java)
        write_rows(spark, topic, tag)
        await java.wait_for(lambda c: len(c.messages()) >= 6, 60.0, "the 6 rows Spark wrote")
        got = {decode_value(m).decode(): m for m in java.messages()}
        assert set(got) == {f"{tag}-w{i}" for i in range(6)}
        for i in range(6):
            m = got[f"{tag}-w{i}"]
            assert attributes_of(m["attribute"]) == {"id": str(i)}, m
            assert m["msgType"] == f"stream{i % 2}", m
            assert m["msgTime"] == "202405060708", m
