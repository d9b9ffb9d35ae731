"""Tracing test helper: the gateway's tracing on, its spans collected by the SDK's in-memory exporter (needs
the ``otel`` extra: callers skip without it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.observability import tracing


@contextmanager
def in_memory_spans() -> Iterator[InMemorySpanExporter]:
    """Tracing configured with an in-memory exporter until the block ends (then shut down again)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider=provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()
