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
``grpc_server_handled_total``, ``grpc_server_handling_seconds``; labels ``grpc_type``, ``grpc_service``,
``grpc_method``, ``grpc_code`` with Go's code names: ``OK``, ``Canceled``, ``InvalidArgument``...).
Long-lived requests (HTTP long polls and SSE streams, gRPC streams and long polls) are timed in histograms
of their own (``*_long_*_duration_seconds``, buckets up to an hour), so the request latency histograms hold
only requests whose time is the gateway's.

Labels are bounded: route templates, methods, codes, outcomes, reasons; node addresses and broker ids
(bounded by the cluster, and capped at :data:`MAX_NODES`); topics, consumer groups and (group, topic)
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
from gateway.observability.logging import route_template
from gateway.observability.metrics_events import LONG_GRPC_METHODS, EventMetrics
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
OVERFLOW: Final = "__overflow__"
#: HTTP requests other than long polls and streams (range reads of big batches may take seconds).
HTTP_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Unary gRPC calls other than long polls.
GRPC_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Long polls (up to their timeout, 30 s by default) and streams (minutes to hours).
LONG_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0)
#: One TubeMQ request or send attempt: loopback answers take well under a millisecond.
RPC_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HTTP_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
#: (method, route template) of the HTTP requests that last as long as the client lets them: the long poll
#: and the Server-Sent Events stream.
LONG_HTTP_ROUTES: Final = frozenset(
    {
        ("GET", "/v1/consumers/{group}/instances/{instance_id}/messages"),
        ("GET", "/v1/consumers/{group}/instances/{instance_id}/stream"),
    }
)
#: The status code of an HTTP request whose client went away before any answer was sent (as nginx logs).
CLIENT_CLOSED: Final = 499
#: Distinct TubeMQ node addresses and broker ids kept as label values (a cluster has far fewer).
MAX_NODES: Final = 256


class LabelCap:
    """Passes the first ``limit`` distinct values of a label through; later ones become ``__overflow__``."""

    def __init__(self, label: str, limit: int, overflow: Counter) -> None:
        if limit < 1:
            raise ValueError(f"the {label} label cap must be at least 1, not {limit}")
        self.label = label
        self.limit = limit
        self._seen: set[str] = set()
        self._overflow = overflow.labels(label=label)

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            self._overflow.inc()
            return OVERFLOW
        self._seen.add(value)
        return value

    def __repr__(self) -> str:
        return f"<LabelCap {self.label} {len(self._seen)}/{self.limit}>"


class PairCap:
    """Caps the (group, topic) pairs that get series of their own: past ``limit`` distinct pairs (of the
    already capped labels), new ones become ``(__overflow__, __overflow__)``. Without it the worst case is
    ``max_groups * max_topics`` pairs, each with about 16 series."""

    def __init__(self, limit: int, overflow: Counter) -> None:
        if limit < 1:
            raise ValueError(f"the group/topic pair cap must be at least 1, not {limit}")
        self.limit = limit
        self._seen: set[tuple[str, str]] = set()
        self._overflow = overflow.labels(label="group_topic")

    def __call__(self, group: str, topic: str) -> tuple[str, str]:
        pair = (group, topic)
        if pair in self._seen:
            return pair
        if len(self._seen) >= self.limit:
            self._overflow.inc()
            return OVERFLOW, OVERFLOW
        self._seen.add(pair)
        return pair

    def __repr__(self) -> str:
        return f"<PairCap {len(self._seen)}/{self.limit}>"


def series_bound(
    *, max_topics: int = 200, max_groups: int = 200, max_group_topics: int = 500, http_routes: int = 24
) -> int:
    """The most series the gateway's own families can reach on one replica (process and Python families
    excluded: a fixed few dozen). ``http_routes`` counts the app's route templates plus ``<unmatched>``;
    HTTP codes are bounded by what the gateway answers (counted here as 24 distinct codes per route and
    method, far more than any route uses). tests/test_metrics_cardinality.py hammers every label and
    checks the real count stays below this."""
    topics, groups, pairs = max_topics + 1, max_groups + 1, max_group_topics + 1  # + __overflow__
    fetch_outcomes, rebalance_events, rpc_methods, rpc_outcomes = 10, 8, 40, 6
    http_methods, http_codes, grpc_methods, grpc_codes = len(HTTP_METHODS) + 1, 24, 16, 17
    histogram = len(HTTP_BUCKETS) + 3  # buckets, +Inf, _sum, _count
    long_histogram = len(LONG_BUCKETS) + 3
    per_topic = 2 + 3  # published messages and bytes, publish errors by reason
    # polled messages and bytes, redeliveries, commits (ok, error), lag, fetches by outcome
    per_pair = 2 + 1 + 2 + 1 + fetch_outcomes
    per_group = 3 + rebalance_events  # instances, partitions, register failures, rebalances
    per_node = 2  # open links, connect failures
    http = http_routes * http_methods * (http_codes + histogram) + 2 * http_methods * long_histogram
    grpc = grpc_methods * (1 + grpc_codes + len(GRPC_BUCKETS) + 3 + long_histogram)
    tubemq = rpc_methods * (rpc_outcomes + len(RPC_BUCKETS) + 3)
    fixed = 200  # send and fetch time by outcome, link closes, shield reasons, master sessions, gauges...
    nodes = (MAX_NODES + 1) * per_node + (MAX_NODES + 1)  # + broker_shielded per broker id
    return topics * per_topic + pairs * per_pair + groups * per_group + nodes + http + grpc + tubemq + fixed


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
        self.http_requests.labels(route=route, method=method, code=str(status)).inc()
        histogram = self.http_long_duration if (method, route) in LONG_HTTP_ROUTES else self.http_duration
        histogram.labels(route=route, method=method).observe(seconds)

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
