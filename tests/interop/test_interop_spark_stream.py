"""The ``tubemq`` Spark source's streaming semantics on a real topic of four partitions in one store: a write,
an exact batch read of it, ``trigger(availableNow)`` with ``maxMessagesPerTrigger`` across a crash, and the
``offset`` column: exact where the broker's answer places a message, null where nothing on the wire does.

Prints the row counts (``-s`` shows them). Other clients may publish to the shared topic meanwhile, so
counts of this run's rows come from its tag; batch sizes count every message, as Spark does."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
    from tests.support.spark_support import run_available_now

    progress = run_available_now(
        spark, MASTER, topic, out, checkpoint, startingOffsets=starting, maxMessagesPerTrigger="500"
    )
    return [p["numInputRows"] for p in progress if p["numInputRows"]]


def read_rows(
    spark: Any, topic: str, starting: Mapping[str, int], ending: Mapping[str, int] | None
) -> list[Any]:
    frame = (
        spark.read.format("tubemq")
        .option("masters", MASTER)
        .option("topic", topic)
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending) if ending is not None else "latest")
        .load()
    )
    return list(frame.collect())


def planned_ends(topic: str) -> dict[str, int]:
    from gateway.spark.backend import plan
    from gateway.spark.options import SourceOptions

    return {
        k: p.bounds.max_offset
        for k, p in plan(SourceOptions.parse({"masters": MASTER, "topic": topic})).items()
    }


def offset_counts(rows: list[Any]) -> str:
    placed = sum(r.offset is not None for r in rows)
    return f"{len(rows)} rows read, {placed} with offset, {len(rows) - placed} without"


def tagged(spark: Any, out: Path, tag: str) -> list[str]:
    rows = spark.read.parquet(str(out)).select("value").collect()
    return [r.value.decode() for r in rows if r.value.startswith(tag.encode())]


def test_spark_streams_a_real_topic_exactly_with_available_now(tmp_path: Path) -> None:
    from tests.support.spark_support import forget_last_commit, spark_session

    topic = require_topic(GW4)
    spark = spark_session()
    tag = run_tag("sstream")
    before = planned_ends(topic)
    starting = json.dumps(before)

    write(spark, topic, tag, 0, 2000)
    rows = read_rows(spark, topic, before, None)
    batch = [r.value.decode() for r in rows if r.value.startswith(tag.encode())]
    print(
        f"real TubeMQ {topic}: wrote 2000 rows, batch read {len(batch)} back ({len(set(batch))} distinct); "
        f"{offset_counts(rows)} (spread over 4 partitions of one store: no answer places them)"
    )
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


async def test_spark_offsets_are_exact_where_the_real_broker_places_them() -> None:
    """Messages sent to one partition alone, read up to where that stopped, carry their exact offsets (the
    ``appendOffset`` each send answered); read on into spread messages, the rows carry what the answers
    prove, and every offset given is the true one."""
    from gateway.tubemq.address import parse_address_list
    from gateway.tubemq.net.pool import ConnectionPool
    from gateway.tubemq.producer.client import Producer
    from tests.support.spark_support import spark_session

    topic = require_topic(GW4)
    spark = spark_session()
    tag = run_tag("soffset")
    solo_start = planned_ends(topic)
    keys = sorted(solo_start)
    assert len(keys) == 4

    async def send(targets: list[str], prefix: str) -> dict[bytes, int]:
        async with (
            ConnectionPool() as pool,
            Producer(parse_address_list(MASTER, 8715), pool=pool) as producer,
        ):
            await producer.register_topic(topic)
            sent: dict[bytes, int] = {}
            for n, key in enumerate(targets):
                body = f"{prefix}-{n}".encode()
                sent[body] = (await producer.send(topic, body, partition=key)).append_offset
            return sent

    truth = await send([keys[1]] * 300, f"{tag}-solo")
    solo_end = planned_ends(topic)
    truth |= await send([keys[n % 4] for n in range(200)], f"{tag}-spread")

    solo = read_rows(spark, topic, solo_start, solo_end)
    mine = [r for r in solo if r.value.startswith(tag.encode())]
    print(f"real TubeMQ {topic}, 300 messages sent to {keys[1]} alone, read back: {offset_counts(solo)}")
    assert sorted(r.value for r in mine) == sorted(v for v in truth if b"-solo-" in v)
    assert all(r.offset is None or r.offset == truth[r.value] for r in mine)
    if len(mine) == len(solo):  # nobody else wrote to the store meanwhile: the span holds these alone
        assert [r.offset for r in mine] == [truth[r.value] for r in mine]

    later = read_rows(spark, topic, solo_start, None)
    ours = [r for r in later if r.value.startswith(tag.encode())]
    print(f"real TubeMQ {topic}, then 200 more spread over its 4 partitions, read on: {offset_counts(later)}")
    assert sorted(r.value for r in ours) == sorted(truth)
    assert all(r.offset is None or r.offset == truth[r.value] for r in ours)
