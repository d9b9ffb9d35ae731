"""What the consumer service answers and keeps: where another instance lives, an instance's
description, and the registry of this process's instances (shared by the service's collaborators)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gateway.service.instance import ConsumerInstance
from gateway.tubemq.consumer import AssignedPartition

__all__ = ["InstanceInfo", "InstanceState", "Owner", "Registry"]


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
    """This process's consumer instances: live ones by id and by core client id, those closing, why closed
    ones are gone, how many are joining, and the quota key each is counted under."""

    instances: dict[str, ConsumerInstance] = field(default_factory=dict)
    by_client: dict[str, ConsumerInstance] = field(default_factory=dict)
    #: instances taken out of ``instances`` whose close has not run to its end yet
    closing: dict[str, ConsumerInstance] = field(default_factory=dict)
    closed: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)  # id -> (reason, owner)
    creating: int = 0
    #: instance id -> the quota key it is counted under (see Quotas.claim_instance)
    quota_keys: dict[str, str] = field(default_factory=dict)
