"""Prometheus metrics of the gateway, bound to one explicit :class:`CollectorRegistry`.

Every TubeMQ metric is fed by the core's events (:meth:`GatewayMetrics.subscribe` to the runtime's
``EventBus``; handlers live in :mod:`gateway.observability.metrics_events`); nothing in the pool, connection,
producer or consumer calls a metric. HTTP metrics come from :class:`HttpMetricsMiddleware`, gRPC metrics from
the interceptor's call events. Three gauges are read when scraped instead: readiness, draining and the pool's
in-flight requests (no event marks a request's start; the pool's ``stats()`` snapshot is exact).

Names follow Prometheus conventions: prefix ``tubemq_gateway_``, base units (seconds, bytes), ``_total`` for
counters. Two families of conventions come from elsewhere so that stock dashboards and alerts work: HTTP
requests carry ``code`` (the status code, ``499`` when the client went away before the answer), and the gRPC
server metrics have the names and labels of go-grpc-prometheus (``grpc_server_started_total``,
``grpc_server_handled_total``, ``grpc_server_msg_received_total``, ``grpc_server_msg_sent_total``,
``grpc_server_handling_seconds``; labels ``grpc_type``, ``grpc_service``,
``grpc_method``, ``grpc_code`` with Go's code names: ``OK``, ``Canceled``, ``InvalidArgument``...).
Long-lived requests (HTTP long polls and SSE streams, gRPC streams and long polls) are timed in histograms
of their own (``*_long_*_duration_seconds``, buckets up to an hour), so the request latency histograms hold
only requests whose time is the gateway's.

Labels are bounded: route templates, methods, codes, outcomes, reasons; node addresses and broker ids
(bounded by the cluster, and capped at :data:`MAX_NODES`; the per-node and per-broker families have only
an outcome besides); topics, consumer groups and (group, topic)
pairs (capped: past ``max_topics`` / ``max_groups`` / ``max_group_topics`` distinct values, new ones are
counted under ``__overflow__`` and ``tubemq_gateway_label_overflow_total`` tells). Never message keys,
client ids, request ids or instance ids. :func:`series_bound` is the resulting worst case per replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import __version__
from gateway.observability.logging import CLIENT_CLOSED, route_template
from gateway.observability.metric_limits import (
    GRPC_BUCKETS,
    HTTP_BUCKETS,
    HTTP_METHODS,
    LONG_BUCKETS,
    LONG_HTTP_ROUTES,
    MAX_NODES,
    OVERFLOW,
    RPC_BUCKETS,
    LabelCap,
    PairCap,
    series_bound,
)
from gateway.observability.metrics_events import EventMetrics
from gateway.observability.metrics_grpc import LONG_GRPC_METHODS
from gateway.tubemq.events import EventBus, Subscription

__all__ = [
    "CONTENT_TYPE_LATEST",
    "LONG_GRPC_METHODS",
    "OVERFLOW",
    "GatewayMetrics",
    "HttpMetricsMiddleware",
    "LabelCap",
    "PairCap",
    "series_bound",
]

PREFIX: Final = "tubemq_gateway_"


class GatewayMetrics:
    """All gateway metrics on ``registry`` (a fresh one by default, so tests never share state)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_topics: int = 200,
        max_groups: int = 200,
        max_group_topics: int = 500,
        process_metrics: bool = True,
    ) -> None:
        # One series per counter and histogram, not two: the *_created timestamps only add cardinality.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._http_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Histogram:
            return Histogram(PREFIX + name, doc, labels, registry=r, buckets=buckets)

        self.build_info = gauge("build_info", "Always 1; the gateway version.", ("version",))
        self.build_info.labels(version=__version__).set(1)
        self.ready = gauge("ready", "1 when the gateway reports ready on /readyz, else 0.")
        self.draining = gauge("draining", "1 while the gateway shuts down gracefully.")
        self.label_overflow = counter(
            "label_overflow_total", "Label values mapped to __overflow__ past the cap.", ("label",)
        )
        self.topics = LabelCap("topic", max_topics, self.label_overflow)
        self.groups = LabelCap("group", max_groups, self.label_overflow)
        self.pairs = PairCap(max_group_topics, self.label_overflow)
        self.nodes = LabelCap("node", MAX_NODES, self.label_overflow)
        self.broker_ids = LabelCap("broker_id", MAX_NODES, self.label_overflow)

        # HTTP
        self.http_requests = counter(
            "http_requests_total",
            "HTTP requests by route template, method and status code (499: the client went away first).",
            ("route", "method", "code"),
        )
        self.http_duration = histogram(
            "http_request_duration_seconds",
            "HTTP request time, long polls and event streams excepted.",
            ("route", "method"),
            HTTP_BUCKETS,
        )
        self.http_long_duration = histogram(
            "http_long_request_duration_seconds",
            "Time of HTTP long polls and Server-Sent Events streams (as long as the client keeps them).",
            ("route", "method"),
            LONG_BUCKETS,
        )
        self.http_in_flight = gauge("http_requests_in_flight", "HTTP requests being served.")

        # gRPC: the names and labels of go-grpc-prometheus, which stock gRPC dashboards read.
        grpc_labels = ("grpc_type", "grpc_service", "grpc_method")
        self.grpc_started = Counter(
            "grpc_server_started_total", "RPCs started on the server.", grpc_labels, registry=r
        )
        self.grpc_handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code (Canceled: the client cancelled).",
            (*grpc_labels, "grpc_code"),
            registry=r,
        )
        self.grpc_msg_received = Counter(
            "grpc_server_msg_received_total",
            "RPC stream messages received on the server.",
            grpc_labels,
            registry=r,
        )
        self.grpc_msg_sent = Counter(
            "grpc_server_msg_sent_total", "gRPC stream messages sent by the server.", grpc_labels, registry=r
        )
        self.grpc_handling = Histogram(
            "grpc_server_handling_seconds",
            "Time of unary RPCs until the server answered; long polls and streams are in "
            "tubemq_gateway_grpc_long_call_duration_seconds.",
            grpc_labels,
            registry=r,
            buckets=GRPC_BUCKETS,
        )
        self.grpc_long_duration = histogram(
            "grpc_long_call_duration_seconds",
            "Time of gRPC streams (their whole life) and long polls.",
            grpc_labels,
            LONG_BUCKETS,
        )

        # Publishing
        self.published_messages = counter(
            "published_messages_total", "Messages stored by a broker.", ("topic",)
        )
        self.published_bytes = counter(
            "published_bytes_total", "Bytes (body and attributes) of the messages stored.", ("topic",)
        )
        self.publish_errors = counter(
            "publish_errors_total",
            "Failed send attempts: rejected (error code), unavailable (503), transport (no answer).",
            ("topic", "reason"),
        )
        self.send_duration = histogram(
            "publish_send_duration_seconds",
            "Time of one send attempt to a broker.",
            ("outcome",),
            RPC_BUCKETS,
        )

        # Consuming
        self.polled_messages = counter(
            "polled_messages_total", "Messages handed to consumers.", ("group", "topic")
        )
        self.polled_bytes = counter("polled_bytes_total", "Bytes of the messages polled.", ("group", "topic"))
        self.fetches = counter(
            "fetches_total", "Broker reads (GetMessage) by outcome.", ("group", "topic", "outcome")
        )
        self.fetch_duration = histogram(
            "fetch_duration_seconds", "Time of one broker read.", ("outcome",), RPC_BUCKETS
        )
        self.commits = counter(
            "commits_total",
            "Offset commits (consumed batches) by result: ok or error.",
            ("group", "topic", "result"),
        )
        self.redeliveries = counter(
            "redeliveries_total",
            "Batches handed back for redelivery (rolled back, or released unconsumed).",
            ("group", "topic"),
        )
        self.consumer_lag = gauge(
            "consumer_lag_messages",
            "Messages not yet read by the group: per store, its slowest held partition's backlog "
            "(an upper bound), summed over the stores.",
            ("group", "topic"),
        )
        self.group_lag = gauge(
            "group_lag_messages",
            "Messages the group has not consumed, from TubeMQ's own offsets (stays while nobody consumes): "
            "per store its slowest partition, summed over the stores. Each process that served the group "
            "reports it: aggregate with max.",
            ("group", "topic"),
        )
        self.group_partition_lag = gauge(
            "group_partition_lag_messages",
            "Messages the group has not consumed per partition (brokerId:partitionId), from TubeMQ's "
            "offsets.",
            ("group", "topic", "partition"),
        )
        self.group_consumers = gauge(
            "group_consumers", "Consumers the TubeMQ master lists in the group (any client).", ("group",)
        )
        self.consumer_instances = gauge(
            "consumer_instances", "Consumers registered with the master.", ("group",)
        )
        self.consumer_partitions = gauge(
            "consumer_partitions", "Partitions held by the consumers.", ("group",)
        )
        self.rebalances = counter(
            "rebalances_total", "Rebalance events carried out, by type.", ("group", "event")
        )
        self.partition_register_failures = counter(
            "partition_register_failures_total", "Failed partition registrations at brokers.", ("group",)
        )

        # TubeMQ requests and links
        self.rpc_requests = counter(
            "rpc_requests_total", "TubeMQ requests by method and outcome.", ("method", "outcome")
        )
        self.rpc_duration = histogram(
            "rpc_duration_seconds", "TubeMQ request time.", ("method",), RPC_BUCKETS
        )
        self.open_links = gauge("pool_open_links", "Open TCP links per TubeMQ node.", ("node",))
        self.in_flight = gauge("pool_in_flight_requests", "TubeMQ requests awaiting an answer.")
        self.idle_reclaims = counter("pool_idle_reclaims_total", "Links closed by the pool after idling.")
        self.connect_failures = counter("pool_connect_failures_total", "Failed link opens.", ("node",))
        self.link_closes = counter("pool_link_closes_total", "Links closed, by reason.", ("reason",))

        # Which TubeMQ node or broker fails: per node address (masters and brokers) and per broker id, both
        # capped (MAX_NODES), never multiplied by topic, group or method.
        self.node_requests = counter(
            "node_requests_total", "TubeMQ requests by node address and outcome.", ("node", "outcome")
        )
        self.broker_sends = counter(
            "broker_sends_total",
            "Send attempts by broker id and outcome: ok, rejected, unavailable, transport.",
            ("broker_id", "outcome"),
        )
        self.broker_fetches = counter(
            "broker_fetches_total",
            "Broker reads (GetMessage) by broker id and outcome.",
            ("broker_id", "outcome"),
        )

        # Brokers and master
        self.shielded_brokers = gauge("shielded_brokers", "Brokers the producer does not send to now.")
        self.broker_shielded = gauge("broker_shielded", "1 while the broker is shielded.", ("broker_id",))
        self.shield_events = counter(
            "broker_shield_events_total", "Brokers shielded, by reason.", ("reason",)
        )
        self.master_session_up = gauge(
            "master_session_up", "1 while the role's master session is registered.", ("role",)
        )
        self.master_registrations = counter(
            "master_registrations_total", "Registrations at the master by outcome.", ("role", "outcome")
        )
        self.master_heartbeat_failures = counter(
            "master_heartbeat_failures_total", "Failed heartbeats, by role and target.", ("role", "target")
        )
        self.master_switches = counter("master_switches_total", "Fail-overs to another master address.")
        self.master_session_up.labels(role="producer").set(0)

        self.events = EventMetrics(self)

    # --- wiring ----------------------------------------------------------------------------------------

    def subscribe(self, bus: EventBus) -> Subscription:
        """Feed the metrics from the core's events on ``bus``; cancel the returned subscription to stop."""
        return self.events.subscribe(bus)

    def bind_readiness(self, ready: Callable[[], bool], draining: Callable[[], bool]) -> None:
        """Read readiness and the draining flag at scrape time."""
        self.ready.set_function(lambda: 1.0 if ready() else 0.0)
        self.draining.set_function(lambda: 1.0 if draining() else 0.0)

    def bind_in_flight(self, in_flight: Callable[[], int]) -> None:
        """Read the pool's in-flight request count at scrape time (``pool.stats().in_flight``)."""
        self.in_flight.set_function(lambda: float(in_flight()))

    def observe_http(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in HTTP_METHODS else "other"
        # Children looked up once per label set, not per request (bounded: route templates, the
        # methods above, status codes).
        children = self._http_children.get((route, method, status))
        if children is None:
            long = (method, route) in LONG_HTTP_ROUTES
            children = self._http_children[(route, method, status)] = (
                self.http_requests.labels(route=route, method=method, code=str(status)),
                (self.http_long_duration if long else self.http_duration).labels(route=route, method=method),
            )
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        """The exposition text of every metric on the registry."""
        return generate_latest(self.registry)

    def __repr__(self) -> str:
        return f"<GatewayMetrics {self.topics!r} {self.groups!r} {self.pairs!r} {self.events!r}>"


class HttpMetricsMiddleware:
    """Count and time every HTTP request by route template (pure ASGI: streamed bodies are timed whole)."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None  # of the answer, once started
        client_gone = False

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        async def receive_disconnect() -> Message:
            nonlocal client_gone
            message = await receive()
            if message["type"] == "http.disconnect":
                client_gone = True
            return message

        self.metrics.http_in_flight.inc()
        try:
            await self.app(scope, receive_disconnect, send_status)
        finally:
            self.metrics.http_in_flight.dec()
            # An answer that started keeps its status; none at all is a 500, or a 499 when the client left.
            code = status if status is not None else CLIENT_CLOSED if client_gone else 500
            self.metrics.observe_http(
                route_template(scope), scope.get("method", ""), code, time.perf_counter() - started
            )

    def __repr__(self) -> str:
        return f"<HttpMetricsMiddleware {self.metrics!r}>"
