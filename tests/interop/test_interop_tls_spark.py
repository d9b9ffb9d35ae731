"""The ``tubemq`` Spark data source with its ``tls.*`` and ``auth.*`` options on the real TubeMQ in TLS_AUTH=1
mode (master 8716, brokers on 8124): a batch read of what the gateway published, and a write read back
through the gateway (the real Java client cannot work there)."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

import pytest
from interop_support import (
    DEMO,
    group_name,
    real_gateway,
    require_topic,
    run_tag,
    start_offsets,
    wait_until,
)
from interop_tls import TlsHarness, flushed_ends, tls_harness

pytestmark = [pytest.mark.tls_auth, pytest.mark.spark]


def secure_options(harness: TlsHarness, topic: str) -> dict[str, str]:
    return {
        "masters": harness.master,
        "topic": topic,
        "tls": "true",
        "tls.caFile": str(harness.ca),
        "tls.certFile": str(harness.cert),
        "tls.keyFile": str(harness.key),
        "auth.username": harness.user,
        "auth.password": harness.password,
    }


async def test_spark_reads_and_writes_over_tls_with_authentication() -> None:
    from tests.support.spark_support import spark_session

    spark = spark_session()  # skips, naming the package, where the spark extras are not installed
    from pyspark.sql import functions as F

    harness = tls_harness()
    topic = require_topic(DEMO)
    tag = run_tag("tlsspark")
    options = secure_options(harness, topic)
    async with real_gateway(masters=harness.master, tubemq=harness.tubemq()) as gw:
        # read: what the gateway published, from its offsets on
        messages = [
            {"value": f"{tag}-r{i}", "attributes": {"n": str(i)}, "streamId": f"s{i % 2}"} for i in range(9)
        ]
        answer = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        published = {m["value"]: r for m, r in zip(messages, results, strict=True)}
        await flushed_ends(gw, topic, results)  # Spark plans up to the ends the broker reports
        reader = spark.read.format("tubemq").options(**options)
        rows = reader.option("startingOffsets", json.dumps(start_offsets(results))).load().collect()
        mine = {r.value.decode(): r for r in rows if r.value.startswith(tag.encode())}
        assert set(mine) == set(published), f"spark read {len(rows)} rows"
        for value, result in published.items():
            row = mine[value]
            i = int(value.rpartition("r")[2])
            assert (row.partition, str(row.message_id)) == (result["partitionKey"], result["messageId"]), row
            assert row.attributes == {"n": str(i)} and row.stream_id == f"s{i % 2}", row

        # write: six rows, read back by a gateway consumer from the current end on
        before = (await gw.http.get(f"/v1/topics/{topic}/partitions")).json()["partitions"]
        created = await gw.http.post(
            f"/v1/consumers/{group_name('tlsspark')}",
            json={
                "topics": [topic],
                "startPosition": "offsets",
                "offsets": {p["partitionKey"]: p["maxOffset"] for p in before},
            },
        )
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        frame = spark.range(0, 6).select(
            F.concat(F.lit(f"{tag}-w"), F.col("id").cast("string")).cast("binary").alias("value"),
            F.create_map(F.lit("id"), F.col("id").cast("string")).alias("attributes"),
            F.lit(datetime(2024, 5, 6, 7, 8)).alias("msg_time"),
        )
        frame.write.format("tubemq").options(**options).mode("append").save()
        got: dict[str, dict[str, Any]] = {}
        wanted = {f"{tag}-w{i}" for i in range(6)}

        async def delivered() -> bool:
            poll = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000})
            assert poll.status_code == 200, poll.text
            for m in poll.json()["messages"]:
                value = base64.b64decode(m["value"]).decode(errors="replace")
                if value in wanted:
                    got[value] = m
            await gw.http.post(f"{base}/commits", json={})
            return set(got) == wanted

        await wait_until(delivered, 90.0, "the 6 rows Spark wrote, at a gateway consumer", step=0.1)
        for i in range(6):
            m = got[f"{tag}-w{i}"]
            assert m["attributes"] == {"id": str(i)} and m["msgTime"] == "202405060708", m
        assert (await gw.http.delete(base)).status_code in (200, 204)
