"""OpenAPI models of ``GET /v1/topics`` and ``GET /v1/consumers`` (``gateway/api/routes_overview.py``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.api.contract_types import BrokerState, ShieldReason, StreamFilters

__all__ = ["ConsumersOverviewResponse", "TopicsOverviewResponse"]


class TopicSummary(BaseModel):
    topic: str
    partitions: int | None = Field(
        description="partitions as this gateway routes them; null until it has routed the topic "
        "(getTopic routes it)"
    )
    brokerIds: list[int] = Field(description="brokers holding its partitions")
    shieldedBrokers: list[int] = Field(description="those of brokerIds the gateway avoids for now")
    publishedMessages: int = Field(description="messages stored by a broker since the gateway started")
    publishedBytes: int = Field(description="bytes (body and attributes) of those messages")
    publishErrors: int = Field(description="failed send attempts")


class BrokerSummary(BaseModel):
    brokerId: int
    broker: str | None = Field(description="host:port; null unless the caller may describe_cluster")
    state: BrokerState = Field(description="its circuit breaker's state")
    reason: ShieldReason | None = Field(description="why it was last shielded")
    shieldedForSeconds: float = Field(description="seconds of shielding left")
    consecutiveFailures: int
    sends: int = Field(description="send attempts to it")
    successes: int
    partitions: int = Field(description="partitions of the listed topics on it")


class TopicsOverviewResponse(BaseModel):
    topics: list[TopicSummary]
    brokers: list[BrokerSummary]


class PartitionLag(BaseModel):
    partitionKey: str
    topic: str
    brokerId: int
    partitionId: int
    currOffset: int = Field(description="where the group's next read starts (-1: unknown yet)")
    maxOffset: int = Field(description="end of the partition's store index (-1: unknown yet)")
    lag: int | None = Field(
        description="messages not yet read: (maxOffset - currOffset) / 28; an upper bound when the store "
        "holds several partitions; null until both offsets are known"
    )
    inUse: bool


class InstanceSummary(BaseModel):
    instanceId: str
    group: str
    owner: str = Field(description="the principal that created it (its identity, e.g. api_key:alice)")
    worker: int | None = Field(description="the worker process holding it (null: one process)")
    topics: StreamFilters = Field(description="topic -> stream id filter (empty: every message)")
    autoCommit: bool
    pendingMessages: int = Field(description="delivered and not committed")
    bufferedMessages: int = Field(description="fetched and not yet delivered")
    idleSeconds: float
    partitions: list[PartitionLag]


class GroupPartitionLag(BaseModel):
    partitionKey: str
    topic: str
    brokerId: int
    partitionId: int
    lag: int = Field(description="messages past the group's committed offset, as the broker reports them")


class GroupLag(BaseModel):
    group: str
    consumers: int = Field(description="clients the master lists in the group (any client); -1: unknown")
    readAt: int = Field(description="ms since epoch of the reading")
    partitions: list[GroupPartitionLag]


class ConsumersOverviewResponse(BaseModel):
    instances: list[InstanceSummary]
    groups: list[GroupLag] = Field(
        description="lag of the groups this replica has served, from TubeMQ's own offsets (stays when the "
        "consumers leave)"
    )
    incompleteWorkers: list[int] = Field(
        description="worker processes of this replica that did not answer (their instances are missing)"
    )
