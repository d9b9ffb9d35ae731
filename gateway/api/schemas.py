"""Pydantic models that describe the REST contract in OpenAPI.

They document the wire shapes; the hot publish path parses JSON by hand (see ``publish_parse.py``) and builds
responses from plain dicts, so no model is instantiated per message.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from gateway.api.contract_types import Attributes, Encoding, MessageValue
from gateway.observability.logging import current_request_id


class ErrorBody(BaseModel):
    code: str = Field(description="machine-readable error kind, e.g. invalid_argument, payload_too_large")
    message: str = Field(description="what went wrong and what to do")
    field: str | None = Field(None, description="the offending request field, e.g. messages[3].attributes")
    index: int | None = Field(None, description="index of the offending message in the batch")
    limit: int | None = Field(None, description="the size limit in bytes (payload_too_large)")
    retryAfterSeconds: float | None = Field(
        None, description="when to retry (unavailable, rate_limited, conflict)"
    )
    tubemqErrorCode: int | None = Field(None, description="TubeMQ errCode when the broker refused")
    action: str | None = Field(None, description="the action no rule allows the caller (permission_denied)")
    resource: str | None = Field(None, description="what the action was on (permission_denied)")


class ErrorResponse(BaseModel):
    error: ErrorBody
    requestId: str | None = Field(
        None, description="the request's id, as in the X-Request-ID answer header: quote it when reporting"
    )


def error_document(error: dict[str, Any]) -> dict[str, Any]:
    """An ``ErrorResponse`` body as sent: ``{"error": ..., "requestId": ...}`` with the id of the request
    being served (the one answered in ``X-Request-ID``), for the client to quote."""
    document: dict[str, Any] = {"error": error}
    request_id = current_request_id()
    if request_id is not None:
        document["requestId"] = request_id
    return document


class MessageIn(BaseModel):
    value: MessageValue = Field(
        description="the message value; text for utf8, base64 text for base64, any JSON for json"
    )
    encoding: Encoding = Field("utf8", description="how `value` is written")
    key: str | None = Field(
        None,
        description="messages with one key go to one partition, in order; consumers get the key back (it "
        "travels as the TubeMQ attribute `$msgKey$`, which Java consumers read with getAttrValue)",
    )
    partition: int | None = Field(None, ge=0, description="index into GET /v1/topics/{topic} partitions")
    attributes: Attributes | None = Field(
        None,
        description="string attributes; ',' and '=' are reserved, and so are the names $msgType$, "
        "$msgTime$ and $msgKey$ (400)",
    )
    streamId: str | None = Field(None, description="TubeMQ stream id ($msgType$), used by consumer filters")
    msgTime: str | None = Field(None, description="message time yyyyMMddHHmm (producer local time)")


class PublishRequest(BaseModel):
    messages: list[MessageIn] = Field(description="1 to max_batch_messages messages")


class PublishResult(BaseModel):
    index: int
    status: int = Field(description="200 when a broker stored the message, else the HTTP-style status")
    partition: int | None = Field(None, description="index into the topic's partitions")
    partitionKey: str | None = Field(None, description="brokerId:topic:partitionId")
    brokerId: int | None = None
    partitionId: int | None = None
    offset: int | None = Field(None, description="index offset the broker appended the message at")
    messageId: str | None = Field(None, description="broker-assigned 64-bit id, as a decimal string")
    appendTime: int | None = Field(None, description="ms since epoch when the broker stored it")
    error: ErrorBody | None = None


class PublishResponse(BaseModel):
    topic: str
    results: list[PublishResult]


class PartitionOut(BaseModel):
    index: int
    brokerId: int
    broker: str | None = Field(
        description="host:port of the broker; null unless the caller may describe_cluster (auth on)"
    )
    partitionId: int
    partitionKey: str


class TopicResponse(BaseModel):
    topic: str
    maxMessageSize: int = Field(description="bytes; body plus attributes")
    partitions: list[PartitionOut]
    shieldedBrokers: list[int] = Field(description="broker ids the gateway avoids for now")
