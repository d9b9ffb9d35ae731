"""REST routes for consumer instances: create, poll, commit, stream (SSE), describe, delete.

Every route of an existing instance first asks the service who owns the id; an instance of another replica (or
of a sibling worker process of this one) is forwarded there (``gateway/api/forwarding.py``) and its answer
passed back as is.

Message rendering (and the ``format`` query parameter) is in ``gateway/api/consumer_render.py``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from gateway.api.consumer_render import render_events, render_poll, to_json
from gateway.api.consumer_schemas import (
    CommitRequest,
    CommitResponse,
    CreateConsumerRequest,
    CreateConsumerResponse,
    DeadlineRequest,
    DeadlineResponse,
    GroupLagResponse,
    InstanceResponse,
    NackRequest,
    NackResponse,
    PollResponse,
    SeekRequest,
    SeekResponse,
    ValueFormat,
)
from gateway.api.errors import RATE_LIMITED_DOC
from gateway.api.forwarding import Forwarder, check_passable
from gateway.api.media_types import require_json_body
from gateway.api.proxy import public_base_url, request_base_url
from gateway.api.schemas import ErrorResponse
from gateway.api.sse import EventStreamResponse
from gateway.runtime import Runtime
from gateway.service.consumers import ConsumerService, InstanceSpec, Owner
from gateway.service.errors import Gone, InvalidInput, Unavailable, renamed_fields
from gateway.service.group_lag_view import GroupLagView, read_group_lag
from gateway.tls import forwarding_ssl_context

__all__ = ["close_forwarder", "router"]

router = APIRouter(prefix="/v1/consumers", tags=["consumers"])
#: The service's parameter names -> this API's query parameter and header names.
_FIELDS = {
    "timeout": "timeout_ms",
    "resume_after": "Last-Event-ID",
    "delay": "delayMs",
    "extension": "extendMs",
    "time_zone": "timeZone",
}

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
_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `id` is the commit token, `data` a message as in pollMessages; "
        "an event `gone` carries the error body when the instance closes; `: keep-alive` comments keep "
        "proxies open",
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
#: SSE ``retry:`` hint, milliseconds a browser waits before reconnecting
SSE_RETRY_MS = 1000


# The dependencies are ``async def``: FastAPI runs a plain ``def`` one in its thread pool, and 20 streams
# opening at once then started 20 threads (each with a malloc arena of its own) that all built a Forwarder
# (an SSL context with the system CAs) at once: about 15 MB of peak RSS.


def _consumers(request: Request) -> ConsumerService:
    return _runtime(request).consumer_service()


async def get_consumers(request: Request) -> ConsumerService:
    return _consumers(request)


async def get_forwarder(request: Request) -> Forwarder:
    """The app's one forwarding client, built on first use (no await in between: built once)."""
    forwarder: Forwarder | None = getattr(request.app.state, "forwarder", None)
    if forwarder is None:
        service = _consumers(request)
        runtime = _runtime(request)
        settings = runtime.settings
        forwarder = Forwarder(
            service.advertised_url,
            service.peers,
            settings.consumers.forward_timeout,
            verify=forwarding_ssl_context(settings.tls, settings.consumers.forward_ca_file),
            siblings=runtime.worker.siblings() if runtime.worker is not None else None,
            worker=service.worker,
            secret=settings.consumers.id_secret.encode("utf-8"),
        )
        request.app.state.forwarder = forwarder
    return forwarder


async def close_forwarder(app: FastAPI) -> None:
    """Close the forwarding client (the app's lifespan calls this on shutdown)."""
    forwarder: Forwarder | None = getattr(app.state, "forwarder", None)
    app.state.forwarder = None
    if forwarder is not None:
        await forwarder.close()


ConsumersDep = Annotated[ConsumerService, Depends(get_consumers)]
ForwarderDep = Annotated[Forwarder, Depends(get_forwarder)]
InstanceId = Annotated[str, Path(description="the instanceId that createConsumer returned")]


def _owner(
    service: ConsumerService, forwarder: Forwarder, request: Request, group: str, instance_id: str
) -> Owner | None:
    """The owner to forward to, or None to serve here. A request forwarded by another replica is served here
    or takes one hop to a sibling worker; one that came from a sibling is served here. Else: 410. Headers
    that could not be passed on are refused (400) first, wherever the instance lives."""
    check_passable(request)
    owner = service.locate(group, instance_id)
    if owner is not None and (
        forwarder.was_hopped(request) or (not owner.sibling and forwarder.was_forwarded(request))
    ):
        service.instance(group, instance_id)  # raises Gone
    return owner


def _public_base(request: Request) -> str | None:
    """The base URL of the URLs in an answer (``baseUrl``, ``Location``): the one a trusted proxy names; else,
    for a lone replica with no advertised URL configured, the request's own (the URL the client reached it
    at: the replica's derived address may be one a client behind ``docker run -p`` or a port-forward cannot
    reach); else None: the owner's advertised URL."""
    public = public_base_url(request.scope)
    if public is None and _runtime(request).settings.consumers.lone_replica:
        public = request_base_url(request.scope)
    return public


# --- routes -----------------------------------------------------------------------------------------


@router.post(
    "/{group}",
    status_code=201,
    operation_id="createConsumer",
    summary="Join a consumer group with a new instance",
    response_model=CreateConsumerResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC, 429: RATE_LIMITED_DOC},
    dependencies=[Depends(require_json_body)],
)
async def create_consumer(
    group: str, body: CreateConsumerRequest, request: Request, service: ConsumersDep
) -> JSONResponse:
    """The instance lives in this gateway; its id works on every replica. It is closed after the lease
    (idle time) and its partitions go back to the group."""
    if _runtime(request).draining:
        raise Unavailable(
            "this gateway is shutting down; create the consumer instance through another replica",
            retry_after=1.0,
        )
    topics: dict[str, list[str] | None] = dict.fromkeys(body.topics)
    for topic, stream_ids in (body.filters or {}).items():
        if topic not in topics:
            raise InvalidInput(
                f"filters name topic {topic!r}, which is not in topics", field=f"filters.{topic}"
            )
        topics[topic] = stream_ids
    spec = InstanceSpec(
        topics=topics,
        start_position=body.startPosition,
        offsets=body.offsets,
        auto_commit=body.autoCommit,
        max_bytes=body.maxBytes,
        session_key=body.sessionKey,
        source_count=body.sourceCount,
        retry_topic=body.retryTopic,
        dead_letter_topic=body.deadLetterTopic,
        max_delivery_attempts=body.maxDeliveryAttempts,
        ack_deadline=None if body.ackDeadlineMs is None else body.ackDeadlineMs / 1000,
    )
    info = await service.create(group, spec)
    base_url = service.base_url(group, info.instance_id, _public_base(request))
    return JSONResponse(
        {"instanceId": info.instance_id, "baseUrl": base_url, "group": group, "autoCommit": info.auto_commit},
        status_code=201,
        headers={"Location": base_url},
    )


@router.get(
    "/{group}/instances/{instance_id}/messages",
    operation_id="pollMessages",
    summary="Long-poll for messages",
    response_model=PollResponse,
    responses=_ERRORS,
)
async def poll_messages(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    max_messages: Annotated[int | None, Query(ge=1, description="at most this many messages")] = None,
    max_bytes: Annotated[
        int | None, Query(ge=1, description="value bytes (before encoding); one larger message comes alone")
    ] = None,
    timeout_ms: Annotated[int | None, Query(ge=0, description="wait this long for a first message")] = None,
    format: Annotated[ValueFormat, Query(description="how values are shown")] = "base64",
) -> Response:
    """Answers as soon as messages are there, else after `timeout_ms` with none. The first poll of a new
    instance waits for its partition assignment."""
    timeout = None if timeout_ms is None else timeout_ms / 1000
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        wait = service.limits.timeout if timeout is None else timeout
        return await forwarder.forward(request, owner, extra_wait=max(wait, service.assignment_wait))
    with renamed_fields(_FIELDS):
        messages = await service.poll(
            group, instance_id, max_messages=max_messages, max_bytes=max_bytes, timeout=timeout
        )
    return Response(render_poll(messages, format), media_type="application/json")


@router.post(
    "/{group}/instances/{instance_id}/commits",
    operation_id="commitMessages",
    summary="Commit (or roll back) delivered messages",
    response_model=CommitResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
async def commit_messages(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    body: Annotated[CommitRequest | None, Body()] = None,
) -> Response:
    """`{"tokens": [...]}` commits those messages, `{}` everything delivered so far. A batch goes to the
    broker as consumed once all its messages are committed. `"consumed": false` rolls back instead."""
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    chosen = body or CommitRequest.model_validate({})
    result = await service.commit(group, instance_id, chosen.tokens, consumed=chosen.consumed)
    return _json(
        {
            "committed": result.committed,
            "rolledBack": result.rolled_back,
            "stale": result.stale,
            "pending": result.pending,
        }
    )


@router.post(
    "/{group}/instances/{instance_id}/nacks",
    operation_id="nackMessages",
    summary="Give single messages back, to be delivered again after a delay",
    response_model=NackResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
async def nack_messages(
    group: str,
    instance_id: InstanceId,
    body: NackRequest,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
) -> Response:
    """Each named message is republished to the instance's retryTopic (or, at its maxDeliveryAttempts, to
    its deadLetterTopic) and settled once a broker acknowledged that; its batch's other messages are not
    redelivered. It comes back no earlier than `delayMs` from now with `deliveryAttempt` one higher."""
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        # the owner republishes to the retry topic: a publish's own time, besides reaching the owner
        producer = _runtime(request).settings.producer
        return await forwarder.forward(request, owner, extra_wait=producer.send_timeout)
    with renamed_fields(_FIELDS):
        result = await service.nack(group, instance_id, body.tokens, delay=body.delayMs / 1000)
    return _json(
        {
            "retried": result.retried,
            "deadLettered": result.dead_lettered,
            "stale": result.stale,
            "failed": result.failed,
            "error": None if result.error is None else str(result.error),
            "pending": result.pending,
        }
    )


@router.post(
    "/{group}/instances/{instance_id}/deadlines",
    operation_id="extendDeadlines",
    summary="Extend the deadline of delivered messages",
    response_model=DeadlineResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
async def extend_deadlines(
    group: str,
    instance_id: InstanceId,
    body: DeadlineRequest,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
) -> Response:
    """The named messages are not redelivered before `extendMs` from now (unless rolled back or lost with
    their partition); a message's batch holds its partition meanwhile."""
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    with renamed_fields(_FIELDS):
        result = service.extend_deadlines(group, instance_id, body.tokens, seconds=body.extendMs / 1000)
    return _json({"extended": result.extended, "stale": result.stale, "deadline": result.deadline_ms})


@router.post(
    "/{group}/instances/{instance_id}/seek",
    operation_id="seekPartitions",
    summary="Move the read position of partitions the instance holds",
    response_model=SeekResponse,
    responses={**_ERRORS, 415: _MEDIA_DOC},
    dependencies=[Depends(require_json_body)],
)
async def seek_partitions(
    group: str,
    instance_id: InstanceId,
    body: SeekRequest,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
) -> Response:
    """With the rules of `startPosition`: `earliest`, `latest` or `time` for `partitions` (default: all the
    instance holds), or `offsets` (broker index offsets, as publish returns them; the broker clamps to what
    it keeps). `time` lands each partition on its first message whose msgTime is at or after the time's
    minute (docs/consumers.md, Seek).
    What the instance fetched or delivered of those partitions and did not commit is rolled back first
    (those tokens become stale); the group's next reads start at the new position."""
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner, extra_wait=service.seek_wait)
    with renamed_fields(_FIELDS):
        moved = await service.seek(
            group,
            instance_id,
            body.position,
            offsets=body.offsets,
            partitions=body.partitions,
            time=body.time,
            time_zone=body.timeZone,
        )
    return _json(
        {
            "partitions": [
                {"partitionKey": m.partition_key, "currOffset": m.curr_offset, "maxOffset": m.max_offset}
                for m in moved
            ]
        }
    )


@router.get(
    "/{group}/lag",
    operation_id="getGroupLag",
    summary="A consumer group's lag from TubeMQ's own offsets",
    response_model=GroupLagResponse,
    responses={
        400: _ERRORS[400],
        404: {"model": ErrorResponse, "description": "no broker holds an offset of the group"},
        503: {"model": ErrorResponse, "description": "TubeMQ's web API could not be read; see Retry-After"},
    },
)
async def get_group_lag(group: str, request: Request) -> Response:
    """Per topic and partition: the committed offset, the end, the lag in messages and the msgTime of the
    oldest unconsumed message where known. Read from the brokers, so right whether or not any instance
    (of any gateway or client) is alive."""
    runtime = _runtime(request)
    view = await read_group_lag(
        runtime.lag.reader if runtime.lag is not None else None,
        group,
        access=runtime.security.policy,
        ranges=runtime.ranges,
    )
    return _json(lag_body(view))


@router.get(
    "/{group}/instances/{instance_id}/stream",
    operation_id="streamMessages",
    summary="Push consumption as Server-Sent Events",
    response_class=EventStreamResponse,
    responses={**_SSE_DOC, **_STREAM_ERRORS},
)
async def stream_messages(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    max_messages: Annotated[int | None, Query(ge=1, description="messages fetched per step")] = None,
    max_bytes: Annotated[int | None, Query(ge=1, description="value bytes fetched per step")] = None,
    format: Annotated[ValueFormat, Query(description="how values are shown")] = "base64",
    last_event_id: Annotated[
        str | None, Query(description="resume after this event id (the Last-Event-ID header wins)")
    ] = None,
    last_event_header: Annotated[str | None, Header(alias="Last-Event-ID", include_in_schema=False)] = None,
) -> Response:
    """Each event is one message; its id is its commit token. Reconnecting with `Last-Event-ID` first sends
    again every message delivered after that id and not committed; without it, every delivered message not
    committed yet. With autoCommit, a message counts as committed once the stream moves past it; otherwise
    commit tokens with commitMessages (uncommitted messages hold their partition)."""
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.stream(request, owner)
    with renamed_fields(_FIELDS):
        cursor = service.open_stream(group, instance_id, last_event_header or last_event_id)
        bounds = service.limits.step(max_messages, max_bytes, cursor.instance.max_bytes)
    count = bounds.max_messages
    runtime = _runtime(request)
    # One step's batch is what a client that stops reading can leave unsent (besides the send buffer).
    size = min(bounds.max_bytes, runtime.settings.consumers.sse_max_unsent_bytes)
    keepalive = runtime.settings.consumers.sse_keepalive
    step = min(keepalive, 1.0)

    async def events() -> AsyncIterator[bytes]:
        async with service.using(cursor.instance):
            yield f"retry: {SSE_RETRY_MS}\n\n".encode()
            quiet_since = time.monotonic()
            # A draining gateway ends its streams (clients reconnect, after ``retry``) so that shutdown
            # does not wait for them.
            while not cursor.superseded and not runtime.draining:
                try:
                    messages = await cursor.next(count, size, step)
                except Gone as exc:
                    yield _gone_event(exc)
                    return
                if messages:
                    yield render_events(messages, format)
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= keepalive:
                    yield b": keep-alive\n\n"
                    quiet_since = time.monotonic()

    return EventStreamResponse(
        events(),
        write_timeout=runtime.settings.consumers.sse_write_timeout,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/{group}/instances/{instance_id}",
    operation_id="describeConsumer",
    summary="Partitions held and messages pending",
    response_model=InstanceResponse,
    responses=_ERRORS,
)
async def describe_consumer(
    group: str, instance_id: InstanceId, request: Request, service: ConsumersDep, forwarder: ForwarderDep
) -> Response:
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    state = service.describe(group, instance_id)
    return _json(
        {
            "instanceId": instance_id,
            "baseUrl": service.base_url(group, instance_id, _public_base(request)),
            "group": group,
            "autoCommit": state.info.auto_commit,
            "partitions": [
                {
                    "partitionKey": p.partition_key,
                    "topic": p.topic,
                    "brokerId": p.broker_id,
                    "partitionId": p.partition_id,
                    "currOffset": p.curr_offset,
                    "maxOffset": p.max_offset,
                    "inUse": p.in_use,
                }
                for p in state.partitions
            ],
            "pendingMessages": state.pending,
            "bufferedMessages": state.buffered,
        }
    )


@router.delete(
    "/{group}/instances/{instance_id}",
    status_code=204,
    operation_id="deleteConsumer",
    summary="Leave the group",
    responses=_ERRORS,
)
async def delete_consumer(
    group: str, instance_id: InstanceId, request: Request, service: ConsumersDep, forwarder: ForwarderDep
) -> Response:
    """Releases the instance's partitions; messages delivered and not committed are redelivered to the group
    (with autoCommit, what was delivered is committed first)."""
    owner = _owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    await service.delete(group, instance_id)
    return Response(status_code=204)


# --- rendering ----------------------------------------------------------------------------------------


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _json(payload: Any, status_code: int = 200) -> Response:
    return Response(to_json(payload), status_code, media_type="application/json")


def lag_body(view: GroupLagView) -> dict[str, Any]:
    return {
        "group": view.group,
        "consumers": view.consumers,
        "lag": view.lag,
        "topics": [
            {
                "topic": t.topic,
                "lag": t.lag,
                "partitions": [
                    {
                        "partitionKey": p.partition_key,
                        "brokerId": p.broker_id,
                        "partitionId": p.partition_id,
                        "committedOffset": p.committed_offset,
                        "endOffset": p.end_offset,
                        "lag": p.lag,
                        "oldestUnconsumedMsgTime": p.oldest_msg_time,
                    }
                    for p in t.partitions
                ],
            }
            for t in view.topics
        ],
    }


def _gone_event(exc: Gone) -> bytes:
    return b"event: gone\ndata: " + to_json({"error": exc.to_dict()}) + b"\n\n"
