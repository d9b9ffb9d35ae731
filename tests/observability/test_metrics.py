"""Metrics: fed by core events over real loopback links, HTTP by route template, naming and label rules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from fastapi import FastAPI, Request
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.telemetry import install_telemetry
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.server import RpcServer
from gateway.embedded.topics import TopicSpec
from gateway.grpc import interceptors
from gateway.grpc.interceptors import GrpcCallFinished, GrpcCallStarted, GrpcStreamMessages
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2
from gateway.observability.metrics import OVERFLOW, GatewayMetrics
from gateway.observability.metrics_grpc import go_code
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.consumer.events import (
    ConsumerClosed,
    ConsumerRegistered,
    FetchOutcome,
    OffsetCommitted,
    PartitionRegistered,
    PartitionReleased,
    RebalanceEvent,
)
from gateway.tubemq.errors import ConnectError
from gateway.tubemq.events import Event, EventBus
from gateway.tubemq.net.master import MasterSwitched
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.events import (
    BrokerShielded,
    BrokerUnshielded,
    ProducerHeartbeatFailed,
    ProducerRegistered,
    RegisterFailed,
    SendCompleted,
)
from gateway.tubemq.wire import speedups
from tests.support.consumer_support import drain, fast
from tests.support.faultproxy import EchoHandler, heartbeat
from tests.support.grpc_support import gateway_settings, message, running_gateway
from tests.support.waiting import eventually

P = "tubemq_gateway_"
#: the gateway's gRPC service in the generated code (its full name is read from the descriptor)
GATEWAY_SERVICE = next(iter(gateway_pb2.DESCRIPTOR.services_by_name))


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics(CollectorRegistry(), max_topics=3, max_groups=2, process_metrics=False)


@pytest.fixture
def bus(metrics: GatewayMetrics) -> EventBus:
    events = EventBus()
    metrics.subscribe(events)
    return events


def value(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(P + name, labels)


@pytest.fixture
async def server() -> AsyncIterator[RpcServer]:
    async with RpcServer(EchoHandler()) as srv:
        yield srv


async def test_pool_and_rpc_metrics_from_real_links(
    metrics: GatewayMetrics, bus: EventBus, server: RpcServer
) -> None:
    hb = "producerHeartbeatP2M"
    node = NodeAddress("127.0.0.1", server.port)
    pool = ConnectionPool(idle_timeout=0.2, connect_timeout=1.0, events=bus)
    metrics.bind_in_flight(lambda: pool.stats().in_flight)
    try:
        for i in range(3):
            await pool.request(node, 2, heartbeat(f"c{i}"), 2.0)
        with pytest.raises(Exception, match="NoSuchThing"):
            await pool.request(node, 2, heartbeat("c", "fault:java.lang.NoSuchThing"), 2.0)
        assert value(metrics, "rpc_requests_total", method=hb, outcome="ok") == 3
        assert value(metrics, "rpc_requests_total", method=hb, outcome="remote_exception") == 1
        assert value(metrics, "rpc_requests_total", method=hb, outcome="timeout") == 0
        assert value(metrics, "rpc_duration_seconds_count", method=hb) == 4
        assert value(metrics, "pool_open_links", node=str(node)) == 1
        assert value(metrics, "pool_connect_failures_total", node=str(node)) == 0

        slow = asyncio.create_task(pool.request(node, 2, heartbeat("slow", "delay:0.3"), 2.0))
        await eventually(lambda: pool.stats().in_flight == 1)
        assert value(metrics, "pool_in_flight_requests") == 1, "read from pool.stats() at scrape time"
        await slow
        assert value(metrics, "pool_in_flight_requests") == 0

        # Idle reclaim closes the link: the gauge follows the events down.
        await eventually(lambda: value(metrics, "pool_idle_reclaims_total") == 1)
        assert value(metrics, "pool_open_links", node=str(node)) == 0
        assert value(metrics, "pool_link_closes_total", reason="idle") == 1

        await pool.request(node, 2, heartbeat("again"), 2.0)
        assert value(metrics, "pool_open_links", node=str(node)) == 1
        await server.stop()  # the peer goes away: the link closes, the gauge drops
        await eventually(lambda: value(metrics, "pool_open_links", node=str(node)) == 0)

        dead = NodeAddress("127.0.0.1", server.port)
        with pytest.raises(ConnectError):
            await pool.request(dead, 2, heartbeat("x"), 1.0)
        assert value(metrics, "pool_connect_failures_total", node=str(dead)) == 1
    finally:
        await pool.close()
    assert value(metrics, "pool_open_links", node=str(node)) == 0


def test_publish_metrics_and_error_series_start_at_zero(metrics: GatewayMetrics, bus: EventBus) -> None:
    bus.emit(SendCompleted("orders", 1, "ok", 0.002, None, 120))
    for reason in ("rejected", "unavailable", "transport"):
        assert value(metrics, "publish_errors_total", topic="orders", reason=reason) == 0
    bus.emit(SendCompleted("orders", 1, "ok", 0.003, None, 80))
    bus.emit(SendCompleted("orders", 2, "unavailable", 0.01))
    bus.emit(SendCompleted("orders", 2, "rejected", 0.01, 500))
    assert value(metrics, "published_messages_total", topic="orders") == 2
    assert value(metrics, "published_bytes_total", topic="orders") == 200
    assert value(metrics, "publish_errors_total", topic="orders", reason="unavailable") == 1
    assert value(metrics, "publish_errors_total", topic="orders", reason="rejected") == 1
    assert value(metrics, "publish_send_duration_seconds_count", outcome="ok") == 2


def test_topic_and_group_labels_are_capped(metrics: GatewayMetrics, bus: EventBus) -> None:
    for topic in ("t1", "t2", "t3", "t4", "t5"):
        bus.emit(SendCompleted(topic, 1, "ok", 0.001, None, 1))
    assert value(metrics, "published_messages_total", topic="t3") == 1
    assert value(metrics, "published_messages_total", topic="t4") is None
    assert value(metrics, "published_messages_total", topic=OVERFLOW) == 2
    assert value(metrics, "label_overflow_total", label="topic") == 2
    for group in ("g1", "g2", "g3"):
        bus.emit(ConsumerRegistered(f"client-{group}", group, False, 0))
    assert value(metrics, "consumer_instances", group=OVERFLOW) == 1
    assert "topic 3/3" in repr(metrics.topics)


def test_shielded_brokers_and_master_session(metrics: GatewayMetrics, bus: EventBus) -> None:
    assert value(metrics, "master_session_up", role="producer") == 0
    assert value(metrics, "broker_shield_events_total", reason="quality") == 0
    bus.emit(ProducerRegistered("p1", NodeAddress("m", 8715), 2, False))
    assert value(metrics, "master_session_up", role="producer") == 1
    bus.emit(BrokerShielded(1, "unavailable"))
    bus.emit(BrokerShielded(2, "failures"))
    bus.emit(BrokerShielded(2, "failures"))  # twice: still two brokers
    assert value(metrics, "shielded_brokers") == 2
    assert value(metrics, "broker_shielded", broker_id="2") == 1
    bus.emit(BrokerUnshielded(2))
    assert value(metrics, "shielded_brokers") == 1 and value(metrics, "broker_shielded", broker_id="2") == 0
    assert value(metrics, "broker_shield_events_total", reason="failures") == 2
    bus.emit(ProducerHeartbeatFailed("p1", "timeout", False))
    assert value(metrics, "master_session_up", role="producer") == 1
    bus.emit(ProducerHeartbeatFailed("p1", "not registered", True))
    assert value(metrics, "master_session_up", role="producer") == 0
    bus.emit(RegisterFailed("p1", "down", 1, 1.0))
    bus.emit(MasterSwitched(NodeAddress("m", 1), NodeAddress("m", 2), "standby"))
    assert value(metrics, "master_heartbeat_failures_total", role="producer", target="master") == 2
    assert value(metrics, "master_registrations_total", role="producer", outcome="error") == 1
    assert value(metrics, "master_switches_total") == 1


def test_consumer_instances_partitions_lag_commits(metrics: GatewayMetrics, bus: EventBus) -> None:
    bus.emit(ConsumerRegistered("c1", "g", False, 0))
    bus.emit(ConsumerRegistered("c1", "g", True, 0))  # re-registration: same instance
    bus.emit(ConsumerRegistered("c2", "g", False, 0))
    assert value(metrics, "consumer_instances", group="g") == 2
    bus.emit(PartitionRegistered("c1", "g", "1:demo:0", 0, 28 * 10))
    bus.emit(PartitionRegistered("c2", "g", "2:demo:0", 28 * 4, 28 * 9))
    assert value(metrics, "consumer_partitions", group="g") == 2
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 15  # two stores: summed
    # A sibling in broker 1's store 0: the store counts once, by its slowest partition.
    bus.emit(PartitionRegistered("c2", "g", "1:demo:1", 28 * 3, 28 * 10))
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 15
    bus.emit(PartitionRegistered("c2", "g", "1:demo:10001", 28 * 1, 28 * 3))  # broker 1, store 1
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 17
    bus.emit(PartitionReleased("c2", "g", "1:demo:1", "close", None))
    bus.emit(PartitionReleased("c2", "g", "1:demo:10001", "close", None))
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 15
    assert value(metrics, "redeliveries_total", group="g", topic="demo") == 0
    assert value(metrics, "commits_total", group="g", topic="demo", result="error") == 0

    bus.emit(FetchOutcome("c1", "g", "demo", "1:demo:0", "ok", 200, 6, 600, 0.004, 4))
    bus.emit(FetchOutcome("c1", "g", "demo", "1:demo:0", "transport", -1, 0, 0, 0.5))  # lag unknown: kept
    assert value(metrics, "polled_messages_total", group="g", topic="demo") == 6
    assert value(metrics, "polled_bytes_total", group="g", topic="demo") == 600
    assert value(metrics, "fetches_total", group="g", topic="demo", outcome="transport") == 1
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 4 + 5

    bus.emit(OffsetCommitted("c1", "g", "demo", "1:demo:0", True, 168, 200))
    bus.emit(OffsetCommitted("c1", "g", "demo", "1:demo:0", False, -1, 200))
    bus.emit(OffsetCommitted("c1", "g", "demo", "1:demo:0", True, -1, -1))
    assert value(metrics, "commits_total", group="g", topic="demo", result="ok") == 1
    assert value(metrics, "commits_total", group="g", topic="demo", result="error") == 1
    assert value(metrics, "redeliveries_total", group="g", topic="demo") == 1

    bus.emit(RebalanceEvent("c1", "g", 7, "DISCONNECT", ("2:demo:0",), True))
    bus.emit(PartitionReleased("c2", "g", "2:demo:0", "rebalance", False))
    assert value(metrics, "redeliveries_total", group="g", topic="demo") == 2
    assert value(metrics, "rebalances_total", group="g", event="disconnect") == 1
    assert value(metrics, "consumer_partitions", group="g") == 1
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 4

    bus.emit(ConsumerClosed("c1", "g", 1))
    bus.emit(ConsumerClosed("c1", "g", 1))  # twice: counted once
    assert value(metrics, "consumer_instances", group="g") == 1
    assert value(metrics, "consumer_partitions", group="g") == 0
    assert value(metrics, "consumer_lag_messages", group="g", topic="demo") == 0
    assert "consumers=1 partitions=0" in repr(metrics.events)


def test_unknown_events_are_ignored(metrics: GatewayMetrics, bus: EventBus) -> None:
    class Other(Event):
        pass

    before = metrics.render()
    bus.emit(Other())
    bus.emit("not an event")
    assert metrics.render() == before


def test_names_units_and_labels_follow_the_rules(metrics: GatewayMetrics, bus: EventBus) -> None:
    bus.emit(SendCompleted("orders", 1, "ok", 0.002, None, 10))
    bus.emit(ConsumerRegistered("client-1", "g", False, 0))
    bus.emit(GrpcCallStarted("/tubemq.gateway.v1.GatewayService/Publish", "unary"))
    bus.emit(GrpcCallFinished("/tubemq.gateway.v1.GatewayService/Publish", "OK", 0.01, "req-9"))
    # The gateway's own families, and the gRPC ones named after go-grpc-prometheus: nothing else.
    families = [f for f in metrics.registry.collect() if f.name.startswith((P, "grpc_server_"))]
    assert len(families) >= 40
    assert {f.name for f in metrics.registry.collect()} == {f.name for f in families}
    forbidden = {"key", "client_id", "clientid", "instance_id", "consumer_id", "message_id", "partition_key"}
    for family in families:
        assert family.documentation, family.name
        # Base units only (word by word: "msg" in grpc_server_msg_sent is no "ms").
        words = set(family.name.split("_"))
        assert not words & {"ms", "kb", "mb", "minutes"} and not any(w.startswith("milli") for w in words)
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        for sample in family.samples:
            assert not forbidden & set(sample.labels), (family.name, sample.labels)
            assert "client-1" not in sample.labels.values() and "req-9" not in sample.labels.values()


async def test_http_metrics_by_route_and_the_metrics_endpoint() -> None:
    class Runtime:
        def __init__(self) -> None:
            self.events = EventBus()
            self.pool: ConnectionPool | None = None
            self.draining = False

        def readiness(self) -> tuple[bool, dict[str, object]]:
            return not self.draining, {}

    app = FastAPI()

    @app.get("/v1/topics/{topic}")
    async def topic(topic: str) -> dict[str, str]:
        return {"topic": topic}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    @app.get("/v1/consumers/{group}/instances/{instance_id}/messages")
    async def long_poll(group: str, instance_id: str) -> dict[str, str]:
        return {"group": group}

    runtime = Runtime()
    metrics = install_telemetry(app, runtime, max_topics=5, max_groups=5)
    runtime.events.emit(SendCompleted("demo", 1, "ok", 0.001, None, 5))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        for name in ("a", "b", "c"):
            assert (await client.get(f"/v1/topics/{name}")).status_code == 200
        assert (await client.get("/boom")).status_code == 500
        assert (await client.get("/unknown/path")).status_code == 404
        assert (await client.request("BREW", "/v1/topics/a")).status_code == 405
        for path in ("/docs", "/openapi.json", "/docs/oauth2-redirect"):  # FastAPI's own (plain) routes
            assert (await client.get(path)).status_code == 200
        assert (await client.get("/v1/consumers/g/instances/i/messages")).status_code == 200
        runtime.draining = True
        scraped = await client.get("/metrics")
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    assert scraped.headers["x-request-id"]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
    }

    def get(name: str, **labels: str) -> float | None:
        return samples.get((P + name, tuple(sorted(labels.items()))))

    assert get("http_requests_total", route="/v1/topics/{topic}", method="GET", code="200") == 3
    assert get("http_requests_total", route="/boom", method="GET", code="500") == 1
    assert get("http_requests_total", route="<unmatched>", method="GET", code="404") == 1
    assert get("http_requests_total", route="/v1/topics/{topic}", method="other", code="405") == 1
    assert get("http_request_duration_seconds_count", route="/v1/topics/{topic}", method="GET") == 3
    for path in ("/docs", "/openapi.json", "/docs/oauth2-redirect"):
        assert get("http_requests_total", route=path, method="GET", code="200") == 1, path
    assert not [s for s in samples if ("status", "200") in s[1]], "the status code label is `code`"
    # The long poll is counted like any request, and timed in the long-lived histogram only.
    poll = {"route": "/v1/consumers/{group}/instances/{instance_id}/messages", "method": "GET"}
    assert get("http_requests_total", **poll, code="200") == 1
    assert get("http_long_request_duration_seconds_count", **poll) == 1
    assert get("http_request_duration_seconds_count", **poll) is None
    assert get("http_requests_in_flight") == 1  # the scrape itself
    assert get("published_messages_total", topic="demo") == 1
    assert get("ready") == 0 and get("draining") == 1
    assert get("pool_in_flight_requests") == 0
    assert get("build_info", version=__import__("gateway").__version__, codec=speedups.ACTIVE) == 1
    assert metrics is app.state.metrics and "GatewayMetrics" in repr(metrics)


async def test_a_client_leaving_before_the_answer_is_a_499_not_a_server_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An upload the client abandons half way (the server reports ``http.disconnect``): the app fails
    reading the body and never answers; that is counted as 499, as nginx logs it, not as a 500."""

    class Runtime:
        events = EventBus()
        pool: ConnectionPool | None = None
        draining = False

        def readiness(self) -> tuple[bool, dict[str, object]]:
            return True, {}

    app = FastAPI()

    @app.post("/v1/topics/{topic}/messages")
    async def upload(topic: str, request: Request) -> dict[str, int]:
        return {"size": len(await request.body())}

    metrics = install_telemetry(app, Runtime())
    messages = [
        {"type": "http.request", "body": b"half of it", "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return messages.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/topics/demo/messages", "raw_path": b"/v1/topics/demo/messages", "query_string": b"",
        "root_path": "", "headers": [(b"content-length", b"100000"), (b"host", b"gw")],
        "client": ("127.0.0.1", 5), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    with caplog.at_level(logging.INFO):
        await app(scope, receive, send)
    route = {"route": "/v1/topics/{topic}/messages", "method": "POST"}
    assert value(metrics, "http_requests_total", **route, code="499") == 1
    assert value(metrics, "http_requests_total", **route, code="500") is None
    # The access log agrees, nobody is answered, and no error with a traceback is logged for it.
    (access,) = [r for r in caplog.records if r.name == "gateway.access"]
    assert access.status == 499  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not [m for m in sent if m["type"] == "http.response.start"]


async def test_end_to_end_on_the_embedded_cluster(metrics: GatewayMetrics, bus: EventBus) -> None:
    """A real producer and consumer: published bytes, polled messages, commits and lag from their events."""
    pool = ConnectionPool(connect_timeout=1.0, events=bus)
    producer_config = ProducerConfig(heartbeat_interval=0.2, rpc_timeout=2.0, send_timeout=3.0)
    async with EmbeddedCluster([TopicSpec("demo", 2)], balance_period=0.1) as cluster:
        producer = Producer([cluster.master_address], pool=pool, config=producer_config, events=bus)
        consumer = Consumer(
            [cluster.master_address],
            "readers",
            {"demo": None},
            pool=pool,
            config=fast(start_position=StartPosition.EARLIEST),
            events=bus,
        )
        try:
            await producer.start()
            await producer.register_topic("demo")
            bodies = [f"message-{i:02d}".encode() for i in range(30)]
            for body in bodies:
                await producer.send("demo", body)
            assert value(metrics, "published_messages_total", topic="demo") == 30
            stored = value(metrics, "published_bytes_total", topic="demo")
            assert stored is not None and stored >= sum(map(len, bodies))
            assert value(metrics, "master_session_up", role="producer") == 1

            await consumer.start()
            assert await consumer.wait_for_assignment(5.0)
            await eventually(lambda: value(metrics, "consumer_partitions", group="readers") == 2)
            assert value(metrics, "consumer_instances", group="readers") == 1
            assert value(metrics, "consumer_lag_messages", group="readers", topic="demo") == 30

            first = await consumer.poll(3.0)
            assert first is not None
            # Both partitions share one store: the one not read yet still sees all 30 entries.
            assert value(metrics, "consumer_lag_messages", group="readers", topic="demo") == 30
            await consumer.confirm(first.confirm_context, consumed=True)
            rest = await drain(consumer, 30 - len(first.messages))
            assert sum(len(b.messages) for b in rest) == 30 - len(first.messages)
            assert value(metrics, "polled_messages_total", group="readers", topic="demo") == 30
            assert await consumer.poll(0.3) is None  # reads at the end answer 404: nothing left
            await eventually(
                lambda: (
                    value(metrics, "fetches_total", group="readers", topic="demo", outcome="not_found")
                    is not None
                )
            )
            assert value(metrics, "consumer_lag_messages", group="readers", topic="demo") == 0
            assert value(metrics, "commits_total", group="readers", topic="demo", result="ok") == 1 + len(
                rest
            )
        finally:
            await consumer.close()
            await producer.close()
            await pool.close()
    assert value(metrics, "consumer_instances", group="readers") == 0
    assert value(metrics, "consumer_partitions", group="readers") == 0
    assert value(metrics, "pool_open_links", node=str(cluster.master_address)) == 0


def grpc_value(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    """A sample of the go-grpc-prometheus families (no ``tubemq_gateway_`` prefix)."""
    return metrics.registry.get_sample_value(name, labels)


def test_grpc_calls_by_service_method_type_and_code(metrics: GatewayMetrics, bus: EventBus) -> None:
    publish = "/tubemq.gateway.v1.GatewayService/Publish"
    labels = {"grpc_service": "tubemq.gateway.v1.GatewayService", "grpc_method": "Publish"}
    unary = {**labels, "grpc_type": "unary"}
    for _ in range(3):
        bus.emit(GrpcCallStarted(publish, "unary"))
    bus.emit(GrpcCallFinished(publish, "OK", 0.004, "req-1"))
    bus.emit(GrpcCallFinished(publish, "INVALID_ARGUMENT", 0.001, "req-2"))
    bus.emit(GrpcCallFinished(publish, "OK", 0.002, "req-3"))
    assert grpc_value(metrics, "grpc_server_started_total", **unary) == 3
    assert grpc_value(metrics, "grpc_server_handled_total", **unary, grpc_code="OK") == 2
    assert grpc_value(metrics, "grpc_server_handled_total", **unary, grpc_code="InvalidArgument") == 1
    assert grpc_value(metrics, "grpc_server_handling_seconds_count", **unary) == 3
    assert value(metrics, "grpc_long_call_duration_seconds_count", **unary) is None
    assert b"req-1" not in metrics.render(), "request ids are never labels"

    # Streams and long polls are timed in the long-lived histogram; a client's cancel is Canceled.
    subscribe = {"grpc_service": labels["grpc_service"], "grpc_method": "Subscribe"}
    method = "/tubemq.gateway.v1.GatewayService/Subscribe"
    bus.emit(GrpcCallFinished(method, "CANCELLED", 95.0, "r", "server_stream"))
    stream = {**subscribe, "grpc_type": "server_stream"}
    assert grpc_value(metrics, "grpc_server_handled_total", **stream, grpc_code="Canceled") == 1
    assert value(metrics, "grpc_long_call_duration_seconds_bucket", **stream, le="120.0") == 1
    assert value(metrics, "grpc_long_call_duration_seconds_bucket", **stream, le="60.0") == 0
    assert grpc_value(metrics, "grpc_server_handling_seconds_count", **stream) is None
    bus.emit(GrpcStreamMessages(method, "server_stream", 0, 40))
    bus.emit(GrpcStreamMessages(method, "server_stream", 0, 2))
    assert grpc_value(metrics, "grpc_server_msg_sent_total", **stream) == 42
    assert grpc_value(metrics, "grpc_server_msg_received_total", **stream) == 1  # its one request
    assert grpc_value(metrics, "grpc_server_msg_received_total", **unary) == 3
    assert grpc_value(metrics, "grpc_server_msg_sent_total", **unary) == 2  # OK answers only
    bus.emit(GrpcCallFinished("/tubemq.gateway.v1.GatewayService/Poll", "OK", 30.0, "p"))
    poll = {"grpc_service": labels["grpc_service"], "grpc_method": "Poll", "grpc_type": "unary"}
    assert value(metrics, "grpc_long_call_duration_seconds_count", **poll) == 1
    assert grpc_value(metrics, "grpc_server_handling_seconds_count", **poll) is None


@pytest.mark.parametrize(
    ("name", "go"),
    [("OK", "OK"), ("CANCELLED", "Canceled"), ("INVALID_ARGUMENT", "InvalidArgument"),
     ("DEADLINE_EXCEEDED", "DeadlineExceeded"), ("UNAVAILABLE", "Unavailable"), ("DATA_LOSS", "DataLoss"),
     ("UNAUTHENTICATED", "Unauthenticated"), ("RESOURCE_EXHAUSTED", "ResourceExhausted")],
)  # fmt: skip
def test_grpc_codes_are_spelled_as_go_spells_them(name: str, go: str) -> None:
    assert go_code(name) == go
    assert go_code(grpc.StatusCode[name].name) == go


async def test_grpc_metrics_of_a_real_server_and_a_cancelled_subscribe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real gRPC server on the embedded cluster: unary calls, a refused one, a PublishStream, and a
    Subscribe stream the client cancels (Canceled, never counted as a server error), by service and method;
    stream messages are counted while the stream lasts."""
    monkeypatch.setattr(interceptors, "REPORT_INTERVAL", 0.0)  # streams report every message at once
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    service = gateway_pb2.DESCRIPTOR.services_by_name[GATEWAY_SERVICE].full_name
    async with EmbeddedCluster([TopicSpec("demo", 2)], balance_period=0.1) as cluster:
        consumers = {"heartbeat_interval": 0.1, "empty_fetch_wait": 0.05, "assignment_wait": 5.0}
        settings = gateway_settings(cluster, consumers=consumers)
        async with running_gateway(cluster, settings, subscribe_step=0.1) as gw:
            metrics.subscribe(gw.runtime.events)
            await gw.stub.GetTopic(gateway_pb2.GetTopicRequest(topic="demo"))
            with pytest.raises(grpc.aio.AioRpcError):
                await gw.stub.GetTopic(gateway_pb2.GetTopicRequest(topic="no such topic!"))
            spec = gateway_pb2.CreateConsumerRequest(group="gm", topics=["demo"])
            created = await gw.stub.CreateConsumer(spec)
            instance = {"group": "gm", "instance_id": created.instance_id}
            await gw.stub.Poll(gateway_pb2.PollRequest(**instance, timeout_ms=50))  # joined the group
            batches = [
                gateway_pb2.PublishStreamRequest(topic="demo", messages=[message(f"s{i}")]) for i in range(3)
            ]
            acks = [r async for r in gw.stub.PublishStream(iter(batches))]
            call = gw.stub.Subscribe(gateway_pb2.SubscribeRequest(**instance))
            await gw.stub.Publish(gateway_pb2.PublishRequest(topic="demo", messages=[message("m")]))
            async with asyncio.timeout(10):
                assert (await call.read()).messages
            subscribe = {"grpc_service": service, "grpc_method": "Subscribe", "grpc_type": "server_stream"}
            # Reported while the stream is still open, not only when it ends.
            assert (grpc_value(metrics, "grpc_server_msg_sent_total", **subscribe) or 0) >= 1
            assert grpc_value(metrics, "grpc_server_handled_total", **subscribe, grpc_code="Canceled") is None
            call.cancel()
            assert (await call.code()) is grpc.StatusCode.CANCELLED
            await eventually(
                lambda: (
                    grpc_value(metrics, "grpc_server_handled_total", **subscribe, grpc_code="Canceled") == 1
                )
            )
    get_topic = {"grpc_service": service, "grpc_method": "GetTopic", "grpc_type": "unary"}
    assert grpc_value(metrics, "grpc_server_started_total", **get_topic) == 2
    assert grpc_value(metrics, "grpc_server_handled_total", **get_topic, grpc_code="OK") == 1
    assert grpc_value(metrics, "grpc_server_handled_total", **get_topic, grpc_code="InvalidArgument") == 1
    assert grpc_value(metrics, "grpc_server_handling_seconds_count", **get_topic) == 2
    assert grpc_value(metrics, "grpc_server_msg_received_total", **get_topic) == 2
    assert grpc_value(metrics, "grpc_server_msg_sent_total", **get_topic) == 1, (
        "the refused call answered none"
    )
    stream = {"grpc_service": service, "grpc_method": "PublishStream", "grpc_type": "bidi_stream"}
    assert grpc_value(metrics, "grpc_server_msg_received_total", **stream) == 3
    assert grpc_value(metrics, "grpc_server_msg_sent_total", **stream) == len(acks) >= 1
    assert grpc_value(metrics, "grpc_server_handled_total", **stream, grpc_code="OK") == 1
    assert grpc_value(metrics, "grpc_server_msg_received_total", **subscribe) == 1
    assert grpc_value(metrics, "grpc_server_started_total", **subscribe) == 1
    assert value(metrics, "grpc_long_call_duration_seconds_count", **subscribe) == 1
    codes = {
        s.labels["grpc_code"]
        for f in metrics.registry.collect()
        if f.name == "grpc_server_handled"
        for s in f.samples
        if s.labels["grpc_method"] == "Subscribe"
    }
    assert codes == {"Canceled"}, "the client's cancel is the only way the stream ended"
