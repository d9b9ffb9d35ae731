"""OpenTelemetry tracing: optional (``pip install 'tubemq-gateway[otel]'``) and off unless configured.

With ``tracing.enabled`` the runtime calls :func:`configure`: a tracer provider of our own (the process-wide
OpenTelemetry globals are left alone), spans exported in batches by OTLP over HTTP (the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and ``..._HEADERS`` variables apply)
or printed (``exporter=console``), sampled parent-based with ``tracing.sample_ratio`` for new traces.

What is traced:

* every HTTP request (``gateway/api/tracing.py``) and gRPC call (``gateway/grpc/tracing.py``) as a SERVER
  span that continues the caller's W3C ``traceparent`` (and ``tracestate``); named ``METHOD /route/template``
  or the gRPC method, with the route template, method and status code as attributes;
* inside it, the use cases of the service layer: ``publish <topic>`` (PRODUCER), ``poll <group>``
  (CONSUMER) and ``commit <group>`` (CLIENT), with the OpenTelemetry messaging attributes
  ``messaging.system=tubemq``, ``messaging.destination.name`` (topic), ``messaging.consumer.group.name``
  (group), ``messaging.operation.type`` and ``messaging.batch.message_count``.

Never recorded: URL paths (they hold consumer instance ids), instance ids, client ids, keys, values,
attributes, credentials and headers. When tracing is off, :func:`span` is one global read and a shared
no-op context manager; the ``opentelemetry`` packages are not even imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "INSTALL_HINT",
    "TracingUnavailable",
    "check_available",
    "configure",
    "enabled",
    "extract",
    "server_span",
    "shutdown",
    "span",
]

INSTALL_HINT = "install the extra: pip install 'tubemq-gateway[otel]'"
_NAME = "tubemq-gateway"

_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_NOOP = contextlib.nullcontext()


class TracingUnavailable(RuntimeError):
    """``tracing.enabled`` without the OpenTelemetry packages (or an unknown exporter)."""


def enabled() -> bool:
    return _tracer is not None


def check_available(exporter: str = "otlp") -> None:
    """Raise :class:`TracingUnavailable` (saying what to install) unless tracing with ``exporter`` can
    start: checked by ``serve`` before it listens."""
    try:
        import opentelemetry.sdk.trace

        if exporter == "otlp":
            import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError as exc:
        raise TracingUnavailable(f"tracing.enabled needs OpenTelemetry ({exc}); {INSTALL_HINT}") from None


def configure(
    *,
    exporter: str = "otlp",
    service_name: str = _NAME,
    sample_ratio: float = 1.0,
    provider: TracerProvider | None = None,
) -> None:
    """Start tracing. ``provider`` (tests: one with an in-memory exporter) replaces the one built here."""
    global _tracer, _provider
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        raise TracingUnavailable(f"tracing.enabled needs OpenTelemetry ({exc}); {INSTALL_HINT}") from None
    if provider is None:
        span_exporter: SpanExporter
        if exporter == "console":
            span_exporter = ConsoleSpanExporter()
        elif exporter == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:
                raise TracingUnavailable(f"the OTLP exporter is missing ({exc}); {INSTALL_HINT}") from None
            span_exporter = OTLPSpanExporter()
        else:
            raise TracingUnavailable(f"tracing.exporter {exporter!r} is not one of otlp, console")
        provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}),
            sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
        )
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
    _provider = provider
    _tracer = provider.get_tracer(_NAME)


def shutdown() -> None:
    """Stop tracing: flush and close the provider built by :func:`configure`."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def span(name: str, kind: str, attributes: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """A child span of the current one (``kind``: ``producer``, ``consumer``, ``client``, ``internal``),
    or a no-op while tracing is off. An exception escaping it is recorded and sets the status to error."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    from opentelemetry.trace import SpanKind

    return tracer.start_as_current_span(name, kind=SpanKind[kind.upper()], attributes=dict(attributes))


def extract(carrier: Mapping[str, str]) -> Context | None:
    """The caller's context from W3C ``traceparent``/``tracestate`` in ``carrier`` (lower-case keys)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier)


@contextlib.contextmanager
def server_span(
    name: str, carrier: Mapping[str, str], attributes: Mapping[str, Any]
) -> Iterator[Span | None]:
    """A SERVER span continuing the caller's trace (see :func:`extract`); None while tracing is off."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    with tracer.start_as_current_span(
        name, context=extract(carrier), kind=SpanKind.SERVER, attributes=dict(attributes)
    ) as current:
        yield current
