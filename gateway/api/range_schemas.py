"""Pydantic models that describe the exact-range routes (``routes_ranges.py``) in OpenAPI.

Documentation only: the routes answer plain dicts (a page holds up to 10000 messages), never these models.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.api.contract_types import Attributes

__all__ = ["PartitionOffsets", "PartitionOffsetsResponse", "RangeMessage", "RangePage"]


class PartitionOffsets(BaseModel):
    partitionKey: str = Field(description="brokerId:topic:partitionId")
    brokerId: int
    broker: str | None = Field(
        description="host:port of the broker; null unless the caller may describe_cluster (auth on)"
    )
    partitionId: int
    minOffset: int = Field(description="the first index offset the partition still holds")
    maxOffset: int = Field(description="the index offset the next message will get")


class PartitionOffsetsResponse(BaseModel):
    topic: str
    partitions: list[PartitionOffsets]


class RangeMessage(BaseModel):
    messageId: str = Field(description="broker-assigned 64-bit id, as a decimal string (as publish and poll)")
    offset: int | None = Field(description="the message's index offset")
    value: str = Field(description="the message value, base64")
    key: str | None = Field(
        description="the key the message was published with (TubeMQ attribute `$msgKey$`), null without one"
    )
    attributes: Attributes
    streamId: str | None = Field(description="TubeMQ stream id ($msgType$)")
    msgTime: str | None = Field(description="message time yyyyMMddHHmm (producer local time)")


class RangePage(BaseModel):
    topic: str
    partitionKey: str
    from_: int = Field(alias="from", description="the page's first index offset")
    to: int = Field(description="the end of the range asked for (exclusive)")
    next: int = Field(description="where the next page starts; the range is read when next == to")
    messages: list[RangeMessage]
