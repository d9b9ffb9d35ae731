"""The producer's settings (:class:`ProducerConfig`) and what it tells about a published topic's routes."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tubemq.address import NodeAddress

__all__ = ["PartitionRoute", "ProducerConfig", "TopicRouteInfo"]


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Producer settings; times in seconds. Defaults follow the Java client where it has one.

    ``rpc_timeout`` bounds one master call and one send attempt; ``send_timeout`` is the default
    deadline of a whole ``send`` (all attempts); ``publish_timeout`` bounds ``publish``. Registration
    retries back off exponentially from ``register_backoff_base`` to ``register_backoff_max``.
    ``broker_refresh_interval``: how often a heartbeat asks for the full broker list (Java: 2 h).
    ``default_broker_port``: the port of a broker listed with a blank one; None = 8124 when the pool
    uses TLS, else 8123.
    ``master_failures_before_unready``: master calls in a row that no master answered before
    ``master_reachable`` turns False (one lost heartbeat in a master fail-over says little).
    The shielding and partition back-off parameters are those of ``BrokerBreaker`` and ``Partitioner``.
    """

    heartbeat_interval: float = 13.0
    rpc_timeout: float = 10.0
    send_timeout: float = 10.0
    publish_timeout: float = 30.0
    register_backoff_base: float = 1.0
    register_backoff_max: float = 30.0
    broker_refresh_interval: float = 7200.0
    max_send_attempts: int = 3
    unavailable_cooldown: float = 50.0
    quality_check_interval: float = 30.0
    failure_threshold: int = 3
    failure_window: float = 10.0
    failure_cooldown: float = 10.0
    max_shielded_share: float = 0.3
    partition_failure_limit: int = 3
    partition_delay: float = 3.0
    master_failures_before_unready: int = 3
    default_broker_port: int | None = None
    client_id: str | None = None
    local_ip: str | None = None

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "rpc_timeout", "send_timeout", "publish_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.master_failures_before_unready < 1:
            count = self.master_failures_before_unready
            raise ValueError(f"master_failures_before_unready must be at least 1, got {count}")
        if self.max_send_attempts < 1:
            raise ValueError(f"max_send_attempts must be at least 1, got {self.max_send_attempts}")
        if self.client_id is not None and not 0 < len(self.client_id.strip()) <= 1024:
            raise ValueError("client_id must be 1-1024 non-blank characters")


@dataclass(frozen=True, slots=True)
class PartitionRoute:
    """One partition in ``TopicRouteInfo``; ``index`` is what ``send(partition=...)`` takes."""

    index: int
    partition_key: str
    broker_id: int
    partition_id: int
    broker_address: NodeAddress
    available: bool


@dataclass(frozen=True, slots=True)
class TopicRouteInfo:
    """What the producer knows about a published topic; sizes in bytes."""

    topic: str
    max_msg_size: int
    partitions: tuple[PartitionRoute, ...]
