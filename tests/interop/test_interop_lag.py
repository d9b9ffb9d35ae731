"""Group lag from the real TubeMQ's own offsets (issue #23 row 4): a group's only consumer instance leaves
with messages unconsumed, and the gateway keeps reporting them, read from the real master's and broker's web
API (``admin_query_broker_configure``, ``admin_query_offset``, ``admin_query_consume_group_detail``)."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from interop_support import DEMO, WEB, group_name, real_gateway, require_topic, run_tag, wait_until
from prometheus_client.parser import text_string_to_metric_families

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb

UNCONSUMED = 40


def _gauge(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


async def test_lag_stays_when_the_only_instance_leaves() -> None:
    topic = require_topic(DEMO)
    tag = run_tag("lag")
    web_port = urlsplit(WEB).port or 80
    async with real_gateway(tubemq={"master_web_port": web_port, "group_lag_interval": 1.0}) as gw:
        group = group_name("lag")
        created = await gw.http.post(f"/v1/consumers/{group}", json={"topics": [topic]})
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]

        async def holds_partitions() -> bool:
            polled = await gw.http.get(f"{base}/messages", params={"timeout_ms": 1000})
            assert polled.status_code == 200, polled.text
            described = (await gw.http.get(base)).json()
            return len(described["partitions"]) == DEMO[1]

        await wait_until(holds_partitions, 90, "the instance holds every partition")
        committed = await gw.http.post(f"{base}/commits", json={})
        assert committed.status_code == 200, committed.text

        async def lag(expected: float, consumers: float) -> bool:
            text = (await gw.http.get("/metrics")).text
            got = _gauge(text, "tubemq_gateway_group_lag_messages", group=group, topic=topic)
            count = _gauge(text, "tubemq_gateway_group_consumers", group=group)
            return got == expected and count == consumers

        await wait_until(lambda: lag(0, 1), 60, "the group's lag read from the broker as 0")
        messages = [{"value": f"{tag}-{i}"} for i in range(UNCONSUMED)]
        sent = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
        assert sent.status_code == 200, sent.text
        await wait_until(lambda: lag(UNCONSUMED, 1), 60, f"lag {UNCONSUMED} with the instance")
        assert (await gw.http.delete(base)).status_code == 204
        # nobody consumes the group any more: TubeMQ still holds its offsets, and the lag stays
        await wait_until(lambda: lag(UNCONSUMED, 0), 90, f"lag {UNCONSUMED} with no consumer")
        text = (await gw.http.get("/metrics")).text
        partitions = [
            s
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "tubemq_gateway_group_partition_lag_messages" and s.labels["group"] == group
        ]
        assert len(partitions) == DEMO[1], partitions
        assert max(s.value for s in partitions) == UNCONSUMED
        # the same reading through the API the web console's groups page shows (issue #27)
        listed = (await gw.http.get("/v1/consumers")).json()
        (left,) = [g for g in listed["groups"] if g["group"] == group]
        assert left["consumers"] == 0 and len(left["partitions"]) == DEMO[1], left
        # partitions of a store share its index: each reports the store's backlog (as the metrics' max)
        assert max(p["lag"] for p in left["partitions"]) == UNCONSUMED, left
        assert {p["partitionKey"] for p in left["partitions"]} == {
            f"{p['brokerId']}:{topic}:{p['partitionId']}" for p in left["partitions"]
        }


async def test_lag_right_after_a_groups_first_commit_is_never_a_404() -> None:
    """The real broker writes the offsets its web API shows every few seconds: right after a group's first
    commit it has none to show. The lag answers 200 all the same, over REST and gRPC: the gateway's own view
    (its instance's read positions, ``source: gateway``) until the broker's offsets come (``tubemq``)."""
    topic = require_topic(DEMO)
    tag = run_tag("lagfirst")
    web_port = urlsplit(WEB).port or 80
    settings = {
        "master_web_port": web_port,
        "group_lag_interval": 1.0,
        "group_lag_cache_seconds": 0,
        "group_lag_reads_per_second": 0,
    }
    async with real_gateway(tubemq=settings) as gw:
        group = group_name("lagfirst")
        created = await gw.http.post(f"/v1/consumers/{group}", json={"topics": [topic], "autoCommit": False})
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]

        async def holds_partitions() -> bool:
            polled = await gw.http.get(f"{base}/messages", params={"timeout_ms": 1000})
            assert polled.status_code == 200, polled.text
            return len((await gw.http.get(base)).json()["partitions"]) == DEMO[1]

        await wait_until(holds_partitions, 90, "the instance holds every partition")
        messages = [{"value": f"{tag}-{i}"} for i in range(6)]
        assert (
            await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
        ).status_code == 200
        tokens: list[str] = []

        async def polled_some() -> bool:
            polled = await gw.http.get(f"{base}/messages", params={"timeout_ms": 1000})
            tokens.extend(m["token"] for m in polled.json()["messages"])
            return bool(tokens)

        await wait_until(polled_some, 30, "some of the new messages polled")
        committed = await gw.http.post(f"{base}/commits", json={"tokens": tokens})
        assert committed.status_code == 200, committed.text
        sources: list[str] = []
        deadline = time.monotonic() + 30
        while "tubemq" not in sources and time.monotonic() < deadline:
            answer = await gw.http.get(f"/v1/consumers/{group}/lag")
            assert answer.status_code == 200, f"after {len(sources)} answers: {answer.text}"
            body = answer.json()
            sources.append(body["source"])
            if body["source"] == "gateway":
                assert body["consumers"] == 1 and body["topics"], body
            over_grpc = await gw.grpc_stub.GetGroupLag(pb.GetGroupLagRequest(group=group))
            assert over_grpc.group == group and over_grpc.source in ("gateway", "tubemq")
            await asyncio.sleep(0.2)
        assert "tubemq" in sources, f"the broker never showed the group's offsets: {sources[-5:]}"
        print("lag answers after the first commit:", sources.count("gateway"), "gateway, then tubemq")
        assert (await gw.http.delete(base)).status_code == 204
