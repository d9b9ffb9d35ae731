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

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.observability.access_log import route_template
from gateway.observability.histograms import add, observe_many
from gateway.observability.logging import CLIENT_CLOSED
from gateway.observability.metric_limits import (
    HTTP_METHODS,
    LONG_HTTP_ROUTES,
    OVERFLOW,
    LabelCap,
    PairCap,
    series_bound,
)
from gateway.observability.metrics_events import EventMetrics
from gateway.observability.metrics_families import PREFIX, MetricFamilies
from gateway.observability.metrics_grpc import LONG_GRPC_METHODS
from gateway.tubemq.events import EventBus, Subscription

__all__ = [
    "CONTENT_TYPE_LATEST",
    "LONG_GRPC_METHODS",
    "OVERFLOW",
    "PREFIX",
    "GatewayMetrics",
    "HttpMetricsMiddleware",
    "LabelCap",
    "PairCap",
    "request_finished",
    "series_bound",
]


class GatewayMetrics(MetricFamilies):
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
        super().__init__(
            registry,
            max_topics=max_topics,
            max_groups=max_groups,
            max_group_topics=max_group_topics,
            process_metrics=process_metrics,
        )
        self._http_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

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

    def bind_prefetch(self, held: Callable[[], int], cap: Callable[[], int]) -> None:
        """Read what the worker's consumer instances hold fetched ahead, and its cap, at scrape time."""
        self.consumer_prefetch_bytes.set_function(lambda: float(held()))
        self.consumer_prefetch_cap_bytes.set_function(lambda: float(cap()))

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
        add(children[0])
        observe_many(children[1], seconds)

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
            request_finished(self.metrics, scope, status, client_gone, started)

    def __repr__(self) -> str:
        return f"<HttpMetricsMiddleware {self.metrics!r}>"


def request_finished(
    metrics: GatewayMetrics, scope: Scope, status: int | None, client_gone: bool, started: float
) -> None:
    """Count a request that began (``http_in_flight`` raised) at ``started`` (``perf_counter``) and ended:
    ``status`` of its answer, None when none started (``client_gone``: the client had left)."""
    metrics.http_in_flight.dec()
    # An answer that started keeps its status; none at all is a 500, or a 499 when the client left.
    code = status if status is not None else CLIENT_CLOSED if client_gone else 500
    metrics.observe_http(route_template(scope), scope.get("method", ""), code, time.perf_counter() - started)
