"""Settings of the TubeMQ side: the link pool, the producer, the embedded cluster, the consumer instances the
gateway serves, and TLS and authentication towards TubeMQ. Part of :mod:`gateway.config`, which re-exports
every name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator

from gateway.service.consume_limits import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_MESSAGES,
    DEFAULT_MAX_TIMEOUT,
    DEFAULT_PREFETCH_BYTES,
    DEFAULT_TIMEOUT,
    DEFAULT_WORKER_PREFETCH_BYTES,
    MAX_BYTES_LIMIT,
    MAX_MESSAGES_LIMIT,
)

__all__ = [
    "MIN_ID_SECRET",
    "ConsumerSettings",
    "EmbeddedSettings",
    "PoolSettings",
    "ProducerSettings",
    "TubeMQAuthSettings",
    "TubeMQSettings",
    "TubeMQTLSSettings",
]

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


class EmbeddedSettings(BaseModel):
    topics: str = Field(
        "demo:1:4",
        description="topics of the embedded cluster, name[:partitions[:stores]],...; the default gives demo "
        "4 stores of 1 partition (ids 0, 10000, 20000, 30000), so that each message has an offset of its "
        "partition's own",
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
    retry_secret: str = Field(
        "",
        description="secret signing the retry copies of nacked and expired messages (an instance delivers "
        "only copies signed for its group), at least 16 characters, the same on every replica and kept "
        "across restarts; empty: id_secret as configured, else in open mode a built-in key (serve "
        "--workers with authentication on: a secret of the run, lost at a restart)",
    )
    previous_retry_secrets: list[str] = Field(
        default_factory=list,
        description="former retry secrets (the signing one's, id_secret's when it signed), JSON list or "
        "comma-separated: copies signed with them are still delivered; keep one for max_nack_delay after "
        "a change, then remove it",
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
    max_retries_outstanding: int = Field(
        1000,
        ge=1,
        description="retries nacked with a delay and not due yet one consumer instance may have; a nack "
        "above it is refused (429). Nacks are publishes too: they spend the caller's publish rate "
        "(rate_limits) and the in-flight publish bytes (limits.max_inflight_publish_bytes)",
    )
    max_seek_searches: int = Field(
        2,
        ge=1,
        description="seeks by time one caller runs at once (per worker process; one seek at a time per "
        "instance in any case)",
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
    prefetch_bytes: int = Field(
        DEFAULT_PREFETCH_BYTES,
        ge=0,
        description="value bytes a consumer instance may hold fetched and not delivered before it stops "
        "fetching its next batches ahead of its client's next poll (REST, SSE, gRPC); 0: no fetching ahead "
        "(each poll fetches for itself)",
    )
    prefetch_worker_bytes: int = Field(
        DEFAULT_WORKER_PREFETCH_BYTES,
        ge=0,
        description="value bytes all consumer instances of one worker process may hold fetched and not "
        "delivered before they stop fetching ahead (bounds many instances x prefetch_bytes)",
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

    @field_validator("id_secret", "retry_secret")
    @classmethod
    def _long_enough(cls, value: str, info: ValidationInfo) -> str:
        if value and len(value) < MIN_ID_SECRET:
            raise ValueError(
                f"consumers.{info.field_name} must have at least {MIN_ID_SECRET} characters; "
                "generate one with: openssl rand -hex 32"
            )
        return value

    @field_validator("previous_retry_secrets")
    @classmethod
    def _all_long_enough(cls, value: list[str]) -> list[str]:
        if any(len(secret) < MIN_ID_SECRET for secret in value):
            raise ValueError(
                f"every consumers.previous_retry_secrets entry must have at least {MIN_ID_SECRET} characters"
            )
        return value

    @field_validator("forward_allow", "forward_ports", "previous_retry_secrets", mode="before")
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
    group_lag_cache_seconds: float = Field(
        2.0,
        ge=0,
        le=300,
        description="seconds a group's lag read for GET /v1/consumers/{group}/lag (gRPC GetGroupLag) is kept "
        "and served to every request (concurrent requests share one reading either way); 0 = not kept",
    )
    group_lag_reads_per_second: float = Field(
        5.0,
        ge=0,
        description="readings of a group's lag (three web API calls each) one caller may start per second on "
        "a gateway process (each of serve --workers N has its own budget; a burst of as many); answers kept "
        "or shared cost nothing; past it 429 / RESOURCE_EXHAUSTED; 0 = unlimited",
    )
