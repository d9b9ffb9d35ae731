"""Gateway settings: environment variables (prefix ``TUBEMQ_GATEWAY_``), an optional file, and CLI flags.

Nested groups use ``__`` in variable names, e.g. ``TUBEMQ_GATEWAY_PRODUCER__SEND_TIMEOUT=5``. Every knob
and its default is listed in docs/configuration.md. Only the adapters and the app import this module; the
client core takes plain constructor arguments.

The settings groups live by job in :mod:`.messaging` (the TubeMQ side), :mod:`.edge` (listeners, limits and
security) and :mod:`.operations` (running the process); this module gathers them into :class:`Settings` and
re-exports every name, so ``from gateway.config import ...`` takes any of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.config.edge import (
    CORS_EXPOSED_HEADERS,
    CORS_REQUEST_HEADERS,
    AdminSettings,
    AuthSettings,
    CorsSettings,
    GrpcSettings,
    HttpSettings,
    IdempotencySettings,
    JwtSettings,
    LimitSettings,
    RateLimitOverride,
    RateLimitSettings,
    TlsSettings,
    json_or_comma_list,
)
from gateway.config.messaging import (
    MIN_ID_SECRET,
    ConsumerSettings,
    EmbeddedSettings,
    PoolSettings,
    ProducerSettings,
    TubeMQAuthSettings,
    TubeMQSettings,
    TubeMQTLSSettings,
)
from gateway.config.operations import (
    CompressionSettings,
    ConsoleSettings,
    MetricsSettings,
    ShutdownSettings,
    SupervisorSettings,
    TracingSettings,
)
from gateway.config.push import PushSettings

__all__ = [
    "CORS_EXPOSED_HEADERS",
    "CORS_REQUEST_HEADERS",
    "MIN_ID_SECRET",
    "OPEN_MODE_HOST",
    "AdminSettings",
    "AuthSettings",
    "CompressionSettings",
    "ConsoleSettings",
    "ConsumerSettings",
    "CorsSettings",
    "EmbeddedSettings",
    "GrpcSettings",
    "HttpSettings",
    "IdempotencySettings",
    "JwtSettings",
    "LimitSettings",
    "MetricsSettings",
    "PoolSettings",
    "ProducerSettings",
    "PushSettings",
    "RateLimitOverride",
    "RateLimitSettings",
    "Settings",
    "ShutdownSettings",
    "SupervisorSettings",
    "TlsSettings",
    "TracingSettings",
    "TubeMQAuthSettings",
    "TubeMQSettings",
    "TubeMQTLSSettings",
    "json_or_comma_list",
    "load_settings",
]

#: where the HTTP (and gRPC) listener binds in open mode when no address is given: this machine only
OPEN_MODE_HOST = "127.0.0.1"


class Settings(BaseSettings):
    """All gateway settings. ``masters`` empty means: run on the embedded cluster."""

    model_config = SettingsConfigDict(
        env_prefix="TUBEMQ_GATEWAY_",
        env_nested_delimiter="__",
        env_file=None,
        extra="ignore",
    )

    masters: str = Field("", description="TubeMQ master addresses host:port[,host:port...]; empty = embedded")
    http_host: str = Field(
        "",
        description="HTTP listen address; empty: 127.0.0.1 with auth.mode=open (an open gateway is reachable "
        "from this machine only unless you say otherwise), else 0.0.0.0",
    )
    http_port: int = Field(8080, ge=0, le=65535, description="HTTP listen port")
    log_level: str = Field("info", description="log level: debug, info, warning, error")
    log_format: Literal["json", "text"] = Field("json", description="json: one object per line; text")
    access_log_sample: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="fraction of HTTP answers below 400 that get an access log line (4xx/5xx always do)",
    )
    workers: int = Field(
        0,
        ge=0,
        le=256,
        description="worker processes serving the same ports (serve only); 0 = the CPUs this process may "
        "use (CPU affinity and the cgroup CPU limit, so a pod's CPU limit), at least 1",
    )
    pool: PoolSettings = PoolSettings()
    producer: ProducerSettings = ProducerSettings()
    limits: LimitSettings = LimitSettings()
    embedded: EmbeddedSettings = EmbeddedSettings()
    grpc: GrpcSettings = GrpcSettings()
    consumers: ConsumerSettings = ConsumerSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    metrics: MetricsSettings = MetricsSettings()
    console: ConsoleSettings = ConsoleSettings()
    tubemq: TubeMQSettings = TubeMQSettings()
    tls: TlsSettings = TlsSettings()
    admin: AdminSettings = AdminSettings()
    http: HttpSettings = HttpSettings()

    rate_limits: RateLimitSettings = RateLimitSettings()
    idempotency: IdempotencySettings = IdempotencySettings()
    cors: CorsSettings = CorsSettings()
    compression: CompressionSettings = CompressionSettings()
    tracing: TracingSettings = TracingSettings()
    auth: AuthSettings = AuthSettings()
    supervisor: SupervisorSettings = SupervisorSettings()
    push: PushSettings = PushSettings()

    def advertised_url(self) -> str:
        """The base URL other replicas use to reach this one: ``consumers.advertised_url``, else derived
        from the listen address (this host's IPv4 address for a wildcard)."""
        if self.consumers.advertised_url:
            return self.consumers.advertised_url
        scheme = "https" if self.tls.enabled else "http"
        host = self.http_host
        if host in ("0.0.0.0", "::", ""):
            from gateway.tubemq.wire import local_ipv4

            host = local_ipv4()
        elif ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.http_port}"

    @field_validator("masters")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    @model_validator(mode="after")
    def _listen_address(self) -> Settings:
        """No listen address given: loopback when nobody is authenticated (auth.mode=open), every address
        otherwise."""
        if not self.http_host.strip():
            self.http_host = OPEN_MODE_HOST if self.auth.mode == "open" else "0.0.0.0"
        return self

    @model_validator(mode="after")
    def _console_listener(self) -> Settings:
        if self.console.enabled and self.console.listener == "admin" and self.admin.port is None:
            raise ValueError("console.listener admin needs an admin listener: set admin.port")
        return self


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from the environment, then ``config_file`` (JSON) if given, then explicit overrides."""
    base: dict[str, Any] = {}
    if config_file is not None:
        data = json.loads(config_file.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{config_file}: expected a JSON object of settings")
        base.update(data)
    base.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**base)
