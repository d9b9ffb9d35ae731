"""A broker outage the master reports (a stopped broker's partitions leave its answers while the broker stays
configured) is a transient 503 + Retry-After on REST and UNAVAILABLE on gRPC, not a 404; /readyz turns
unready after ``master_failures_before_unready`` such heartbeats and ready again once the partitions return;
a topic the gateway never saw with partitions is still 404."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.runtime import Runtime
from gateway.tubemq.errors import NoPartition, PartitionsAway
from tests.support.grpc_support import detail_of, message, running_gateway
from tests.support.waiting import eventually

TOPICS = [TopicSpec("demo", 2), TopicSpec("other", 1)]
FAILURES = 2


def settings(cluster: EmbeddedCluster) -> Settings:
    return Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer={
            "heartbeat_interval": 0.1,
            "rpc_timeout": 1.0,
            "send_timeout": 2.0,
            "master_failures_before_unready": FAILURES,
        },
        grpc={"enabled": True, "port": 0},
    )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as c:
        yield c


async def publish(client: httpx.AsyncClient, topic: str, value: str) -> httpx.Response:
    return await client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": value}]})


async def test_stopped_broker_is_503_then_200_and_readiness_follows(cluster: EmbeddedCluster) -> None:
    async with running_gateway(cluster, settings(cluster)) as gw:
        runtime: Runtime = gw.runtime
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            assert (await publish(client, "demo", "before")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
            producer = runtime.producer
            assert producer is not None

            await cluster.stop_broker(1)  # clean stop: the master drops its partitions, keeps it listed

            async def routes_gone() -> bool:
                return producer.topic_route("demo") is None

            await eventually(routes_gone, what="the master to stop listing demo's partitions")
            r = await publish(client, "demo", "during")
            assert r.status_code == 503, r.text
            assert int(r.headers["retry-after"]) >= 1
            body = r.json()["error"]
            assert body["code"] == "unavailable" and "offline" in body["message"], body
            with pytest.raises(PartitionsAway):
                await producer.register_topic("demo")

            try:
                await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("during")]))
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.UNAVAILABLE, exc
                assert (detail_of(exc).retry_after_seconds or 0) >= 1
            else:
                raise AssertionError("a publish during the outage succeeded")

            # a topic this gateway never saw with partitions is unknown, not an outage
            nowhere = await publish(client, "other", "x")
            assert nowhere.status_code == 404, nowhere.text
            with pytest.raises(NoPartition) as caught:
                await producer.register_topic("other")
            assert not isinstance(caught.value, PartitionsAway)

            async def unready() -> bool:
                return (await client.get("/readyz")).status_code == 503

            await eventually(unready, what="/readyz to turn unready during the outage")
            checks = (await client.get("/readyz")).json()["checks"]
            assert checks["routesLost"] is True and checks["usableRoutes"] == 0, checks

            await cluster.start_broker(1)

            async def publishes() -> bool:
                return (await publish(client, "demo", "after")).status_code == 200

            await eventually(publishes, what="a publish after the broker is back")
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["routesLost"] is False


async def test_readiness_waits_for_the_configured_heartbeats_without_partitions(
    cluster: EmbeddedCluster,
) -> None:
    """The hysteresis: one heartbeat listing no partition keeps the replica ready; the
    ``master_failures_before_unready``-th in a row turns it unready; the first with partitions, ready."""
    custom = settings(cluster)
    custom = custom.model_copy(
        update={"producer": custom.producer.model_copy(update={"heartbeat_interval": 3600.0})}
    )
    async with running_gateway(cluster, custom) as gw:
        producer = gw.runtime.producer
        assert producer is not None
        await producer.register_topic("demo")
        session = producer._session  # heartbeats by hand: no timing involved
        await cluster.stop_broker(1)
        await session.heartbeat_now(2.0)
        assert producer.topic_route("demo") is None
        ready, checks = gw.runtime.readiness()
        assert ready and checks["routesLost"] is False, checks
        for _ in range(FAILURES - 1):
            await session.heartbeat_now(2.0)
        ready, checks = gw.runtime.readiness()
        assert not ready and checks["routesLost"] is True, checks
        await cluster.start_broker(1)

        async def back() -> bool:
            await session.heartbeat_now(2.0)
            return producer.topic_route("demo") is not None

        await eventually(back, what="demo's partitions to return")
        ready, checks = gw.runtime.readiness()
        assert ready and checks["routesLost"] is False, checks


async def test_a_poll_while_the_partitions_are_away_is_503(cluster: EmbeddedCluster) -> None:
    """A consumer instance whose partitions the master took away with a stopped broker polls 503 +
    Retry-After (not an empty 200 that reads as an idle topic); a member that simply holds nothing while
    the topic's partitions are served elsewhere still polls 200; after the restart the instance consumes."""
    base = settings(cluster)
    consumers = {"heartbeat_interval": 0.2, "empty_fetch_wait": 0.05, "assignment_wait": 10.0}
    custom = base.model_copy(update={"consumers": base.consumers.model_copy(update=consumers)})
    async with running_gateway(cluster, custom) as gw:
        app = create_app(runtime=gw.runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            created = await client.post("/v1/consumers/og", json={"topics": ["demo"]})
            assert created.status_code == 201, created.text
            path = f"/v1/consumers/og/instances/{created.json()['instanceId']}"

            async def held() -> bool:
                await client.get(f"{path}/messages", params={"timeout_ms": 200})
                return len((await client.get(path)).json()["partitions"]) == 2

            await eventually(held, what="the instance to hold demo's partitions")
            await cluster.stop_broker(1)

            async def away() -> bool:
                r = await client.get(f"{path}/messages", params={"timeout_ms": 200})
                if r.status_code == 503:
                    assert int(r.headers["retry-after"]) >= 1
                    assert "offline" in r.json()["error"]["message"], r.text
                    return True
                assert r.status_code == 200 and not r.json()["messages"], r.text
                return False

            await eventually(away, what="a poll answered 503 while demo's partitions are away")
            await cluster.start_broker(1)
            assert (await publish(client, "demo", "back")).status_code in (200, 503)

            async def consumes() -> bool:
                await publish(client, "demo", "back")
                r = await client.get(f"{path}/messages", params={"timeout_ms": 500, "format": "utf8"})
                return r.status_code == 200 and any(m["value"] == "back" for m in r.json()["messages"])

            await eventually(consumes, timeout=30, what="the instance to consume after the restart")


async def test_the_outage_check_says_nothing_while_partitions_are_served(cluster: EmbeddedCluster) -> None:
    from gateway.service.outages import PartitionOutages
    from gateway.tubemq.net import ConnectionPool

    async with ConnectionPool() as pool:
        outages = PartitionOutages(pool, cluster.master_addresses, ttl=0.0)
        assert await outages.away(["demo"]) == {}
        await cluster.stop_broker(1)
        assert await outages.away(["demo"]) == {"demo": (1,)}
        assert await outages.away(["demo", "nosuch"]) == {}  # an unknown topic is no outage
        await cluster.start_broker(1)
        assert await outages.away(["demo"]) == {}


def test_publishes_in_an_outage_ask_the_master_at_most_once_a_second() -> None:
    from gateway.tubemq.producer.routes import RouteTable, TopicRoute
    from gateway.tubemq.wire.meta import BrokerInfo

    table = RouteTable()
    table.brokers = {1: BrokerInfo(1, "127.0.0.1", 8123)}
    table.topics = {"t": TopicRoute("t", (), {}, 1024)}
    table.last_seen_on = {"t": frozenset({1})}
    assert table.outage_asked("t", 100.0, 1.0) is None  # routed: no outage
    table.topics = {}
    assert table.outage_asked("t", 100.0, 1.0) is None  # the first publish asks the master
    assert isinstance(table.outage_asked("t", 100.5, 1.0), PartitionsAway)  # the next ones do not
    assert table.outage_asked("t", 101.0, 1.0) is None  # a second later: ask again
    table.brokers = {}  # the broker left the cluster: no outage, a plain NoPartition
    assert table.outage_asked("t", 101.1, 1.0) is None
    assert type(table.no_route("t")) is NoPartition
