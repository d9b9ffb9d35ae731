"""GET /v1/topics and GET /v1/consumers (the web console's data) under authentication and rules: a caller
sees the topics it may describe, broker addresses only with describe_cluster, its own consumer instances (all
of them with admin), each held partition's lag; the publish counters are the gateway's metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.api.app import create_app
from gateway.api.routes_overview import publish_counts
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.service.overview import PublishCounts
from tests.support.auth_support import SecureGateway, secure_gateway
from tests.support.waiting import eventually


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    async with secure_gateway(tmp_path) as gateway:
        yield gateway


async def _get(gw: SecureGateway, path: str, principal: str) -> Any:
    answer = await gw.http.get(path, headers=gw.files.headers(principal))
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_topics_show_what_the_rules_allow_with_the_gateways_counters(gw: SecureGateway) -> None:
    alice = gw.files.headers("alice")
    answer = await gw.http.post(
        "/v1/topics/demo/messages", json={"messages": [{"value": "abc"}, {"value": "de"}]}, headers=alice
    )
    assert answer.status_code == 200
    root = await _get(gw, "/v1/topics", "root")
    (demo,) = root["topics"]
    assert demo["topic"] == "demo" and demo["partitions"] == 2 and demo["brokerIds"] == [1]
    assert (demo["publishedMessages"], demo["publishedBytes"], demo["publishErrors"]) == (2, 5, 0)
    (broker,) = root["brokers"]
    assert broker["brokerId"] == 1 and broker["state"] == "closed" and broker["partitions"] == 2
    assert broker["broker"].startswith("127.0.0.1:") and broker["successes"] >= 1
    # alice may describe, not describe_cluster: the same without addresses
    listed = await _get(gw, "/v1/topics", "alice")
    assert listed["topics"] == root["topics"]
    assert [b["broker"] for b in listed["brokers"]] == [None]
    # carol may describe other_* only: nothing here, not even the brokers of demo
    assert await _get(gw, "/v1/topics", "carol") == {"topics": [], "brokers": []}
    # nobody has no rule at all
    refused = await gw.http.get("/v1/topics", headers=gw.files.headers("nobody"))
    assert refused.status_code == 403 and refused.json()["error"]["action"] == "describe"


async def test_consumers_list_own_instances_and_every_one_for_admin(gw: SecureGateway) -> None:
    made = {}
    for principal in ("alice", "bob"):
        answer = await gw.http.post(
            f"/v1/consumers/g_{principal}",
            json={"topics": ["demo"], "startPosition": "earliest"},
            headers=gw.files.headers(principal),
        )
        assert answer.status_code == 201, answer.text
        made[principal] = answer.json()["instanceId"]
    alice = await _get(gw, "/v1/consumers", "alice")
    assert [i["instanceId"] for i in alice["instances"]] == [made["alice"]]
    (own,) = alice["instances"]
    assert own["owner"] == "api_key:alice" and own["group"] == "g_alice" and own["topics"] == {"demo": []}
    assert own["worker"] is None and alice["incompleteWorkers"] == []
    root = await _get(gw, "/v1/consumers", "root")
    assert {i["instanceId"] for i in root["instances"]} == set(made.values())
    # carol may consume other_* groups: allowed to list, sees none of these
    assert (await _get(gw, "/v1/consumers", "carol"))["instances"] == []

    # lag per partition: polled and not committed -> still behind; committed -> 0 (the read position moves
    # with the commit; it is known once the instance has read from the broker)
    headers = gw.files.headers("alice")
    await gw.http.post(
        "/v1/topics/demo/messages", json={"messages": [{"value": "x", "partition": 0}] * 3}, headers=headers
    )

    async def lag_of(expected: int) -> bool:
        listed = await _get(gw, "/v1/consumers", "alice")
        lags = {p["partitionKey"]: p["lag"] for p in listed["instances"][0]["partitions"]}
        return lags.get("1:demo:0") == expected

    base = f"/v1/consumers/g_alice/instances/{made['alice']}"
    polled: list[Any] = []
    while len(polled) < 3:
        polled += (
            await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000}, headers=headers)
        ).json()["messages"]
    await eventually(lambda: lag_of(3), timeout=10.0, what="lag 3 on partition 0")
    assert (await gw.http.post(f"{base}/commits", json={}, headers=headers)).json()["pending"] == 0
    await eventually(lambda: lag_of(0), timeout=10.0, what="lag 0 after the commit")


def test_publish_counts_sum_the_workers_of_a_replica() -> None:
    exposition = "\n".join(
        [
            "# HELP tubemq_gateway_published_messages_total Messages stored by a broker.",
            "# TYPE tubemq_gateway_published_messages_total counter",
            'tubemq_gateway_published_messages_total{topic="demo",worker="0"} 3.0',
            'tubemq_gateway_published_messages_total{topic="demo",worker="1"} 4.0',
            'tubemq_gateway_published_messages_total{topic="__overflow__",worker="1"} 9.0',
            "# HELP tubemq_gateway_published_bytes_total Bytes.",
            "# TYPE tubemq_gateway_published_bytes_total counter",
            'tubemq_gateway_published_bytes_total{topic="demo",worker="0"} 30.0',
            "# HELP tubemq_gateway_publish_errors_total Failed send attempts.",
            "# TYPE tubemq_gateway_publish_errors_total counter",
            'tubemq_gateway_publish_errors_total{topic="other",reason="transport",worker="0"} 2.0',
            'tubemq_gateway_publish_errors_total{topic="other",reason="rejected",worker="1"} 1.0',
            "",
        ]
    )
    assert publish_counts(exposition) == {
        "demo": PublishCounts(messages=7, bytes=30, errors=0),
        "other": PublishCounts(messages=0, bytes=0, errors=3),
    }


async def test_one_reading_of_the_counters_serves_callers_for_a_while(
    gw: SecureGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the counters renders every metric (with workers: scrapes every sibling); a caller polling
    GET /v1/topics in a loop gets the reading of the last COUNTS_MAX_AGE seconds instead of a new one."""
    from gateway.api import routes_overview

    alice = gw.files.headers("alice")

    async def published() -> int:
        (demo,) = (await _get(gw, "/v1/topics", "alice"))["topics"]
        count: int = demo["publishedMessages"]
        return count

    async def publish() -> None:
        answer = await gw.http.post(
            "/v1/topics/demo/messages", json={"messages": [{"value": "x"}]}, headers=alice
        )
        assert answer.status_code == 200

    monkeypatch.setattr(routes_overview, "COUNTS_MAX_AGE", 3600.0)
    assert await published() == 0
    await publish()
    assert await published() == 0  # the reading of a moment ago
    monkeypatch.setattr(routes_overview, "COUNTS_MAX_AGE", 0.0)
    assert await published() == 1


async def test_a_shielded_broker_shows_with_its_reason_and_cooldown() -> None:
    """The brokers of GET /v1/topics carry the producer's shielding: a stopped broker of a two-broker
    cluster is shielded (failures) once sends to it fail, and its topic lists it in shieldedBrokers."""
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=2) as cluster:
        settings = Settings(
            masters=",".join(str(m) for m in cluster.master_addresses),
            # no heartbeat meanwhile: its answer would drop the stopped broker from the route
            producer={"heartbeat_interval": 60.0, "failure_threshold": 2, "failure_cooldown": 30.0},
        )
        runtime = Runtime(settings)
        await runtime.start()
        try:
            app = create_app(runtime=runtime)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                ok = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a"}] * 8})
                assert ok.status_code == 200
                await cluster.stop_broker(2)
                for _ in range(4):
                    await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "b"}] * 8})
                listed = (await client.get("/v1/topics")).json()
        finally:
            await runtime.stop()
    brokers = {b["brokerId"]: b for b in listed["brokers"]}
    assert brokers[1]["state"] == "closed" and brokers[1]["reason"] is None
    assert brokers[2]["state"] == "open" and brokers[2]["reason"] == "failures"
    assert 0 < brokers[2]["shieldedForSeconds"] <= 30
    (demo,) = listed["topics"]
    assert demo["shieldedBrokers"] == [2] and demo["brokerIds"] == [1, 2]


async def test_group_lag_from_tubemqs_offsets_stays_when_the_consumers_leave(tmp_path: Path) -> None:
    """GET /v1/consumers also lists the lag TubeMQ's own offsets give for the groups the gateway served
    (the LagMonitor's last reading), cut to what the caller may consume: it stays after the instance left."""
    async with secure_gateway(tmp_path, tubemq={"group_lag_interval": 0.2}) as gw:
        alice = gw.files.headers("alice")
        created = await gw.http.post(
            "/v1/consumers/g_left", json={"topics": ["demo"], "startPosition": "earliest"}, headers=alice
        )
        assert created.status_code == 201, created.text
        base = f"/v1/consumers/g_left/instances/{created.json()['instanceId']}"
        await gw.http.post(
            "/v1/topics/demo/messages", json={"messages": [{"value": "x", "partition": 0}] * 4}, headers=alice
        )
        polled: list[Any] = []
        while len(polled) < 4:
            answer = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000}, headers=alice)
            polled += answer.json()["messages"]
        committed = await gw.http.post(
            f"{base}/commits", json={"tokens": [polled[0]["token"]]}, headers=alice
        )
        assert committed.status_code == 200, committed.text
        assert (await gw.http.delete(base, headers=alice)).status_code == 204

        async def left_behind() -> dict[str, Any] | None:
            listed = await _get(gw, "/v1/consumers", "alice")
            groups = {g["group"]: g for g in listed["groups"]}
            found = groups.get("g_left")
            if listed["instances"] or found is None or found["consumers"] != 0:
                return None
            return found

        group = await eventually(left_behind, timeout=15.0, what="the left group's lag from TubeMQ's offsets")
        lags = {p["partitionKey"]: p["lag"] for p in group["partitions"]}
        assert lags["1:demo:0"] > 0, group
        assert group["readAt"] > 0
        # root (admin) sees it too; carol (other_* only) does not
        assert "g_left" in {g["group"] for g in (await _get(gw, "/v1/consumers", "root"))["groups"]}
        assert (await _get(gw, "/v1/consumers", "carol"))["groups"] == []
