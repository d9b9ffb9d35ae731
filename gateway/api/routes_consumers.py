"""REST routes for consumer instances: create, poll, commit, nack, extend deadlines, seek, lag, stream (SSE),
describe, delete.

This module is the consumers router and its table: each route's path, method and OpenAPI description, in the
order the app (and openapi.yaml) lists them. The endpoints live by job: an instance's life in
``consumer_instances.py``, reading and settling messages in ``consumer_messages.py``, the event stream in
``consumer_stream.py``, a group's lag in ``consumer_lag.py``; what they share (the dependencies, where an
instance lives, the base URL of answers) in ``consumer_deps.py``.

Every route of an existing instance first asks the service who owns the id; an instance of another replica (or
of a sibling worker process of this one) is forwarded there (``gateway/api/forwarding.py``) and its answer
passed back as is.

Message rendering (and the ``format`` query parameter) is in ``gateway/api/consumer_render.py``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from gateway.api.consumer_deps import close_forwarder
from gateway.api.consumer_instances import create_consumer, delete_consumer, describe_consumer
from gateway.api.consumer_lag import get_group_lag
from gateway.api.consumer_messages import (
    commit_messages,
    extend_deadlines,
    nack_messages,
    poll_messages,
    seek_partitions,
)
from gateway.api.consumer_schemas import (
    CommitResponse,
    CreateConsumerResponse,
    DeadlineResponse,
    GroupLagResponse,
    InstanceResponse,
    NackResponse,
    PollResponse,
    SeekResponse,
)
from gateway.api.consumer_stream import stream_messages
from gateway.api.errors import RATE_LIMITED_DOC
from gateway.api.media_types import require_json_body
from gateway.api.schemas import ErrorResponse
from gateway.api.sse import EventStreamResponse

__all__ = ["close_forwarder", "router"]

router = APIRouter(prefix="/v1/consumers", tags=["consumers"])

# --- what the routes answer besides success, for the OpenAPI document --------------------------------

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "a parameter is invalid; `error.field` names it"},
    404: {"model": ErrorResponse, "description": "the instance id is malformed or belongs to another group"},
    410: {
        "model": ErrorResponse,
        "description": "the instance was deleted, expired, or its gateway is gone: create a new instance",
    },
    503: {
        "model": ErrorResponse,
        "description": "no master or owner replica answered in time; see Retry-After",
    },
}
_MEDIA_DOC: dict[str, Any] = {"model": ErrorResponse, "description": "a body that is not application/json"}
_SEEK_BUSY_DOC: dict[str, Any] = {
    "model": ErrorResponse,
    "description": "another seek is running on this instance (one at a time): retry after `Retry-After` "
    "seconds (also `error.retryAfterSeconds`)",
    "headers": {
        "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}
    },
}
_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `id` is the commit token, `data` a message as in pollMessages; "
        "an event `gone` carries the error body when the instance closes; an event `unavailable` carries "
        "the error body a poll answers with 503 (`retryAfterSeconds` included) while a broker outage leaves "
        "the instance's topics no partition, again after each retry delay, the stream staying open; "
        "`: keep-alive` comments keep proxies open",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}
# The stream's errors are JSON although its success is an event stream.
_STREAM_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {
        "description": doc["description"],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
    }
    for status, doc in _ERRORS.items()
}


# --- the routes, in the order they are listed -------------------------------------------------------

router.add_api_route(
    "/{group}",
    create_consumer,
    methods=["POST"],
    status_code=201,
    operation_id="createConsumer",
    summary="Join a consumer group with a new instance",
    response_model=CreateConsumerResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC, 429: RATE_LIMITED_DOC},
    dependencies=[Depends(require_json_body)],
)
router.add_api_route(
    "/{group}/instances/{instance_id}/messages",
    poll_messages,
    methods=["GET"],
    operation_id="pollMessages",
    summary="Long-poll for messages",
    response_model=PollResponse,
    responses=_ERRORS,
)
router.add_api_route(
    "/{group}/instances/{instance_id}/commits",
    commit_messages,
    methods=["POST"],
    operation_id="commitMessages",
    summary="Commit (or roll back) delivered messages",
    response_model=CommitResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
router.add_api_route(
    "/{group}/instances/{instance_id}/nacks",
    nack_messages,
    methods=["POST"],
    operation_id="nackMessages",
    summary="Give single messages back, to be delivered again after a delay",
    response_model=NackResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
router.add_api_route(
    "/{group}/instances/{instance_id}/deadlines",
    extend_deadlines,
    methods=["POST"],
    operation_id="extendDeadlines",
    summary="Extend the deadline of delivered messages",
    response_model=DeadlineResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
router.add_api_route(
    "/{group}/instances/{instance_id}/seek",
    seek_partitions,
    methods=["POST"],
    operation_id="seekPartitions",
    summary="Move the read position of partitions the instance holds",
    response_model=SeekResponse,
    responses={**_ERRORS, 409: _SEEK_BUSY_DOC, 415: _MEDIA_DOC, 429: RATE_LIMITED_DOC},
    dependencies=[Depends(require_json_body)],
)
router.add_api_route(
    "/{group}/lag",
    get_group_lag,
    methods=["GET"],
    operation_id="getGroupLag",
    summary="A consumer group's lag from TubeMQ's own offsets",
    response_model=GroupLagResponse,
    responses={
        400: _ERRORS[400],
        404: {"model": ErrorResponse, "description": "no broker holds an offset of the group"},
        429: RATE_LIMITED_DOC,
        503: {"model": ErrorResponse, "description": "TubeMQ's web API could not be read; see Retry-After"},
    },
)
router.add_api_route(
    "/{group}/instances/{instance_id}/stream",
    stream_messages,
    methods=["GET"],
    operation_id="streamMessages",
    summary="Push consumption as Server-Sent Events",
    response_class=EventStreamResponse,
    responses={**_SSE_DOC, **_STREAM_ERRORS},
)
router.add_api_route(
    "/{group}/instances/{instance_id}",
    describe_consumer,
    methods=["GET"],
    operation_id="describeConsumer",
    summary="Partitions held and messages pending",
    response_model=InstanceResponse,
    responses=_ERRORS,
)
router.add_api_route(
    "/{group}/instances/{instance_id}",
    delete_consumer,
    methods=["DELETE"],
    status_code=204,
    operation_id="deleteConsumer",
    summary="Leave the group",
    responses=_ERRORS,
)
