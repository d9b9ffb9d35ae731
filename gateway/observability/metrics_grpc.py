"""gRPC server metrics from the interceptor's call events, with the names and labels of go-grpc-prometheus
(``grpc_server_*``; ``grpc_type``, ``grpc_service``, ``grpc_method``, ``grpc_code`` in Go's spelling)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.observability.grpc_events import (
    CLIENT_STREAM,
    SERVER_STREAM,
    UNARY,
    GrpcCallFinished,
    GrpcCallStarted,
    GrpcStreamMessages,
)

if TYPE_CHECKING:
    from gateway.observability.metrics_families import MetricFamilies

__all__ = ["LONG_GRPC_METHODS", "GrpcMetrics", "go_code"]

#: Unary gRPC methods that long-poll; every streaming method is long-lived too.
LONG_GRPC_METHODS = frozenset({"Poll"})


def go_code(name: str) -> str:
    """A gRPC status code name as Go spells it (``INVALID_ARGUMENT`` -> ``InvalidArgument``, ``CANCELLED``
    -> ``Canceled``): the ``grpc_code`` values of go-grpc-prometheus, which stock dashboards and alerts
    match."""
    if name == "OK":
        return name
    if name == "CANCELLED":
        return "Canceled"
    return "".join(word.capitalize() for word in name.split("_"))


@dataclass(slots=True)
class _GrpcSeries:
    """The label children of one gRPC method (resolved once: calls are a hot path)."""

    started: Any
    duration: Any  # the unary or the long-lived histogram's child
    received: Any
    sent: Any
    labels: dict[str, str]
    handled: dict[str, Any]  # grpc_code -> child


class GrpcMetrics:
    """The handlers of the gRPC call events; label children are resolved once per method (a hot path)."""

    def __init__(self, metrics: MetricFamilies) -> None:
        self.m = metrics
        self._cache: dict[tuple[str, str], _GrpcSeries] = {}

    def __repr__(self) -> str:
        return f"<GrpcMetrics methods={len(self._cache)}>"

    def _series(self, method: str, grpc_type: str) -> _GrpcSeries:
        """Full method names come from the services we serve (bounded); the request id is never a label."""
        series = self._cache.get((method, grpc_type))
        if series is None:
            service, _, name = method.lstrip("/").rpartition("/")
            labels = {"grpc_type": grpc_type, "grpc_service": service or "unknown", "grpc_method": name}
            long_lived = grpc_type != UNARY or name in LONG_GRPC_METHODS
            duration = self.m.grpc_long_duration if long_lived else self.m.grpc_handling
            series = _GrpcSeries(
                self.m.grpc_started.labels(**labels),
                duration.labels(**labels),
                self.m.grpc_msg_received.labels(**labels),
                self.m.grpc_msg_sent.labels(**labels),
                labels,
                {},
            )
            self._cache[(method, grpc_type)] = series
        return series

    def started(self, e: GrpcCallStarted) -> None:
        self._series(e.method, e.grpc_type).started.inc()

    def finished(self, e: GrpcCallFinished) -> None:
        series = self._series(e.method, e.grpc_type)
        handled = series.handled.get(e.code)
        if handled is None:
            handled = self.m.grpc_handled.labels(**series.labels, grpc_code=go_code(e.code))
            series.handled[e.code] = handled
        handled.inc()
        series.duration.observe(e.duration)
        # The one request and the one answer of unary sides (streamed sides report GrpcStreamMessages).
        if e.grpc_type in (UNARY, SERVER_STREAM):
            series.received.inc()
        if e.grpc_type in (UNARY, CLIENT_STREAM) and e.code == "OK":
            series.sent.inc()

    def messages(self, e: GrpcStreamMessages) -> None:
        series = self._series(e.method, e.grpc_type)
        if e.received:
            series.received.inc(e.received)
        if e.sent:
            series.sent.inc(e.sent)
