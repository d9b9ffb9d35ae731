"""Settings of the gateway's edge: request limits, the gRPC listener, TLS of the listeners, proxies, the
admin listener, rate limits, CORS and authentication (API keys, JWT, mTLS). Part of :mod:`gateway.config`,
which re-exports every name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

__all__ = [
    "CORS_EXPOSED_HEADERS",
    "CORS_REQUEST_HEADERS",
    "AdminSettings",
    "AuthSettings",
    "CorsSettings",
    "GrpcSettings",
    "HttpSettings",
    "IdempotencySettings",
    "JwtSettings",
    "LimitSettings",
    "RateLimitOverride",
    "RateLimitSettings",
    "TlsSettings",
    "json_or_comma_list",
]

#: What a cross-origin page may send and read by default (``cors.allow_headers`` / ``cors.expose_headers``).
CORS_REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "X-API-Key",
    "X-Request-ID",
    "Last-Event-ID",
    "X-TubeMQ-Key",
    "X-TubeMQ-Partition",
    "X-TubeMQ-Attributes",
    "X-TubeMQ-Stream-Id",
    "X-TubeMQ-Msg-Time",
    "Idempotency-Key",
)
CORS_EXPOSED_HEADERS = (
    "X-Request-ID",
    "Retry-After",
    "RateLimit",
    "RateLimit-Policy",
    "Location",
    "WWW-Authenticate",
    "Idempotent-Replayed",
)


def json_or_comma_list(value: Any) -> Any:
    """A list setting as an environment variable may give it: a JSON list or comma-separated items."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


class LimitSettings(BaseModel):
    max_batch_messages: int = Field(1000, ge=1, description="messages per publish request")
    max_request_bytes: int = Field(
        21 * 1024 * 1024,
        ge=1024,
        description="bytes per HTTP publish request body (a gRPC message: grpc.max_message_bytes): the "
        "largest message a TubeMQ broker accepts (20 MiB) sent raw, plus 1 MiB; a body is held whole while "
        "it is parsed",
    )
    publish_concurrency: int = Field(256, ge=1, description="sends in flight per publish request")
    max_control_body_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="bytes per HTTP request body of the routes other than publish (consumer creation, "
        "commits)",
    )
    max_inflight_publish_bytes: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description="publish body bytes held at once across all requests (0 = no cap); above: 503 + "
        "Retry-After",
    )
    max_concurrent_requests: int = Field(
        1024,
        ge=0,
        description="HTTP requests in progress at once, probes aside (0 = no cap); above: 503 + Retry-After",
    )
    max_concurrent_per_caller: int | None = Field(
        None,
        ge=0,
        description="requests and gRPC calls one principal (or anonymous address) may have in progress "
        "at once, HTTP and gRPC together; unset: a quarter of max_concurrent_requests; 0 = no share; "
        "above: 503 / UNAVAILABLE",
    )
    body_timeout: float = Field(
        30.0, gt=0, description="seconds the gateway waits for the next part of a request body; then 408"
    )
    min_body_rate: int = Field(
        16 * 1024,
        ge=1,
        description="bytes per second a request body must average: the whole body must have arrived "
        "within body_timeout + its size / min_body_rate seconds, else 408 (a client trickling a body "
        "cannot hold a request slot for longer)",
    )
    max_header_bytes: int = Field(
        64 * 1024, ge=4096, description="bytes of an HTTP request's line and headers; above: 431"
    )
    max_headers: int = Field(100, ge=10, description="headers of an HTTP request; above: 431")
    header_timeout: float = Field(
        10.0,
        gt=0,
        description="seconds from a connection (or its previous answer) to the end of the next request's "
        "headers; then 408 and close (a connection that sent nothing is closed)",
    )
    keep_alive_timeout: float = Field(
        5.0, gt=0, description="seconds an idle keep-alive connection stays open (uvicorn timeout_keep_alive)"
    )


class GrpcSettings(BaseModel):
    enabled: bool = Field(True, description="serve the gRPC API next to HTTP, in the same process")
    host: str | None = Field(None, description="gRPC listen address (default: http_host)")
    port: int = Field(9090, ge=0, le=65535, description="gRPC listen port")
    stream_window: int = Field(
        2000, ge=1, description="messages in flight per PublishStream before the gateway stops reading"
    )
    subscribe_step: float = Field(
        1.0, gt=0, description="seconds a Subscribe waits for messages before it checks whether to end"
    )
    health_interval: float = Field(1.0, gt=0, description="seconds between readiness looks of a health Watch")
    max_health_watches: int = Field(
        64,
        ge=1,
        description="health Watch streams open at once (they need no credentials); above: RESOURCE_EXHAUSTED",
    )
    max_streams_per_connection: int = Field(
        100,
        ge=1,
        description="concurrent calls one HTTP/2 connection may open (SETTINGS_MAX_CONCURRENT_STREAMS)",
    )
    max_connections: int = Field(
        1000, ge=1, description="gRPC connections open at once on this process's port; more are refused"
    )
    max_message_bytes: int = Field(
        4 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes of one gRPC request message, on the wire and once inflated (grpc's own default); "
        "larger ones are RESOURCE_EXHAUSTED, refused from their length prefix before they are received. "
        "grpcio holds about four copies of a message while it reads it: send larger batches as several "
        "PublishStream messages, larger values over REST",
    )


class TlsSettings(BaseModel):
    """TLS of the gateway's own listeners (HTTP, gRPC and the admin listener)."""

    cert_file: Path | None = Field(
        None, description="PEM certificate (chain) of the HTTP and gRPC listeners; set with key_file for TLS"
    )
    key_file: Path | None = Field(None, description="PEM private key of cert_file")
    client_ca_file: Path | None = Field(
        None, description="PEM CA certificates that client certificates are verified against"
    )
    client_auth: Literal["none", "optional", "required"] = Field(
        "none",
        description="client certificates: none (not asked for), optional (verified when sent; gRPC: not "
        "asked), required",
    )

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    @model_validator(mode="after")
    def _consistent(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file go together: set both for TLS, or neither")
        if self.client_auth != "none" and (self.client_ca_file is None or self.cert_file is None):
            raise ValueError(
                f"tls.client_auth={self.client_auth} needs tls.client_ca_file (the CA client certificates "
                "are verified against) and TLS itself (tls.cert_file, tls.key_file)"
            )
        return self


class HttpSettings(BaseModel):
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1", "::1"],
        description='peers (IP addresses, CIDR networks; "*" = any) whose Forwarded, X-Forwarded-For, '
        "-Proto, -Host, -Port, -Prefix and Host headers are believed: the client address, and the URLs the "
        "API answers (baseUrl, Location); JSON list or comma-separated; empty = none",
    )
    direct_publish: bool = Field(
        True,
        description="answer the usual publish (one message or a batch, with a Content-Length body) in the "
        "HTTP protocol itself, below ASGI, through the same steps as the ASGI way: the same answers, at less "
        "CPU per request; false = every publish through ASGI",
    )
    direct_poll: bool = Field(
        True,
        description="answer the usual poll (GET .../instances/{id}/messages without a body, with the query "
        "parameters read as the route reads them) in the HTTP protocol itself, below ASGI, through the same "
        "steps as the ASGI way: the same answers, at less CPU per request; false = every poll through ASGI",
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return json_or_comma_list(value)

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        import ipaddress

        for entry in value:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"http.trusted_proxies entry {entry!r} is not an IP address or CIDR network "
                    '(host names are not resolved; "*" trusts every peer)'
                ) from None
        return value


class AdminSettings(BaseModel):
    """Where /metrics, /docs, /redoc and /openapi.json are served."""

    host: str = Field(
        "127.0.0.1",
        description="admin listen address: loopback unless configured (/metrics, /docs need no TLS client "
        "certificate from a scraper on the host; set 0.0.0.0 or a pod address for a scraper elsewhere: the "
        "Helm chart sets 0.0.0.0 for Prometheus in another pod)",
    )
    port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="admin listen port for /metrics, /docs, /redoc, /openapi.json; unset: they are on the "
        "main HTTP listener; no authentication there: keep it private",
    )


class IdempotencySettings(BaseModel):
    """Publishes with an ``Idempotency-Key`` (docs/idempotency.md)."""

    window_seconds: float = Field(
        86_400.0, gt=0, description="seconds a key's first answer is kept and replayed to its retries"
    )
    lease_seconds: float = Field(
        30.0,
        ge=1,
        description="seconds a key's reservation lasts unless its publish renews it (every third of it, "
        "while it runs): a process that died mid-publish frees its keys this long after",
    )
    max_keys_per_principal: int = Field(
        10_000, ge=1, description="keys one principal may hold in the store (429 past it)"
    )
    max_bytes_per_principal: int = Field(
        32 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes of keys and answers one principal may hold in the store (429 past it), so that "
        "no principal fills the store for the others",
    )
    max_store_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024 * 1024,
        description="bytes of keys and answers the replica's store holds at most (keyed publishes 503 "
        "past it)",
    )
    store_timeout: float = Field(
        2.0, gt=0, description="seconds a store call may wait for the store (then the keyed publish is 503)"
    )
    redis_url: str | None = Field(
        None,
        description="redis://host:6379/0 (rediss:// for TLS): keep the keys in this Redis, which every "
        "replica shares (needed with consumers.replicas above 1); unset: the replica's own SQLite database",
    )
    redis_password: SecretStr | None = Field(
        None, description="the Redis password (kept out of redis_url, e.g. from a Kubernetes Secret)"
    )
    redis_prefix: str = Field(
        "tubemq-gateway:idempotency:",
        min_length=1,
        description="prefix of every Redis key the gateway writes",
    )

    def password(self) -> str | None:
        """``redis_password`` in clear, for the Redis client (None: unset)."""
        return self.redis_password.get_secret_value() if self.redis_password is not None else None


class RateLimitOverride(BaseModel):
    """One principal's limits; a field left out takes the ``rate_limits`` default."""

    model_config = {"extra": "forbid"}

    publish_messages_per_second: float | None = Field(None, ge=0, description="messages/s; 0 = unlimited")
    publish_bytes_per_second: float | None = Field(None, ge=0, description="payload bytes/s; 0 = unlimited")
    burst_seconds: float | None = Field(None, gt=0, description="seconds of rate a burst may use at once")
    max_instances_per_principal: int | None = Field(None, ge=0, description="consumer instances; 0 = no cap")


class RateLimitSettings(BaseModel):
    publish_messages_per_second: float | None = Field(
        100_000,
        ge=0,
        description="messages each principal (each address when anonymous) may publish per "
        "second on this replica; 0 or null = unlimited",
    )
    publish_bytes_per_second: float | None = Field(
        256 * 1024 * 1024,
        ge=0,
        description="payload bytes (value + attributes) each principal may publish per second on this "
        "replica; 0 or null = unlimited",
    )
    burst_seconds: float = Field(
        2.0, gt=0, description="bucket size in seconds of rate: how far above the rate a burst may go"
    )
    max_instances_per_principal: int | None = Field(
        100, ge=0, description="consumer instances one principal may hold on this replica; 0 or null = no cap"
    )
    overrides: dict[str, RateLimitOverride] = Field(
        default_factory=dict,
        description="per-principal limits by principal as rules name it (api_key:NAME, jwt:SUBJECT, "
        'mtls:SUBJECT), JSON: {"api_key:alice": {"publish_messages_per_second": 1000}}; "anonymous" sets '
        "each anonymous address's limits",
    )
    max_tracked_callers: int = Field(
        10_000, ge=1, description="publish buckets kept in memory (least recently used dropped first)"
    )


class CorsSettings(BaseModel):
    allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description='origins browsers may call the API from, JSON list or comma-separated ("*" = any); '
        "empty = no CORS headers at all",
    )
    allow_headers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(CORS_REQUEST_HEADERS),
        description="request headers a cross-origin request may send",
    )
    expose_headers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(CORS_EXPOSED_HEADERS),
        description="response headers a cross-origin page may read",
    )
    max_age: int = Field(600, ge=0, description="seconds a browser may cache a preflight answer")

    @field_validator("allow_origins", "allow_headers", "expose_headers", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return json_or_comma_list(value)


class JwtSettings(BaseModel):
    issuer: str | None = Field(
        None,
        description="expected `iss` of bearer JWTs; JWTs are accepted once it, audience and jwks_url are set",
    )
    audience: list[str] = Field(
        default_factory=list,
        description="accepted `aud` values (one must match), a JSON list ('[\"tubemq-gateway\"]'); "
        "required with issuer",
    )
    jwks_url: str | None = Field(None, description="URL of the issuer's JSON Web Key Set (its `jwks_uri`)")
    algorithms: list[str] = Field(
        default_factory=lambda: ["RS256"],
        description="accepted signature algorithms (asymmetric only: RS*, PS*, ES*, EdDSA; never none "
        "or HS*)",
    )
    leeway: float = Field(30.0, ge=0, le=300, description="seconds of clock skew allowed on exp/nbf/iat")
    principal_claim: str = Field("sub", description="claim naming the principal")
    roles_claim: str | None = Field(
        None,
        description="claim holding role names (a list or a space-separated string; dots descend, e.g. "
        "realm_access.roles); scope and scp always count",
    )
    jwks_refresh_interval: float = Field(
        30.0, gt=0, description="fewest seconds between two JWKS fetches caused by unknown key ids"
    )
    jwks_max_age: float = Field(3600.0, gt=0, description="seconds a fetched JWKS is used before a refetch")
    jwks_timeout: float = Field(5.0, gt=0, description="seconds to fetch the JWKS")
    cache_size: int = Field(10_000, ge=1, description="verified tokens remembered until they expire")

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        allowed = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
        bad = [a for a in value if a not in allowed]
        if bad or not value:
            raise ValueError(
                f"auth.jwt.algorithms {bad or value} not allowed: give one or more of {sorted(allowed)} "
                "(JWKS keys are public keys, so `none` and HS* are refused)"
            )
        return value


class AuthSettings(BaseModel):
    mode: Literal["open", "required"] = Field(
        "open",
        description="open: no authentication, every caller is `anonymous` (local use only); required: "
        "every request but the health probes needs credentials and a rule allowing it",
    )
    api_keys_file: Path | None = Field(
        None, description='JSON file of hashed API keys {"keys": [{"principal", "hash", "roles"}]}'
    )
    rules_file: Path | None = Field(
        None,
        description='JSON file of authorization rules {"rules": [...]}; without it only role admin is '
        "allowed anything",
    )
    jwt: JwtSettings = JwtSettings()
    mtls_principal: bool = Field(
        False, description="a verified TLS client certificate's subject (RFC 4514) is the principal"
    )
