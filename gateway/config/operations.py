"""Settings of running the process: shutdown, the worker supervisor, the web console, metrics, compression
of answers and tracing. Part of :mod:`gateway.config`, which re-exports every name.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, model_validator

__all__ = [
    "CompressionSettings",
    "ConsoleSettings",
    "MetricsSettings",
    "ShutdownSettings",
    "SupervisorSettings",
    "TracingSettings",
]


class ShutdownSettings(BaseModel):
    grace_period: float = Field(
        25.0, gt=0, description="seconds from SIGTERM to exit: drain, finish requests, release, close"
    )
    drain_delay: float = Field(
        0.0, ge=0, description="seconds served unready after SIGTERM before the listener closes"
    )

    @model_validator(mode="after")
    def _delay_within_grace(self) -> ShutdownSettings:
        if self.drain_delay >= self.grace_period:
            raise ValueError("shutdown.drain_delay must be shorter than shutdown.grace_period")
        return self


class SupervisorSettings(BaseModel):
    """How ``serve --workers N`` restarts a worker that exits on its own (gateway.workers.restarts)."""

    restart_backoff: float = Field(
        1.0,
        gt=0,
        description="seconds before restarting a worker whose last run failed soon after start; "
        "doubles with each such failure in a row",
    )
    restart_backoff_max: float = Field(30.0, gt=0, description="the longest wait before a restart")
    max_restarts: int = Field(
        0,
        ge=0,
        description="failures in a row (each soon after its start) of one worker after which the replica "
        "stops with exit status 1; 0 = no limit (the replica stops only when every worker is failing)",
    )


class ConsoleSettings(BaseModel):
    """The web console at ``/console`` (gateway/api/console.py)."""

    enabled: bool = Field(True, description="serve the web console at /console")
    listener: Literal["main", "admin"] = Field(
        "main",
        description="main: on the API's listener; admin: on the admin listener (admin.port), calling the API "
        "at console.api_url (list the admin listener's origin in cors.allow_origins)",
    )
    api_url: str | None = Field(
        None,
        description="with listener admin: the API's base URL as browsers reach it, e.g. https://gw.example.com",
    )

    @model_validator(mode="after")
    def _api_url_for_admin(self) -> ConsoleSettings:
        if self.listener == "admin":
            url = self.api_url or ""
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
                raise ValueError(
                    "console.listener admin needs console.api_url: the API's http(s) base URL as browsers "
                    f"reach it (got {url!r})"
                )
        return self


class MetricsSettings(BaseModel):
    max_topics: int = Field(200, ge=1, description="distinct topic label values before __overflow__")
    max_groups: int = Field(200, ge=1, description="distinct consumer group label values before __overflow__")
    max_group_topics: int = Field(
        500,
        ge=1,
        description="distinct (group, topic) label pairs of the consume metrics before __overflow__",
    )


class CompressionSettings(BaseModel):
    """gzip of large, complete JSON answers (gateway/api/compression.py)."""

    enabled: bool = Field(True, description="gzip JSON answers for clients that send Accept-Encoding: gzip")
    min_bytes: int = Field(
        1024, ge=0, description="smallest JSON answer (bytes) that is compressed; smaller ones are sent as is"
    )
    level: int = Field(
        1,
        ge=1,
        le=9,
        description="gzip level: 1 fastest (ISA-L's deflate: a twelfth of zlib's level 1 CPU on a poll "
        "answer of random values, for a tenth more bytes), 2-9 zlib's levels (level 6 takes 1.7-4.5x zlib's "
        "level 1 CPU for bodies about a fifth smaller), 9 smallest",
    )


class TracingSettings(BaseModel):
    """OpenTelemetry tracing (gateway/observability/tracing.py); needs the ``otel`` extra."""

    enabled: bool = Field(
        False, description="trace requests and publish/poll/commit (pip install 'tubemq-gateway[otel]')"
    )
    exporter: Literal["otlp", "console"] = Field(
        "otlp",
        description="otlp: OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318); "
        "console: print spans",
    )
    service_name: str = Field("tubemq-gateway", min_length=1, description="the service.name resource")
    sample_ratio: float = Field(
        1.0, ge=0.0, le=1.0, description="share of new traces sampled; a caller's sampled flag is followed"
    )
