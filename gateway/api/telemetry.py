"""The app's telemetry wiring: metrics fed by the runtime's events, the event logger, the request-id and
access-log middleware, the HTTP metrics middleware, and ``GET /metrics`` unless the admin listener serves it.

``create_app`` calls :func:`install_telemetry` once; the metrics live on ``app.state.metrics``.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import FastAPI

from gateway.api.routes_metrics import router
from gateway.observability.access_log import AccessLog
from gateway.observability.logging import EventLogger, RequestIdMiddleware, redact_library_logs
from gateway.observability.metrics import GatewayMetrics, HttpMetricsMiddleware
from gateway.service.prefetch_budget import PrefetchBudget
from gateway.tubemq.events import EventBus
from gateway.tubemq.net import ConnectionPool

__all__ = ["ObservedRuntime", "install_telemetry"]


class ObservedRuntime(Protocol):
    """What observability reads from the runtime (``gateway.runtime.Runtime`` has it)."""

    events: EventBus
    pool: ConnectionPool | None
    draining: bool

    def readiness(self) -> tuple[bool, dict[str, object]]: ...


def _prefetch(runtime: ObservedRuntime) -> PrefetchBudget:
    """The worker's fetch-ahead budget (an empty one before the consumer service starts, or where the
    runtime has none)."""
    consumers = getattr(runtime, "consumers", None)
    return consumers.prefetch_budget if consumers is not None else _NO_PREFETCH


_NO_PREFETCH = PrefetchBudget(0)


def install_telemetry(
    app: FastAPI,
    runtime: ObservedRuntime,
    *,
    max_topics: int = 200,
    max_groups: int = 200,
    max_group_topics: int = 500,
    serve_metrics: bool = True,
    access_log_sample: float = 1.0,
) -> GatewayMetrics:
    """Subscribe fresh metrics and the event logger to ``runtime.events``, add the request-id and HTTP
    metrics middlewares, and serve ``/metrics`` (unless ``serve_metrics`` is false: the admin listener
    serves it). Returns the metrics (also ``app.state.metrics``)."""
    gauges = GatewayMetrics(max_topics=max_topics, max_groups=max_groups, max_group_topics=max_group_topics)
    gauges.subscribe(runtime.events)
    gauges.bind_readiness(lambda: runtime.readiness()[0], lambda: runtime.draining)
    gauges.bind_in_flight(lambda: runtime.pool.stats().in_flight if runtime.pool is not None else 0)
    gauges.bind_prefetch(lambda: _prefetch(runtime).held, lambda: _prefetch(runtime).cap)
    EventLogger().subscribe(runtime.events)
    redact_library_logs()  # the forwarder's HTTP client logs URLs that name consumer instances
    app.state.metrics = gauges
    # Added last = outermost: the request id is set before the metrics middleware and the app run.
    app.add_middleware(HttpMetricsMiddleware, metrics=gauges)
    access = app.state.access_log = AccessLog(sample=access_log_sample)
    app.add_middleware(RequestIdMiddleware, access=access)
    if serve_metrics:
        app.include_router(router)
    return gauges
