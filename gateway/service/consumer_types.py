"""What the consumer service answers and keeps: where another instance lives, an instance's
description, the registry of this process's instances, and the state the service's parts share (declared
here, set by ``ConsumerService.__init__``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.service.consume_limits import PollLimits
from gateway.service.instance import ConsumerInstance
from gateway.service.peers import PeerPolicy
from gateway.service.retry_admission import RetryAdmission
from gateway.service.seek_admission import SeekAdmission
from gateway.tubemq.consumer import AssignedPartition, ConsumerConfig
from gateway.tubemq.net import ConnectionPool

__all__ = ["InstanceInfo", "InstanceState", "Owner", "Registry", "ServiceParts"]


@dataclass(frozen=True, slots=True)
class Owner:
    """Where another instance lives: another replica at ``url`` (``worker`` None; its gRPC port
    ``grpc_port`` when it serves gRPC), or this replica's sibling worker process ``worker`` (``url`` is then
    this replica's own advertised URL)."""

    url: str
    worker: int | None = None
    grpc_port: int | None = None

    @property
    def sibling(self) -> bool:
        return self.worker is not None


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    instance_id: str
    group: str
    owner_url: str
    client_id: str
    auto_commit: bool


@dataclass(frozen=True, slots=True)
class InstanceState:
    """An instance's identity, held partitions, delivered-uncommitted and buffered message counts."""

    info: InstanceInfo
    partitions: list[AssignedPartition]
    pending: int
    buffered: int


@dataclass(slots=True)
class Registry:
    instances: dict[str, ConsumerInstance] = field(default_factory=dict)
    by_client: dict[str, ConsumerInstance] = field(default_factory=dict)
    #: instances taken out of ``instances`` whose close has not run to its end yet
    closing: dict[str, ConsumerInstance] = field(default_factory=dict)
    closed: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)  # id -> (reason, owner)
    creating: int = 0
    #: instance id -> the quota key it is counted under (see Quotas.claim_instance)
    quota_keys: dict[str, str] = field(default_factory=dict)


class ServiceParts:
    """The state of a :class:`~gateway.service.consumers.ConsumerService` that its parts share."""

    advertised_url: str
    peers: PeerPolicy
    worker: int | None
    workers: int
    limits: PollLimits
    max_ack_deadline: float
    max_nack_delay: float
    _secret: bytes
    _registry: Registry
    _clock: Callable[[], float]
    _pool: ConnectionPool
    _consumer_config: ConsumerConfig
    _seeks: SeekAdmission
    _retry_admission: RetryAdmission
