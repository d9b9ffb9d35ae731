"""Pydantic models of the consumer REST contract (request bodies are validated with them; responses are built
from plain dicts on the hot path and documented by them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.contract_types import (
    Attributes,
    Encoding,
    LagSource,
    MessageValue,
    SeekPosition,
    SeekTime,
    StartOffsets,
    StartPosition,
    StreamFilters,
)

#: how a poll or stream shows values (the query parameter ``format``)
ValueFormat = Encoding


class CreateConsumerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topics: list[str] = Field(min_length=1, description="topics to consume")
    filters: StreamFilters | None = Field(None, description="stream ids to deliver, per topic")
    startPosition: StartPosition = Field("latest", description="where a new group starts")
    offsets: StartOffsets | None = Field(
        None, description="the start of each partition; startPosition offsets"
    )
    sessionKey: str | None = Field(
        None, description="offsets only: one key shared by every instance of the group taking part"
    )
    sourceCount: int = Field(1, ge=1, le=2**31 - 1, description="offsets only: how many instances take part")
    autoCommit: bool = Field(
        False,
        description="count every delivered message as committed when the next poll starts (or the "
        "instance is deleted); without it, commit tokens with POST .../commits",
    )
    maxBytes: int | None = Field(None, ge=1, description="default byte budget of this instance's polls")
    retryTopic: str | None = Field(
        None,
        description="topic the gateway republishes nacked and expired messages to, one at a time (the "
        "instance also consumes it and delivers them again when due); it must exist, and every instance of "
        "the group must name the same one",
    )
    deadLetterTopic: str | None = Field(
        None, description="topic a message goes to after maxDeliveryAttempts (needs retryTopic)"
    )
    maxDeliveryAttempts: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="deliveries before a nacked or expired message is dead-lettered (default 5 with a "
        "deadLetterTopic)",
    )
    ackDeadlineMs: int | None = Field(
        None,
        ge=1,
        description="milliseconds from delivery to a message's deadline (default: the gateway's commit "
        "timeout, at most consumers.max_ack_deadline); an expired message is redelivered",
    )


class CreateConsumerResponse(BaseModel):
    instanceId: str
    baseUrl: str = Field(description="URL of the instance; any replica also accepts the instance's paths")
    group: str
    autoCommit: bool


class ConsumedMessageOut(BaseModel):
    token: str = Field(description="commit token; also the SSE event id")
    topic: str
    partitionKey: str = Field(description="brokerId:topic:partitionId")
    brokerId: int
    partitionId: int
    offset: int | None = Field(
        description="broker index offset of the message; null unless its batch took one index entry per "
        "message up to the end of the store's index (TubeMQ sends no per-message offset; README, Consume)"
    )
    messageId: str = Field(description="broker-assigned 64-bit id, as a decimal string")
    key: str | None = Field(
        None,
        description="the key the message was published with (TubeMQ attribute `$msgKey$`), null without one",
    )
    streamId: str | None = None
    msgTime: str | None = Field(None, description="yyyyMMddHHmm, producer local time")
    attributes: Attributes
    deliveryAttempt: int = Field(
        description="1 on the first delivery; +1 for each nack and expired deadline (and rollback by this "
        "instance) of this message"
    )
    deadline: int = Field(
        description="Unix time in milliseconds when the message is redelivered unless committed or extended"
    )
    value: MessageValue = Field(description="the value in `encoding`")
    encoding: Encoding = Field(
        description="the requested format, or base64 for a value that is not valid UTF-8 (utf8) or JSON "
        "(json)"
    )


class PollResponse(BaseModel):
    messages: list[ConsumedMessageOut]


class CommitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[str] | None = Field(
        None, description="tokens to commit; omitted: everything delivered so far"
    )
    consumed: bool = Field(
        True,
        description="false rolls back instead: each named token's whole batch is redelivered, to this or "
        "another instance of the group",
    )


class CommitResponse(BaseModel):
    committed: int = Field(description="tokens accepted")
    rolledBack: int = Field(description="messages that will be delivered again")
    stale: list[str] = Field(
        description="tokens that were not pending: unknown, already committed, rolled back, past the commit "
        "timeout, or lost with their partition in a rebalance (their messages are redelivered)"
    )
    pending: int = Field(description="messages still delivered and not committed")
    awaitingBatch: int = Field(
        description="messages of the instance committed while the rest of their fetched batch is still out: "
        "TubeMQ confirms whole batches, so the broker records them once the batch is complete, or when the "
        "instance leaves the group (delete, lease end, gateway stop); if the gateway process dies first "
        "they are delivered again"
    )


class NackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[str] = Field(min_length=1, description="tokens of delivered messages to give back")
    delayMs: int = Field(0, ge=0, description="deliver them again no earlier than this many ms from now")


class NackResponse(BaseModel):
    retried: int = Field(description="messages stored in the retry topic, to be delivered again")
    deadLettered: int = Field(
        description="messages past maxDeliveryAttempts, stored in the dead-letter topic"
    )
    stale: list[str] = Field(description="tokens that were not pending")
    failed: list[str] = Field(
        description="tokens whose republish failed: still pending (nack again, or they expire)"
    )
    error: str | None = Field(None, description="why the first failed token failed")
    pending: int = Field(description="messages still delivered and not committed")


class DeadlineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[str] = Field(min_length=1, description="tokens of delivered messages")
    extendMs: int = Field(
        ge=1, description="new deadline: this many ms from now (at most consumers.max_ack_deadline)"
    )


class DeadlineResponse(BaseModel):
    extended: int
    stale: list[str] = Field(description="tokens that were not pending")
    deadline: int = Field(description="the new deadline, Unix time in milliseconds")


class SeekRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    position: SeekPosition = Field(
        description="earliest (the oldest message kept), latest (the end) or time for `partitions`, or "
        "offsets"
    )
    offsets: StartOffsets | None = Field(None, description="position offsets: where each partition goes")
    partitions: list[str] | None = Field(
        None,
        description="earliest, latest or time: the partition keys to move (default: every partition the "
        "instance holds, its retry topic's excepted)",
    )
    time: SeekTime | None = Field(
        None,
        description="position time: each partition moves to its first message whose msgTime (yyyyMMddHHmm, "
        "stamped by its producer, minute precision) is at or after this time's minute in `timeZone`; "
        "messages without a msgTime go with the next message that has one; a time before every message "
        "lands on the oldest kept, after every message on the end; with msgTimes out of offset order, on "
        "a message stamped at or after it whose predecessor is stamped before it (docs/consumers.md)",
    )
    timeZone: str | None = Field(
        None,
        description="position time: the IANA zone the producers stamp msgTime in (default: the gateway's "
        "local zone)",
        examples=["Asia/Shanghai"],
    )


class SeekedPartition(BaseModel):
    partitionKey: str
    currOffset: int = Field(description="the group's read position now (broker index offset)")
    maxOffset: int = Field(description="the partition's end")


class SeekResponse(BaseModel):
    partitions: list[SeekedPartition]


class PartitionLagOut(BaseModel):
    partitionKey: str
    brokerId: int
    partitionId: int
    committedOffset: int = Field(description="the group's committed offset (broker index offset)")
    endOffset: int = Field(description="the partition's end (index offset)")
    lag: int = Field(
        description="index entries between them: the messages not consumed when the partition has a store "
        "of its own, else an upper bound (the store's entries of every partition count)"
    )
    oldestUnconsumedMsgTime: str | None = Field(
        description="msgTime (yyyyMMddHHmm, set by its producer) of the oldest message not consumed, when "
        "it has one and the caller may read ranges; TubeMQ keeps no store time a client can read"
    )


class TopicLagOut(BaseModel):
    topic: str
    lag: int = Field(description="messages not consumed: per store its slowest partition, summed")
    partitions: list[PartitionLagOut]


class GroupLagResponse(BaseModel):
    group: str
    consumers: int | None = Field(
        description="clients the master lists in the group (any client, not only this gateway's)"
    )
    lag: int = Field(description="the topics' lag summed")
    topics: list[TopicLagOut]
    source: LagSource


class PartitionHeld(BaseModel):
    partitionKey: str
    topic: str
    brokerId: int
    partitionId: int
    currOffset: int
    maxOffset: int
    inUse: bool = Field(description="a fetched batch is not confirmed yet")


class InstanceResponse(BaseModel):
    instanceId: str
    baseUrl: str
    group: str
    autoCommit: bool
    partitions: list[PartitionHeld]
    pendingMessages: int
    bufferedMessages: int
