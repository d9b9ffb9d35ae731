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
    store: str = Field(description="brokerId:topic:store; partitions of one store share its index")
    currOffset: int = Field(description="where the group's next read starts at the last fetch (-1: unknown)")
    maxOffset: int = Field(description="end of the partition's store index at the last fetch (-1: unknown)")
    readPosition: int = Field(
        description="newest known read position: currOffset or the group's committed offset at its last "
        "reading, whichever is further on (-1: unknown)"
    )
    deliveredTo: int = Field(
        description="just past the last message this instance delivered (committed or not) where its offset "
        "is known, else readPosition: how far the client has read; lag still counts from readPosition"
    )
    endOffset: int = Field(
        description="newest known end: maxOffset or the store's end at the group's last reading (-1: unknown)"
    )
    lag: int | None = Field(
        description="messages not yet read: (endOffset - readPosition) / 28; counts the store's entries of "
        "every partition past this one's position when the store holds several; null until both are known"
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
    lag: int = Field(description="the instance's lag: each store once, with its slowest partition")
    partitions: list[PartitionLag]


class GroupPartitionLag(BaseModel):
    partitionKey: str
    topic: str
    brokerId: int
    partitionId: int
    store: str = Field(description="brokerId:topic:store; partitions of one store share its index")
    committedOffset: int = Field(description="the group's committed offset at the broker (-1: unknown)")
    endOffset: int = Field(description="end of the store's index at the broker (-1: unknown)")
    lag: int = Field(description="messages past the group's committed offset, as the broker reports them")


class GroupLag(BaseModel):
    group: str
    consumers: int = Field(description="clients the master lists in the group (any client); -1: unknown")
    readAt: int = Field(description="ms since epoch of the reading")
    lag: int = Field(description="the group's lag: each store once, with its slowest partition")
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
