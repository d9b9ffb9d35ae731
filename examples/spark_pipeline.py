"""A streaming pipeline: TubeMQ topic -> JSON parse -> per-minute counts per stream id -> Parquet files.

    python examples/spark_pipeline.py --masters 127.0.0.1:18715 --topic demo --out /tmp/pipeline

Each message value is JSON such as ``{"amount": 12.5}``; every micro-batch counts its messages and sums
``amount`` per minute of the message's ``msg_time`` (the processing time when the producer sent none) and
per ``stream_id``, and writes that as Parquet under ``<out>/batch=<id>``. The checkpoint
(``<out>_checkpoint``) holds the TubeMQ offsets: stop the job and start it again and it continues where it
left off, and a micro-batch Spark has to run again overwrites its own directory, so the files count every
message exactly once. ``--once`` processes what is there now, prints the totals and stops.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--masters",
        default="127.0.0.1:18715",
        help="TubeMQ master list host:port[,...] (default: `tubemq-gateway embedded`'s master)",
    )
    parser.add_argument("--topic", default="demo")
    parser.add_argument("--out", default="/tmp/tubemq-pipeline", help="output directory (Parquet)")
    parser.add_argument("--once", action="store_true", help="process what is available, then stop")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from gateway.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tubemq-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register(spark)

    events = (
        spark.readStream.format("tubemq")
        .option("masters", args.masters)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "50000")
        .load()
    )
    parsed = events.select(
        F.coalesce("msg_time", F.current_timestamp()).alias("event_time"),
        F.coalesce("stream_id", F.lit("")).alias("stream_id"),
        F.get_json_object(F.col("value").cast("string"), "$.amount").cast("double").alias("amount"),
    )
    out = Path(args.out)

    def write_batch(batch: Any, batch_id: int) -> None:
        # Counts of this micro-batch only; a batch that Spark runs again overwrites its own directory, so
        # the files hold every message exactly once. Sum over batch=* for the totals.
        (
            batch.groupBy(F.date_trunc("minute", "event_time").alias("minute"), "stream_id")
            .agg(F.count("*").alias("messages"), F.sum("amount").alias("amount"))
            .write.mode("overwrite")
            .parquet(str(out / f"batch={batch_id}"))
        )

    writer = parsed.writeStream.foreachBatch(write_batch).option(
        "checkpointLocation", str(out.parent / f"{out.name}_checkpoint")
    )
    query = writer.trigger(availableNow=True).start() if args.once else writer.start()
    query.awaitTermination()
    totals = (
        spark.read.parquet(str(out))
        .groupBy("minute", "stream_id")
        .agg(F.sum("messages").alias("messages"), F.sum("amount").alias("amount"))
        .orderBy("minute", "stream_id")
    )
    totals.show(truncate=False)


if __name__ == "__main__":
    main()
