"""The number of series one replica can export stays under a documented bound, however many topics, groups,
nodes, paths and methods its clients and cluster throw at the labels.

Every label is hammered far past its cap (thousands of topics, groups, (group, topic) pairs, node addresses,
broker ids; every fetch outcome, rebalance event and RPC outcome; unmatched paths and odd HTTP methods against
the real app; every gRPC method, type and status code), then the registry's samples are counted.
"""

from __future__ import annotations

import itertools

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2
from gateway.grpc.reflection import V1_DESCRIPTOR
from gateway.observability.grpc_events import GrpcCallFinished, GrpcCallStarted
from gateway.observability.lag_events import GroupLagRead, PartitionLag
from gateway.observability.metric_limits import (
    HTTP_METHODS,
    MAX_NODES,
    MAX_PUSH_SUBSCRIPTIONS,
    OVERFLOW,
    series_bound,
)
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.push_events import PUSH_OUTCOMES, PushDelivered, PushSubscriptionState
from gateway.observability.redelivery_events import RedeliveryCounted
from gateway.runtime import Runtime
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.events import (
    ConsumerRegistered,
    FetchOutcome,
    OffsetCommitted,
    PartitionRegistered,
    PartitionRegisterFailed,
    RebalanceEvent,
)
from gateway.tubemq.consumer.rebalance import EventType
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.breaker import ShieldReason
from gateway.tubemq.net.connection import Outcome, RequestCompleted
from gateway.tubemq.net.link import CloseReason, ConnectionOpened, ConnectionTerminated
from gateway.tubemq.net.pool_state import PoolConnectFailed, PoolLinkOpened
from gateway.tubemq.producer.events import BrokerShielded, SendCompleted
from gateway.tubemq.wire import rpc

#: The documented worst case of one replica with the default caps (docs/operations.md, "Metrics").
DOCUMENTED_BOUND = 35_000
FETCH_OUTCOMES = ("ok", "empty", "not_found", "speed_limit", "forbidden", "moved", "unavailable", "dropped",
                  "error", "transport")  # fmt: skip
#: far past the default caps (200 topics, 200 groups, 500 pairs, 256 nodes)
TOPICS, GROUPS, TOPICS_PER_GROUP, NODES = 1000, 600, 3, 2 * MAX_NODES


def _own_series(metrics: GatewayMetrics) -> int:
    """Samples of the gateway's own families (process_* and python_* are a fixed few dozen)."""
    return sum(
        len(family.samples)
        for family in metrics.registry.collect()
        if family.name.startswith(("tubemq_gateway_", "grpc_server_"))
    )


def _hammer_core(bus: EventBus) -> None:
    for i in range(TOPICS):
        for outcome in ("ok", "rejected", "unavailable", "transport"):
            bus.emit(SendCompleted(f"topic-{i}", i % 7, outcome, 0.001, None, 10))
    for g, t in itertools.product(range(GROUPS), range(TOPICS_PER_GROUP)):
        # topics among the first 200 (under the topic cap), so the pairs of the first 200 groups pass the
        # group and topic caps and reach the pair cap
        group, topic, client = f"group-{g}", f"topic-{(g * 13 + t) % 200}", f"client-{g}"
        key = f"{g % 50}:{topic}:{t}"
        bus.emit(ConsumerRegistered(client, group, False, 0))
        bus.emit(PartitionRegistered(client, group, key, 0, 28 * 5))
        for outcome in FETCH_OUTCOMES:
            bus.emit(FetchOutcome(client, group, topic, key, outcome, 200, 1, 10, 0.001, 3))
        bus.emit(OffsetCommitted(client, group, topic, key, True, 28, 200))
        bus.emit(OffsetCommitted(client, group, topic, key, True, 28, 500))
        if t == 0:
            bus.emit(RedeliveryCounted(group, nacked=1, expired=1, retried=1, dead_lettered=1))
            bus.emit(PartitionRegisterFailed(client, group, key, 500, "no", False))
            for event in EventType:
                bus.emit(RebalanceEvent(client, group, 1, event.name, (key,), True))
    # group lag readings from TubeMQ's offsets: every group, its topics, each of 30 partitions (3 brokers x
    # 10 partitions each, a topic of an ordinary cluster)
    for g in range(GROUPS):
        partitions = tuple(
            PartitionLag(f"topic-{(g * 13 + t) % 200}", b, 10000 * s + i, 5)
            for t in range(TOPICS_PER_GROUP)
            for b in range(3)
            for s in range(2)
            for i in range(5)
        )
        bus.emit(GroupLagRead(f"group-{g}", partitions, 1))
    # push subscriptions: three times the label cap, every outcome, paused and running, some removed
    for i in range(3 * MAX_PUSH_SUBSCRIPTIONS):
        name = f"push-{i}"
        bus.emit(PushSubscriptionState(name, f"group-{i}", "paused" if i % 2 else "running"))
        for outcome in PUSH_OUTCOMES:
            bus.emit(PushDelivered(name, outcome, 0.05 * i, i % 9 + 1, settled=i % 3 != 0))
        if i % 5 == 0:
            bus.emit(PushSubscriptionState(name, f"group-{i}", "removed"))
    for n in range(NODES):
        address = NodeAddress("127.0.0.1", 10000 + n)
        bus.emit(ConnectionOpened(address, False, 0.001))
        bus.emit(PoolLinkOpened(address, 1))
        bus.emit(PoolConnectFailed(address, 1, 1.0, "refused"))
        bus.emit(ConnectionTerminated(address, CloseReason.RESET, None, 0))
        bus.emit(BrokerShielded(n, ShieldReason.FAILURES.value))
        # every broker id and node address with every outcome of sends, reads and requests
        for outcome in ("ok", "rejected", "unavailable", "transport", "odd"):
            bus.emit(SendCompleted("topic-0", n, outcome, 0.001, None, 10))
        for outcome in FETCH_OUTCOMES:
            bus.emit(
                FetchOutcome("client-0", "group-0", "topic-0", f"{n}:topic-0:0", outcome, 200, 1, 1, 0.01)
            )
        for outcome in Outcome:
            bus.emit(RequestCompleted(address, rpc.Method.GET_MESSAGES, outcome, 0.001))
    for method in [*rpc.METHODS, 999, -1]:
        for outcome in Outcome:
            bus.emit(RequestCompleted(NodeAddress("127.0.0.1", 1), method, outcome, 0.001))


def _hammer_grpc(bus: EventBus) -> None:
    services = (gateway_pb2.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR, V1_DESCRIPTOR)
    for descriptor in services:
        for service in descriptor.services_by_name.values():
            for method in service.methods:
                kind = {
                    (False, False): "unary",
                    (True, False): "client_stream",
                    (False, True): "server_stream",
                    (True, True): "bidi_stream",
                }[(method.client_streaming, method.server_streaming)]
                name = f"/{service.full_name}/{method.name}"
                for code in grpc.StatusCode:
                    bus.emit(GrpcCallStarted(name, kind))
                    bus.emit(GrpcCallFinished(name, code.name, 0.01, "r", kind))


async def _hammer_http(client: httpx.AsyncClient, metrics: GatewayMetrics, templates: set[str]) -> None:
    """Real requests (unmatched paths, odd methods, every route), then every template, method and one of
    24 status codes straight into the metrics (more codes per route than the app ever answers)."""
    for i in range(300):
        await client.get(f"/no/such/path/{i}")
        await client.request(f"X-METHOD-{i}", f"/v1/topics/t{i}/messages")
    for path in ("/docs", "/redoc", "/openapi.json", "/metrics", "/healthz", "/readyz"):
        for method in (*HTTP_METHODS, "BREW"):
            await client.request(method, path)
    codes = (200, 201, 204, 304, 400, 401, 403, 404, 405, 406, 408, 409, 410, 413, 415, 422, 429, 431, 499,
             500, 502, 503, 504, 507)  # fmt: skip
    assert len(codes) == 24
    for route, method, code in itertools.product(templates, (*HTTP_METHODS, "BREW"), codes):
        metrics.observe_http(route, method, code, 0.01)


async def test_series_stay_under_the_documented_bound() -> None:
    runtime = Runtime(Settings(masters=""))  # not started: its bus and the app are all this needs
    app = create_app(runtime=runtime, owns_runtime=False)
    metrics: GatewayMetrics = app.state.metrics
    templates = {*app.openapi()["paths"], *(r.path for r in app.routes if hasattr(r, "path_format"))}
    templates.add("<unmatched>")
    bound = series_bound(http_routes=len(templates))
    assert bound <= series_bound() <= DOCUMENTED_BOUND, "docs/operations.md's figure covers the default caps"

    _hammer_core(runtime.events)
    _hammer_grpc(runtime.events)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        await _hammer_http(client, metrics, templates)

    counted = _own_series(metrics)
    print(f"\nseries after hammering: {counted} (bound {bound}, documented {DOCUMENTED_BOUND})")
    assert counted <= bound
    # The caps were hit (the hammer is real), and what passed them is told.
    sample = metrics.registry.get_sample_value
    for label in ("topic", "group", "group_topic", "node", "broker_id", "partition", "subscription"):
        overflowed = sample("tubemq_gateway_label_overflow_total", {"label": label})
        assert overflowed is not None and overflowed > 0, label
    for family, label in (
        ("broker_sends", "broker_id"),
        ("broker_fetches", "broker_id"),
        ("node_requests", "node"),
    ):
        values = {
            s.labels[label]
            for f in metrics.registry.collect()
            if f.name == f"tubemq_gateway_{family}"
            for s in f.samples
        }
        assert len(values) == MAX_NODES + 1 and OVERFLOW in values, family  # capped, the rest counted apart
    assert (
        sample("tubemq_gateway_published_messages_total", {"topic": OVERFLOW}) == TOPICS - 200
    )  # every topic past the cap, once per successful send
    families = [f for f in metrics.registry.collect() if f.name == "tubemq_gateway_http_requests"]
    routes = {sample.labels["route"] for family in families for sample in family.samples}
    assert routes <= templates, sorted(routes - templates)


@pytest.mark.parametrize("caps", [(1, 1, 1), (50, 20, 100), (1000, 1000, 5000)])
def test_the_bound_grows_with_the_caps_only(caps: tuple[int, int, int]) -> None:
    topics, groups, pairs = caps
    metrics = GatewayMetrics(
        max_topics=topics, max_groups=groups, max_group_topics=pairs, process_metrics=False
    )
    bus = EventBus()
    metrics.subscribe(bus)
    _hammer_core(bus)
    _hammer_grpc(bus)
    bound = series_bound(max_topics=topics, max_groups=groups, max_group_topics=pairs, http_routes=0)
    assert _own_series(metrics) <= bound
