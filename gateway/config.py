"""Gateway settings: environment variables (prefix ``TUBEMQ_GATEWAY_``), an optional file, and CLI flags.

Nested groups use ``__`` in variable names, e.g. ``TUBEMQ_GATEWAY_PRODUCER__SEND_TIMEOUT=5``. Every knob
and its default is listed in docs/configuration.md. Only the adapters and the app import this module; the
client core takes plain constructor arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.service.consume_limits import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_MESSAGES,
    DEFAULT_MAX_TIMEOUT,
    DEFAULT_TIMEOUT,
    MAX_BYTES_LIMIT,
    MAX_MESSAGES_LIMIT,
)

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
)
CORS_EXPOSED_HEADERS = (
    "X-Request-ID",
    "Retry-After",
    "RateLimit",
    "RateLimit-Policy",
    "Location",
    "WWW-Authenticate",
)


def json_or_comma_list(value: Any) -> Any:
    """A list setting as an environment variable may give it: a JSON list or comma-separated items."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


#: shortest consumers.id_secret accepted
MIN_ID_SECRET = 16


class PoolSettings(BaseModel):
    connections_per_node: int = Field(
        1, ge=1, le=16, description="TCP links per broker or master, shared by every producer and consumer"
    )
    idle_timeout: float = Field(180.0, gt=0, description="seconds before an unused link is closed")
    connect_timeout: float = Field(3.0, gt=0, description="seconds to open a link")


class ProducerSettings(BaseModel):
    heartbeat_interval: float = Field(13.0, gt=0, description="seconds between master heartbeats")
    rpc_timeout: float = Field(10.0, gt=0, description="seconds for one master call or send attempt")
    send_timeout: float = Field(
        10.0, gt=0, description="seconds for one message to be acknowledged (all attempts)"
    )
    max_send_attempts: int = Field(3, ge=1, le=10, description="tries per message across brokers")
    failure_threshold: int = Field(
        3, ge=1, description="transport failures in the window that shield a broker"
    )
    failure_window: float = Field(10.0, gt=0, description="seconds over which broker failures are counted")
    failure_cooldown: float = Field(
        10.0, gt=0, description="seconds a failing broker gets no traffic (then one probe)"
    )
    unavailable_cooldown: float = Field(50.0, gt=0, description="seconds a broker answering 503 is shielded")
    max_shielded_share: float = Field(
        0.3, gt=0, le=1, description="largest share of brokers shielded at once"
    )
    master_failures_before_unready: int = Field(
        3,
        ge=1,
        description="master calls in a row without an answer before /readyz may turn unready (it stays "
        "ready while a published topic's cached route has a usable broker); also the answered heartbeats in "
        "a row that list no partition for any published topic (a broker outage) before /readyz turns unready",
    )


class LimitSettings(BaseModel):
    max_batch_messages: int = Field(1000, ge=1, description="messages per publish request")
    max_request_bytes: int = Field(
        21 * 1024 * 1024,
        ge=1024,
        description="bytes per publish request body (and gRPC request message): the largest message a "
        "TubeMQ broker accepts (20 MiB) sent raw, plus 1 MiB; a body is held whole while it is parsed",
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


class EmbeddedSettings(BaseModel):
    topics: str = Field(
        "demo:4", description="topics of the embedded cluster, name[:partitions[:stores]],..."
    )
    topics_file: Path | None = Field(
        None,
        description='JSON file of topics for the embedded cluster: {"topics": [{"name", "partitions", '
        '"stores"}]}',
    )
    brokers: int = Field(1, ge=1, le=16, description="brokers of the embedded cluster")
    data_dir: Path | None = Field(None, description="where the embedded cluster keeps data (memory if unset)")
    retention_bytes: int | None = Field(
        None,
        ge=0,
        description="payload bytes each embedded topic store keeps; older messages are deleted (checked "
        "every 10 s; a data file is compacted once half of it is deleted); unset: no limit",
    )
    retention_seconds: float | None = Field(
        None,
        gt=0,
        description="age after which embedded messages are deleted (checked every 10 s; the newest message "
        "of a store stays); unset: no limit",
    )
    fsync: bool = Field(
        False,
        description="with data_dir: fsync every append and offsets write, so acknowledged messages survive a "
        "power loss, not only a crash of the process (much slower; writes and payload reads run off the "
        "event loop either way)",
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


class ConsumerSettings(BaseModel):
    advertised_url: str | None = Field(
        None,
        description="base URL other replicas reach this one at (http://10.0.0.7:8080); default "
        "http(s)://<http_host>:<http_port> (https with tls.cert_file), with this host's IPv4 address when "
        "listening on 0.0.0.0",
    )
    id_secret: str = Field(
        "",
        description="secret signing instance ids, at least 16 characters, the same on every replica; "
        "generate one with openssl rand -hex 32; empty: a random per-process secret, allowed only for one "
        "replica in open mode",
    )
    replicas: int = Field(
        1, ge=1, description="replicas serving the same consumer groups; more than 1 requires id_secret"
    )
    forward_allow: list[str] = Field(
        default_factory=list,
        description="hosts other replicas may be reached at, to forward a consumer's requests: IP "
        "addresses, CIDR networks, host names or *.suffix patterns, JSON list or comma-separated; empty: "
        "forwarding off (410)",
    )

    @property
    def lone_replica(self) -> bool:
        """No other replica exists to reach this one: one replica, no advertised URL, no forwarding."""
        return self.advertised_url is None and self.replicas == 1 and not self.forward_allow

    forward_ports: list[int] = Field(
        default_factory=list,
        description="ports besides the advertised URL's port that forwarding may connect to",
    )
    forward_ca_file: Path | None = Field(
        None,
        description="PEM CAs verifying other replicas' certificates when forwarding over https "
        "(default: the system's CAs)",
    )
    lease: float = Field(300.0, gt=0, description="seconds an idle consumer instance lives")
    max_instances: int = Field(1000, ge=1, description="consumer instances this replica holds at most")
    commit_timeout: float = Field(
        60.0, gt=0, description="seconds until delivered, uncommitted messages are rolled back (redelivered)"
    )
    assignment_wait: float = Field(
        10.0, ge=0, description="seconds a new instance's first poll waits for its partitions"
    )
    max_ack_deadline: float = Field(
        600.0, gt=0, description="longest deadline a client may give delivered messages, seconds"
    )
    max_nack_delay: float = Field(
        600.0, ge=0, description="longest delay a client may give a nacked message, seconds"
    )
    forward_timeout: float = Field(2.0, gt=0, description="seconds to reach the replica owning an instance")
    # the defaults live beside the bounds they must respect (gateway/service/consume_limits.py)
    poll_max_messages: int = Field(
        DEFAULT_MAX_MESSAGES,
        ge=1,
        le=MAX_MESSAGES_LIMIT,
        description="default messages per poll",
    )
    poll_max_bytes: int = Field(
        DEFAULT_MAX_BYTES,
        ge=1,
        le=MAX_BYTES_LIMIT,
        description="default value bytes per poll",
    )
    poll_timeout: float = Field(
        DEFAULT_TIMEOUT, ge=0, description="default seconds a poll waits for a first message"
    )
    poll_max_timeout: float = Field(
        DEFAULT_MAX_TIMEOUT, gt=0, description="longest poll wait a client may ask for, seconds"
    )
    sse_keepalive: float = Field(15.0, gt=0, description="seconds between keep-alives on a quiet SSE stream")
    sse_max_unsent_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="value bytes an SSE stream fetches per step (a larger message comes alone): with the "
        "connection's send buffer, what a client that stops reading can hold",
    )
    sse_write_timeout: float = Field(
        30.0,
        gt=0,
        description="seconds an SSE client may go without taking what it was sent (a write waits, or sent "
        "bytes sit unsent, this long; also on a stream without autoCommit that has nothing more to send); "
        "then the stream is cut off (a final event: cut, offered for up to 1 s) and the connection dropped; "
        "messages delivered and not committed come again on the next stream",
    )
    heartbeat_interval: float = Field(13.0, gt=0, description="seconds between a consumer's heartbeats")
    empty_fetch_wait: float = Field(
        0.2, ge=0, description="seconds before a partition that had no message is fetched again (latency)"
    )
    empty_fetch_max_wait: float | None = Field(
        None,
        ge=0,
        description="empty fetches in a row double empty_fetch_wait up to this many seconds (default 10 x "
        "empty_fetch_wait); data resets it. Bounds what idle polls cost the brokers and how late new data "
        "on an idle partition is seen",
    )
    rebalance_commit_wait: float = Field(
        3.0, ge=0, description="seconds a partition leaving in a rebalance waits for its batch's commit"
    )

    @field_validator("id_secret")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if value and len(value) < MIN_ID_SECRET:
            raise ValueError(
                f"consumers.id_secret must have at least {MIN_ID_SECRET} characters; "
                "generate one with: openssl rand -hex 32"
            )
        return value

    @field_validator("forward_allow", "forward_ports", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("forward_allow")
    @classmethod
    def _valid_entries(cls, value: list[str]) -> list[str]:
        from gateway.service.peers import parse_allow_entry

        for entry in value:
            parse_allow_entry(entry)
        return value

    @field_validator("forward_ports")
    @classmethod
    def _valid_ports(cls, value: list[int]) -> list[int]:
        if any(not 0 < port < 65536 for port in value):
            raise ValueError("consumers.forward_ports must be ports in 1..65535")
        return value


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
        description="gzip level: 1 fastest (on poll answers level 6 takes 1.7-4.5x its CPU for bodies about "
        "a fifth smaller), 9 smallest",
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


class TubeMQTLSSettings(BaseModel):
    enabled: bool = Field(
        False,
        description="TLS to every TubeMQ master and broker; masters then take their TLS port (default 8716) "
        "and list brokers' TLS ports (default 8124); a master address without a port then means 8716",
    )
    ca_file: Path | None = Field(
        None, description="PEM file of the CAs that sign the TubeMQ certificates (default: the system's)"
    )
    cert_file: Path | None = Field(
        None, description="PEM client certificate for servers that ask for one (two-way TLS)"
    )
    key_file: Path | None = Field(None, description="PEM private key of cert_file (if not inside it)")
    server_hostname: str | None = Field(
        None,
        description="name the TubeMQ certificates must carry (default: each node's address as the master "
        "lists it)",
    )
    verify: bool = Field(
        True,
        description="check the certificate chain and host name; false encrypts without knowing who answers "
        "(tests only)",
    )

    @model_validator(mode="after")
    def _key_needs_cert(self) -> TubeMQTLSSettings:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("tubemq.tls.key_file is set without tubemq.tls.cert_file; set both or neither")
        return self


class TubeMQAuthSettings(BaseModel):
    username: str = Field(
        "",
        description="TubeMQ user name sent, signed, to masters and brokers (empty: no authentication); "
        "set both username and password or neither",
    )
    password: SecretStr = Field(
        SecretStr(""),
        description="password keying the signature (HMAC-SHA1); never logged or sent in clear; keep it in "
        "a Secret",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> TubeMQAuthSettings:
        if bool(self.username.strip()) != bool(self.password.get_secret_value()):
            raise ValueError(
                "tubemq.auth needs both username and password (or neither): set "
                "TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME and TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD"
            )
        return self


class TubeMQSettings(BaseModel):
    tls: TubeMQTLSSettings = TubeMQTLSSettings()
    auth: TubeMQAuthSettings = TubeMQAuthSettings()
    master_web_port: int = Field(
        8080,
        ge=0,
        le=65535,
        description="port of the masters' web API (master.ini webPort) on each master host: group offsets "
        "and lag are read there and from the brokers' web API (tubemq_gateway_group_lag_messages); 0 = do "
        "not read them",
    )
    group_lag_interval: float = Field(
        15.0, gt=0, description="seconds between two readings of the served consumer groups' offsets"
    )


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


class Settings(BaseSettings):
    """All gateway settings. ``masters`` empty means: run on the embedded cluster."""

    model_config = SettingsConfigDict(
        env_prefix="TUBEMQ_GATEWAY_",
        env_nested_delimiter="__",
        env_file=None,
        extra="ignore",
    )

    masters: str = Field("", description="TubeMQ master addresses host:port[,host:port...]; empty = embedded")
    http_host: str = Field("0.0.0.0", description="HTTP listen address")
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
    cors: CorsSettings = CorsSettings()
    compression: CompressionSettings = CompressionSettings()
    tracing: TracingSettings = TracingSettings()
    auth: AuthSettings = AuthSettings()
    supervisor: SupervisorSettings = SupervisorSettings()

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
