"""REST routes for topics: publish messages and read the topic's routing metadata."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.api import publish_steps
from gateway.api.deps import PublishDep, get_runtime
from gateway.api.errors import RATE_LIMITED_DOC, STATUS_BY_KIND
from gateway.api.media_types import JSON, OCTETS
from gateway.api.publish_render import REPLAYED
from gateway.api.schemas import ErrorResponse, PublishRequest, PublishResponse, TopicResponse
from gateway.service.errors import ErrorKind

router = APIRouter(prefix="/v1/topics", tags=["topics"])


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "a field is invalid; `error.field` names it"},
    404: {"model": ErrorResponse, "description": "the topic has no publishable partitions"},
    413: {"model": ErrorResponse, "description": "a message or the body is too large; `error.limit`"},
    503: {"model": ErrorResponse, "description": "no broker can take the topic now; see Retry-After"},
}

_PUBLISH_BODY: dict[str, Any] = {
    "parameters": [
        {
            "name": publish_steps.IDEMPOTENCY_KEY,
            "in": "header",
            "required": False,
            "description": "a key of 1 to 255 visible ASCII characters (a UUID), optionally in double "
            "quotes: a retry with the same key (same principal, topic and request) within "
            "idempotency.window_seconds gets the first answer again, with Idempotent-Replayed: true, and "
            "stores nothing; see docs/idempotency.md",
            "schema": {"type": "string", "minLength": 1, "maxLength": 257},
        }
    ],
    "requestBody": {
        "required": True,
        # A Media Type Object has no `description` in OpenAPI 3.1: the octet-stream options are described
        # on the Request Body Object.
        "description": "application/json: a batch (PublishRequest). application/octet-stream: one raw "
        "message; options in X-TubeMQ-Key, X-TubeMQ-Partition, X-TubeMQ-Attributes (k=v,k2=v2), "
        "X-TubeMQ-Stream-Id, X-TubeMQ-Msg-Time",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    },
}


#: the header of an answer given again for a repeated Idempotency-Key
_REPLAYED_DOC: dict[str, Any] = {
    REPLAYED: {
        "description": "true: the first answer to this Idempotency-Key, given again; nothing was published",
        "schema": {"type": "string"},
    }
}

_MEDIA_DOC = f"Content-Type missing or not {JSON} (UTF-8) or {OCTETS}"


def status_of(kind: ErrorKind) -> int:
    return STATUS_BY_KIND[kind]


@router.post(
    publish_steps.PUBLISH_PATH.removeprefix("/v1/topics"),
    operation_id=publish_steps.PUBLISH_OPERATION_ID,
    summary="Publish a batch (JSON) or one raw message (octet-stream)",
    response_model=PublishResponse,
    responses={
        200: {"headers": _REPLAYED_DOC},
        207: {"model": PublishResponse, "description": "some messages failed", "headers": _REPLAYED_DOC},
        **_ERRORS,
        409: {
            "model": ErrorResponse,
            "description": "a request with this Idempotency-Key is still being published; see Retry-After",
            "headers": {
                "Retry-After": {
                    "description": "seconds to wait before retrying",
                    "schema": {"type": "integer"},
                }
            },
        },
        415: {"model": ErrorResponse, "description": _MEDIA_DOC},
        422: {
            "model": ErrorResponse,
            "description": "this Idempotency-Key was used for a request with another body or other options",
        },
        429: RATE_LIMITED_DOC,
    },
    openapi_extra=_PUBLISH_BODY,
)
async def publish_messages(topic: str, request: Request) -> Response:
    """200: every message was stored by a broker. 207: `results[i].status` says which were not. An answer
    replayed for a repeated `Idempotency-Key` carries `Idempotent-Replayed: true`."""
    # The steps of gateway/api/publish_steps.py; the services are looked up there rather than declared as
    # dependencies, so that the publish answered below ASGI, which has no dependency solving, takes them too.
    status, headers, body = await publish_steps.respond(
        topic, request.scope, request.receive, get_runtime(request)
    )
    response = Response(body, status)
    response.raw_headers = headers
    return response


@router.get(
    "/{topic}",
    operation_id="getTopic",
    summary="Partitions and brokers of a topic as the gateway sees them",
    response_model=TopicResponse,
    responses=_ERRORS,
)
async def get_topic(topic: str, service: PublishDep) -> dict[str, Any]:
    view = await service.topic(topic)
    return {
        "topic": view.topic,
        "maxMessageSize": view.max_message_size,
        "partitions": [
            {
                "index": p.index,
                "brokerId": p.broker_id,
                "broker": p.broker,
                "partitionId": p.partition_id,
                "partitionKey": p.key,
            }
            for p in view.partitions
        ],
        "shieldedBrokers": view.shielded_brokers,
    }


__all__ = ["PublishRequest", "router", "status_of"]
